-- The scheduler's inline projection: one row per task, the state claims and
-- single-task reads decide from. It is updated in the same transaction as
-- the task's events and can be rebuilt from them alone (doc holds the whole
-- domain state; the other columns are what queries filter and order on).
CREATE TABLE tasks (
    id                  text        PRIMARY KEY,
    tenant_id           text        NOT NULL,
    status              text        NOT NULL,
    priority            int         NOT NULL,
    type                text        NOT NULL,
    machine_id          text        NOT NULL DEFAULT '',
    target_ip           text        NOT NULL DEFAULT '',
    labels              text[]      NOT NULL DEFAULT '{}',
    depends_on          text[]      NOT NULL DEFAULT '{}',
    fanout_id           text        NOT NULL DEFAULT '',
    scatter             boolean     NOT NULL DEFAULT false,
    group_id            text        NOT NULL DEFAULT '',
    agent_id            text        NOT NULL DEFAULT '',
    assigned_machine_id text        NOT NULL DEFAULT '',
    attempt_id          text        NOT NULL DEFAULT '',
    lease_expires_at    timestamptz,
    timeout_at          timestamptz,
    retry_at            timestamptz NOT NULL,
    preempted_by        text        NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    deleted             boolean     NOT NULL DEFAULT false,
    version             bigint      NOT NULL,
    doc                 jsonb       NOT NULL
);

-- Claims walk pending tasks in (priority, created_at) order.
CREATE INDEX tasks_claim_idx ON tasks (priority, created_at) WHERE status = 'pending' AND NOT deleted;
-- The sweeper finds expired leases and overdue attempts.
CREATE INDEX tasks_lease_idx ON tasks (lease_expires_at) WHERE status IN ('assigned', 'running');
CREATE INDEX tasks_timeout_idx ON tasks (timeout_at) WHERE status = 'running';
CREATE INDEX tasks_agent_idx ON tasks (agent_id) WHERE status IN ('assigned', 'running');
CREATE INDEX tasks_attempt_idx ON tasks (attempt_id) WHERE attempt_id <> '';
CREATE INDEX tasks_preempted_by_idx ON tasks (preempted_by) WHERE status = 'preempted';
CREATE INDEX tasks_fanout_idx ON tasks (fanout_id, assigned_machine_id) WHERE fanout_id <> '';
CREATE INDEX tasks_tenant_created_idx ON tasks (tenant_id, created_at DESC, id DESC) WHERE NOT deleted;

-- Create idempotency: (tenant, request_id) → the tasks of the first create.
CREATE TABLE create_requests (
    tenant_id  text        NOT NULL,
    request_id text        NOT NULL,
    task_ids   text[]      NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, request_id)
);

-- Claim idempotency: (agent, request_id) → the tasks leased by the first claim.
CREATE TABLE claims (
    agent_id    text        NOT NULL,
    request_id  text        NOT NULL,
    task_ids    text[]      NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (agent_id, request_id)
);
CREATE INDEX claims_created_idx ON claims (created_at);

-- Agents as their heartbeats describe them (operational state, not events).
CREATE TABLE agents (
    agent_id          text        PRIMARY KEY,
    machine_id        text        NOT NULL,
    tenant_id         text        NOT NULL DEFAULT '',
    labels            text[]      NOT NULL DEFAULT '{}',
    ip                text        NOT NULL DEFAULT '',
    free_slots        int         NOT NULL DEFAULT 0,
    first_seen_at     timestamptz NOT NULL,
    last_heartbeat_at timestamptz NOT NULL,
    -- When the agent counts as lost unless it heartbeats again.
    lost_after        timestamptz NOT NULL,
    lost              boolean     NOT NULL DEFAULT false
);
CREATE INDEX agents_lost_idx ON agents (lost_after) WHERE NOT lost;
