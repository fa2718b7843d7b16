-- The consumers service's read models (docs/architecture.md, "Event
-- consumers"). Every table here is derived from the task and quota topics,
-- except the webhook endpoints (tenants' settings), the delivery schedule
-- and attempts (the dispatcher's state) and the audit retention mark.

-- Audit log: one row per audited event (docs/api/audit.md), its id the
-- event id.
CREATE TABLE audit_logs (
    id          text        PRIMARY KEY,
    timestamp   timestamptz NOT NULL,
    tenant_id   text        NOT NULL,
    action      text        NOT NULL,
    resource    text        NOT NULL,
    resource_id text        NOT NULL,
    user_id     text        NOT NULL DEFAULT '',
    machine_id  text        NOT NULL DEFAULT '',
    details     json        NOT NULL DEFAULT '{}',
    ip          text        NOT NULL DEFAULT ''
);
-- Newest first, per tenant or across tenants (operators).
CREATE INDEX audit_logs_tenant_time_idx ON audit_logs (tenant_id, timestamp DESC, id DESC);
CREATE INDEX audit_logs_time_idx ON audit_logs (timestamp DESC, id DESC);

-- Rows older than archived_before were archived to the object store and
-- deleted; the projection does not write them again (a replay or a
-- redelivered record).
CREATE TABLE audit_retention (
    singleton       boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    archived_before timestamptz NOT NULL
);
INSERT INTO audit_retention (archived_before) VALUES ('-infinity');

-- Usage: the state of each task the metering needs, guarded by the task's
-- version, and one row per metered quantity, keyed by the event that
-- produced it.
CREATE TABLE usage_tasks (
    task_id          text        PRIMARY KEY,
    tenant_id        text        NOT NULL,
    version          bigint      NOT NULL,
    type             text        NOT NULL DEFAULT '',
    gpus             float8      NOT NULL DEFAULT 0,
    spec_queue       text        NOT NULL DEFAULT '',
    cluster_queue    text        NOT NULL DEFAULT '',
    -- The queue usage is counted under: admission's ClusterQueue, else
    -- the queue the task names.
    queue            text        NOT NULL DEFAULT '',
    flavor           text        NOT NULL DEFAULT '',
    model            text        NOT NULL DEFAULT '',
    resolution       text        NOT NULL DEFAULT '',
    video_seconds    float8      NOT NULL DEFAULT 0,
    attempt_id       text        NOT NULL DEFAULT '',
    attempt_started  timestamptz,
    -- The pipeline stage a stage task runs; '' for other tasks.
    stage            text        NOT NULL DEFAULT ''
);
CREATE TABLE usage_records (
    event_id    text        NOT NULL,
    kind        text        NOT NULL, -- gpu, cpu, video, stage
    tenant_id   text        NOT NULL,
    task_id     text        NOT NULL,
    at          timestamptz NOT NULL,
    queue       text        NOT NULL DEFAULT '',
    flavor      text        NOT NULL DEFAULT '',
    model       text        NOT NULL DEFAULT '',
    resolution  text        NOT NULL DEFAULT '',
    stage       text        NOT NULL DEFAULT '',
    quantity    float8      NOT NULL,
    PRIMARY KEY (event_id, kind)
);
CREATE INDEX usage_records_tenant_at_idx ON usage_records (tenant_id, at);
CREATE INDEX usage_records_at_idx ON usage_records (at);

-- Webhooks: each task's own endpoint (from its events), and one delivery
-- per notifiable event; the id is also the webhook-id header.
CREATE TABLE webhook_tasks (
    task_id   text   PRIMARY KEY,
    tenant_id text   NOT NULL,
    url       text   NOT NULL DEFAULT '',
    version   bigint NOT NULL
);
CREATE TABLE webhook_deliveries (
    id          text        PRIMARY KEY,
    event_id    text        NOT NULL,
    tenant_id   text        NOT NULL,
    task_id     text        NOT NULL,
    status      text        NOT NULL, -- completed, failed, cancelled
    url         text        NOT NULL DEFAULT '', -- '' = the tenant's default endpoint
    body        text        NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX webhook_deliveries_tenant_idx ON webhook_deliveries (tenant_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_task_idx ON webhook_deliveries (task_id);

-- The dispatcher's state of each delivery: pending (waiting for its next
-- attempt), sending (an attempt in flight until lease_until), delivered,
-- dead or skipped (no endpoint). Not derived from events: a replay leaves
-- it alone.
CREATE TABLE webhook_schedule (
    delivery_id     text        PRIMARY KEY REFERENCES webhook_deliveries (id),
    tenant_id       text        NOT NULL,
    state           text        NOT NULL,
    attempts        int         NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    deadline        timestamptz NOT NULL,
    lease_until     timestamptz,
    delivered_at    timestamptz,
    last_error      text        NOT NULL DEFAULT '',
    updated_at      timestamptz NOT NULL
);
CREATE INDEX webhook_schedule_due_idx ON webhook_schedule (next_attempt_at) WHERE state IN ('pending', 'sending');

CREATE TABLE webhook_attempts (
    delivery_id   text        NOT NULL REFERENCES webhook_deliveries (id),
    number        int         NOT NULL,
    at            timestamptz NOT NULL,
    url           text        NOT NULL,
    http_status   int         NOT NULL DEFAULT 0,
    error         text        NOT NULL DEFAULT '',
    duration_ms   bigint      NOT NULL,
    response_body text        NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, number)
);

-- A tenant's default endpoint and signing secret (sealed with the
-- service's key: the secret must be read back to sign).
CREATE TABLE webhook_endpoints (
    tenant_id         text        PRIMARY KEY,
    url               text        NOT NULL DEFAULT '',
    secret_sealed     bytea,
    secret_created_at timestamptz,
    updated_at        timestamptz NOT NULL
);
