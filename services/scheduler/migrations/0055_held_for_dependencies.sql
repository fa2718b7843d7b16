-- A task with dependencies that waits in a ClusterQueue enters the queue
-- only once its dependencies have completed (TaskDependenciesMet;
-- docs/api/quota.md, "Which work waits, and where"). Admitted before, it
-- held quota it could not use, and in a queue too small for both it kept
-- its own dependency from ever being admitted. The index holds exactly
-- the tasks held now (few: they wait for running work), among them those
-- to release.
ALTER TABLE tasks ADD COLUMN held_for_dependencies boolean NOT NULL DEFAULT false;

CREATE INDEX tasks_held_idx ON tasks (created_at)
    WHERE held_for_dependencies AND status = 'pending' AND NOT deleted;
