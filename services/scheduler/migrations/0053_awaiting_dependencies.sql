-- A pending task with a dependency that has not completed waits for it
-- (docs/decisions/0087-waiting-dependents-out-of-the-claim-path.md). The
-- claim indexes leave such tasks out, as they leave out tasks waiting for
-- admission, so a large DAG waiting behind its root costs claims nothing:
-- before, every claim walked every blocked task and checked its
-- dependencies again. The flag is set when a pending task with
-- dependencies is written and cleared in the transaction that completes
-- its last dependency; claims still check the dependencies themselves.
ALTER TABLE tasks ADD COLUMN awaiting_dependencies boolean NOT NULL DEFAULT false;

UPDATE tasks t SET awaiting_dependencies = true
WHERE t.status = 'pending' AND NOT t.deleted AND cardinality(t.depends_on) > 0
  AND EXISTS (SELECT 1 FROM unnest(t.depends_on) AS d(id) LEFT JOIN tasks dt ON dt.id = d.id
              WHERE dt.id IS NULL OR dt.status <> 'completed');

-- The waiting dependents of a task, found when it completes.
CREATE INDEX tasks_dependents_idx ON tasks USING gin (depends_on) WHERE awaiting_dependencies;

DROP INDEX tasks_claim_open_idx;
DROP INDEX tasks_claim_machine_idx;
DROP INDEX tasks_claim_address_idx;
DROP INDEX tasks_claim_labelled_idx;
CREATE INDEX tasks_claim_open_idx ON tasks (priority, created_at)
    WHERE status = 'pending' AND NOT deleted AND NOT awaiting_admission AND NOT awaiting_dependencies
      AND labels = '{}' AND machine_id = '' AND target_ip = '';
CREATE INDEX tasks_claim_machine_idx ON tasks (machine_id, priority, created_at)
    WHERE status = 'pending' AND NOT deleted AND NOT awaiting_admission AND NOT awaiting_dependencies AND machine_id <> '';
CREATE INDEX tasks_claim_address_idx ON tasks (target_ip, priority, created_at)
    WHERE status = 'pending' AND NOT deleted AND NOT awaiting_admission AND NOT awaiting_dependencies
      AND machine_id = '' AND target_ip <> '';
CREATE INDEX tasks_claim_labelled_idx ON tasks (labels, priority, created_at)
    WHERE status = 'pending' AND NOT deleted AND NOT awaiting_admission AND NOT awaiting_dependencies
      AND machine_id = '' AND target_ip = '' AND labels <> '{}';
