-- Lists filtered by a status a task passes through (pending, assigned,
-- running, preempted, suspended) read this index instead of walking the
-- tenant's whole history for the few tasks in that status
-- (docs/decisions/0085-history-stays-out-of-the-hot-paths.md). Final
-- tasks leave it, so it stays as small as the work in flight. The price:
-- an update that changes the status of an active task is no longer HOT
-- (decision 0004's reasoning for keeping status out of every index).
CREATE INDEX task_views_active_idx ON task_views (tenant_id, status, created_at DESC, id DESC)
    WHERE NOT deleted AND status IN ('pending', 'assigned', 'running', 'preempted', 'suspended');
