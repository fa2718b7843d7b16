-- A create's request id (its idempotency key, and the name its task is
-- also found by) is forgotten with the task it names, the create's first:
-- the history archiver deletes it in the transaction that deletes the
-- task (docs/operations.md, "Database size"). This index finds it there
-- without a scan of every request id ever recorded.
CREATE INDEX create_requests_first_task_idx ON create_requests ((task_ids[1]));
