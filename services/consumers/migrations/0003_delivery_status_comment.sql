-- The statuses a delivery notifies, recorded in the catalog (the column's
-- comment in 0001 predates group alerts and names only the task ones):
-- a task's or a group's end, and a repeat group's circuit-breaker alert
-- (docs/api/webhooks.md). Documentation only; nothing changes.
COMMENT ON COLUMN webhook_deliveries.status IS
    'completed, failed, cancelled (a task''s or a task group''s end), circuit_open (a repeat group''s circuit-breaker alert)';
