-- The audit log lists entries newest first (docs/api/audit.md). Entries of
-- one timestamp were ordered by their random event ids, so one resource's
-- events recorded together (a failure and its retry, a group's creation
-- and its start) came back in either order. Each entry now keeps its
-- event's version within its aggregate, the order in which that
-- resource's events were recorded, and ties follow it: the listing orders
-- by timestamp, version and id, all descending, with its indexes to match.
ALTER TABLE audit_logs ADD COLUMN version bigint NOT NULL DEFAULT 0;

DROP INDEX audit_logs_tenant_time_idx;
DROP INDEX audit_logs_time_idx;
CREATE INDEX audit_logs_tenant_time_idx ON audit_logs (tenant_id, timestamp DESC, version DESC, id DESC);
CREATE INDEX audit_logs_time_idx ON audit_logs (timestamp DESC, version DESC, id DESC);

-- The entries already stored have no version (0). The audit projections
-- read their topics again from the start: each record stored before fills
-- in its entry's version and changes nothing else (the projection writes
-- an entry once, by event id; archived entries stay archived), so the
-- table becomes what a replay of the log writes.
DELETE FROM projection_offsets
WHERE projection IN ('audit_tasks', 'audit_orchestration', 'audit_pipeline', 'audit_quota', 'audit_admin');
