-- Admission: a pending task with a ClusterQueue is claimable only once the
-- quota service admitted it. The claim index leaves waiting tasks out, so
-- thousands of them queued for quota cost claims nothing.
ALTER TABLE tasks ADD COLUMN awaiting_admission boolean NOT NULL DEFAULT false;

DROP INDEX tasks_claim_idx;
CREATE INDEX tasks_claim_idx ON tasks (priority, created_at)
    WHERE status = 'pending' AND NOT deleted AND NOT awaiting_admission;
