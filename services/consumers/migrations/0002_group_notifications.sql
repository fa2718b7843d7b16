-- A task group's own endpoint (from its TaskGroupCreated event), read when
-- the group ends to notify it once (docs/api/webhooks.md).
CREATE TABLE webhook_groups (
    group_id  text PRIMARY KEY,
    tenant_id text NOT NULL,
    url       text NOT NULL DEFAULT '' -- '' = the tenant's default endpoint
);

-- What a delivery notifies: a task (task_id is the task's id) or a task
-- group (task_id is the group's id: its end or its breaker's alert). The
-- two consumers that write deliveries are replayed and compared apart by it.
ALTER TABLE webhook_deliveries ADD COLUMN subject text NOT NULL DEFAULT 'task';
UPDATE webhook_deliveries SET subject = 'task_group' WHERE status = 'circuit_open';
