-- Task documents are written on every event and read whole; nothing on a
-- hot path queries inside them. json keeps the text as written (smaller
-- than jsonb's binary form here) and skips jsonb's conversion on every
-- write. The few queries that look inside (the preemption choice, refreshing
-- spec columns) work on json as well.
ALTER TABLE tasks ALTER COLUMN doc TYPE json USING doc::json;
ALTER TABLE task_views ALTER COLUMN doc TYPE json USING doc::json;
ALTER TABLE audit_logs ALTER COLUMN details TYPE json USING details::json;
ALTER TABLE audit_logs ALTER COLUMN details SET DEFAULT '{}'::json;
