-- The sweeper looks for pending tasks whose dependency failed; only tasks
-- with dependencies need looking at.
CREATE INDEX tasks_blocked_idx ON tasks (id) WHERE status = 'pending' AND NOT deleted AND cardinality(depends_on) > 0;

-- Lists read task_views, not tasks: this index only cost every write.
DROP INDEX tasks_tenant_created_idx;

-- Heartbeats look attempts up to tell agents which to stop; finished
-- attempts need no entry (an unknown attempt is stopped anyway).
DROP INDEX tasks_attempt_idx;
CREATE INDEX tasks_attempt_idx ON tasks (attempt_id)
    WHERE status IN ('assigned', 'running', 'cancelled', 'preempted', 'suspended');
