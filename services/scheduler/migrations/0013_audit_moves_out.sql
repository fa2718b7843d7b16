-- The audit log is the consumers service's (schema consumers), rebuilt
-- there from the task and quota topics; the scheduler no longer writes it.
DROP TABLE audit_logs;
