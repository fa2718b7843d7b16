-- task_views is built from the Kafka task topic (package projection): what
-- lists and searches read. It lags the inline tasks table by the relay and
-- projection delay; single-task reads use tasks for read-your-writes.
CREATE TABLE task_views (
    id                  text        PRIMARY KEY,
    tenant_id           text        NOT NULL,
    status              text        NOT NULL,
    priority            int         NOT NULL,
    type                text        NOT NULL,
    name                text        NOT NULL,
    machine_id          text        NOT NULL DEFAULT '',
    assigned_machine_id text        NOT NULL DEFAULT '',
    group_id            text        NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    deleted             boolean     NOT NULL DEFAULT false,
    version             bigint      NOT NULL,
    doc                 jsonb       NOT NULL
);
CREATE INDEX task_views_list_idx ON task_views (tenant_id, created_at DESC, id DESC) WHERE NOT deleted;
CREATE INDEX task_views_status_idx ON task_views (tenant_id, status, created_at DESC) WHERE NOT deleted;

-- audit_logs, one row per task event, from the same topic (the action of
-- each event: docs/events.md#task-events).
CREATE TABLE audit_logs (
    id          text        PRIMARY KEY, -- the event id
    timestamp   timestamptz NOT NULL,
    tenant_id   text        NOT NULL,
    action      text        NOT NULL,
    resource    text        NOT NULL,
    resource_id text        NOT NULL,
    user_id     text        NOT NULL DEFAULT '',
    machine_id  text        NOT NULL DEFAULT '',
    details     jsonb       NOT NULL DEFAULT '{}',
    ip          text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_logs_tenant_time_idx ON audit_logs (tenant_id, timestamp);
CREATE INDEX audit_logs_resource_idx ON audit_logs (resource, resource_id);
