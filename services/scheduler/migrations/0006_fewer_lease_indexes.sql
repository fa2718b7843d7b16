-- A lease writes a new task row version; every index it touches costs.
-- The preemption bound (max priority of leased tasks, once a second) reads
-- the lease index instead of one of its own, and heartbeats find an agent's
-- attempts through the agent index instead of an attempt index.
DROP INDEX tasks_leased_priority_idx;
DROP INDEX tasks_attempt_idx;
DROP INDEX tasks_agent_idx;
CREATE INDEX tasks_agent_idx ON tasks (agent_id)
    WHERE status IN ('assigned', 'running', 'cancelled', 'preempted', 'suspended');
