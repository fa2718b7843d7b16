-- Definitions (inline projections of the cluster-queue/, cohort/ and
-- local-queue/ aggregates). spec is the protobuf spec message.
CREATE TABLE cluster_queues (
    name       text PRIMARY KEY,
    spec       bytea NOT NULL,
    origin     text  NOT NULL,
    updated_at timestamptz NOT NULL
);

CREATE TABLE cohorts (
    name       text PRIMARY KEY,
    spec       bytea NOT NULL,
    origin     text  NOT NULL,
    updated_at timestamptz NOT NULL
);

CREATE TABLE local_queues (
    name       text PRIMARY KEY,
    spec       bytea NOT NULL,
    origin     text  NOT NULL,
    updated_at timestamptz NOT NULL
);

-- One row whose generation grows with every change of cluster_queues or
-- cohorts. Writers take it FOR UPDATE, the admission loop FOR SHARE in
-- each cycle: a definition change and an admission cycle never interleave,
-- so a queue cannot be deleted while the loop admits into it.
CREATE TABLE definitions_generation (
    id         int PRIMARY KEY CHECK (id = 1),
    generation bigint NOT NULL
);
INSERT INTO definitions_generation VALUES (1, 0);

-- Workloads (inline projection of the workload/ aggregates), written only
-- by the admission loop. Finished rows are kept until the task is deleted:
-- a suspended or failed task may be queued again.
CREATE TABLE workloads (
    task_id       text PRIMARY KEY,
    tenant_id     text        NOT NULL,
    cluster_queue text        NOT NULL,
    priority      int         NOT NULL,
    created_at    timestamptz NOT NULL,
    requests      jsonb       NOT NULL,
    task_version  bigint      NOT NULL,
    -- pending, admitted, evicting or finished.
    state         text        NOT NULL,
    flavors       jsonb,
    borrowing     boolean     NOT NULL DEFAULT false,
    admitted_at   timestamptz,
    preemptor     text        NOT NULL DEFAULT '',
    reason        text        NOT NULL DEFAULT '',
    -- The workload aggregate's version (its last event).
    version       bigint      NOT NULL
);

-- No index besides the key: every admission cycle rewrites its rows, and
-- without indexed columns changing those updates stay HOT. Counting a
-- queue's admitted work (deleting a queue) scans, which is rare.

-- Task lifecycle facts the task-topic projection hands to the admission
-- loop, in arrival order. The loop is the only writer of workload events,
-- so it consumes them in its cycle's transaction and deletes them.
CREATE TABLE workload_facts (
    seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id       text        NOT NULL,
    task_version  bigint      NOT NULL,
    -- queue (a new stay with the given spec), requeue (a new stay with the
    -- known spec), finish, or delete (finish and forget).
    kind          text        NOT NULL,
    tenant_id     text        NOT NULL DEFAULT '',
    cluster_queue text        NOT NULL DEFAULT '',
    priority      int         NOT NULL DEFAULT 0,
    created_at    timestamptz,
    requests      jsonb,
    reason        text        NOT NULL DEFAULT ''
);

-- The last task event version the projection turned into a fact, per task
-- that ever had a ClusterQueue: redelivered or replayed events change
-- nothing.
CREATE TABLE workload_task_versions (
    task_id text PRIMARY KEY,
    version bigint NOT NULL
);
