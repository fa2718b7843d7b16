-- Every task event rewrites its task_views row. With only indexes on
-- columns that never change after submission (id, tenant, created_at) and
-- free space left on each page, those rewrites are HOT updates: no index
-- entries to add. Lists filtered by status walk the tenant's newest tasks
-- and filter, which is what their pagination does anyway.
DROP INDEX task_views_status_idx;
ALTER TABLE task_views SET (fillfactor = 70);
