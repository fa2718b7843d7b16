-- Audit rows are read by tenant and time; a task's own timeline is its
-- events. One index less per audit row.
DROP INDEX audit_logs_resource_idx;
-- More room per page: a task_views row is rewritten on every event, and an
-- update that fits on its page (HOT) writes no index entries.
ALTER TABLE task_views SET (fillfactor = 50);
