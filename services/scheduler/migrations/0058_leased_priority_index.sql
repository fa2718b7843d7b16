-- The sweeper's preemption check is bounded by the lowest priority being
-- run, max(priority) of the leased tasks, once a second. Read from the
-- lease index it visited every leased row and every dead version of one
-- since the last vacuum: under a burn-down of 100,000 tasks that was a
-- bitmap scan of 45,000 index entries and 6,700 heap pages, 150-870 ms
-- of server time a second. An index of its own answers it from its last
-- live entry; it costs one index entry per lease.
CREATE INDEX tasks_leased_priority_idx ON tasks (priority) WHERE status IN ('assigned', 'running');
