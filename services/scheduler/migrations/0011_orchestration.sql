-- Task groups (the orchestration aggregate): the group row and its member
-- rows are the inline projection of the group's events, written in the
-- same transaction as the events and as the member tasks a decision
-- creates or cancels; both are rebuilt from the events alone (doc holds
-- the whole state, the other columns are what queries filter on).
CREATE TABLE task_groups (
    id         text        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    -- Create idempotency: a tenant's request id names one group.
    request_id text        NOT NULL DEFAULT '',
    name       text        NOT NULL,
    mode       text        NOT NULL,
    status     text        NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    -- When a running repeat may start its next run without a member
    -- changing (interval_sec, backoff_sec): the process manager looks again.
    wake_at    timestamptz,
    deleted    boolean     NOT NULL DEFAULT false,
    version    bigint      NOT NULL,
    doc        json        NOT NULL
);
CREATE INDEX task_groups_list_idx ON task_groups (tenant_id, created_at DESC, id DESC) WHERE NOT deleted;
CREATE UNIQUE INDEX task_groups_request_idx ON task_groups (tenant_id, request_id) WHERE request_id <> '';
CREATE INDEX task_groups_wake_idx ON task_groups (wake_at) WHERE wake_at IS NOT NULL AND NOT deleted;

-- One row per member (a repeat: per run attempt). status mirrors the
-- member task's status as the group last saw it.
CREATE TABLE task_group_members (
    group_id text   NOT NULL,
    key      text   NOT NULL,
    position int    NOT NULL,
    task_id  text   NOT NULL DEFAULT '',
    status   text   NOT NULL,
    -- The group's version after the member last changed: a watcher reads
    -- only what changed since the version it has.
    version  bigint NOT NULL,
    doc      json   NOT NULL,
    PRIMARY KEY (group_id, key)
);
CREATE INDEX task_group_members_version_idx ON task_group_members (group_id, version);
-- Decisions read a group's open members only; the reconcile looks for open
-- members whose task moved on. Finished members of a long repeat cost
-- neither.
CREATE INDEX task_group_members_open_idx ON task_group_members (group_id)
    WHERE status NOT IN ('completed', 'failed', 'cancelled');

-- Templates, per tenant (the template aggregate's inline projection).
CREATE TABLE templates (
    tenant_id text    NOT NULL,
    id        text    NOT NULL,
    category  text    NOT NULL DEFAULT '',
    deleted   boolean NOT NULL DEFAULT false,
    version   bigint  NOT NULL,
    doc       json    NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
