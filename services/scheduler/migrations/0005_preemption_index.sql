-- The sweeper's preemption check starts from the lowest priority that is
-- running (max(priority) among leased tasks): an index answers it at once.
CREATE INDEX tasks_leased_priority_idx ON tasks (priority) WHERE status IN ('assigned', 'running');
