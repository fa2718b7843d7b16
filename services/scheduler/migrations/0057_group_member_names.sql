-- A released group member's key (a DAG member's id, "download") names its
-- task on the task routes, as a create's request id does: the newest of
-- the tenant's groups with a member of that key wins
-- (docs/api/tasks.md, "The client's id"). Unreleased members have no
-- task and are left out.
CREATE INDEX task_group_members_key_idx ON task_group_members (key) WHERE task_id <> '';
