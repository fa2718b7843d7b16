-- Claims read only the pending tasks the claiming agent may take
-- (docs/decisions/0085-history-stays-out-of-the-hot-paths.md). Walking
-- tasks_claim_idx, one index over every pending task, made an agent pass,
-- in priority order, every task it may not take — a backlog waiting for a
-- GPU pool whose machines are busy, tasks for other machines — on every
-- claim. Each pending task is in exactly one of these four. tasks_claim_idx
-- stays for the sweeper's preemption check, which looks at every pending
-- task by priority whoever may take it.
-- No labels, no target: any agent may take them.
CREATE INDEX tasks_claim_open_idx ON tasks (priority, created_at)
    WHERE status = 'pending' AND NOT deleted AND NOT awaiting_admission
      AND labels = '{}' AND machine_id = '' AND target_ip = '';
-- For one machine.
CREATE INDEX tasks_claim_machine_idx ON tasks (machine_id, priority, created_at)
    WHERE status = 'pending' AND NOT deleted AND NOT awaiting_admission AND machine_id <> '';
-- For one address.
CREATE INDEX tasks_claim_address_idx ON tasks (target_ip, priority, created_at)
    WHERE status = 'pending' AND NOT deleted AND NOT awaiting_admission AND machine_id = '' AND target_ip <> '';
-- Labelled, by label set: a claim skips from set to set and reads the
-- sets within its agent's labels.
CREATE INDEX tasks_claim_labelled_idx ON tasks (labels, priority, created_at)
    WHERE status = 'pending' AND NOT deleted AND NOT awaiting_admission
      AND machine_id = '' AND target_ip = '' AND labels <> '{}';
