-- Ended tasks in the order the history archiver takes them, oldest change
-- first (docs/operations.md, "Database size"). A task enters this index
-- once, when it ends; open tasks are not in it.
CREATE INDEX tasks_ended_idx ON tasks (updated_at, id)
    WHERE status IN ('completed', 'failed', 'cancelled') OR deleted;

-- How far the archiver has forgotten: every ended task at or below
-- (updated_at, task_id) that it could archive is gone from the database
-- and lives in an archive. `taskmesh replay` compares task_views above it.
CREATE TABLE task_archive_horizon (
    id         int         PRIMARY KEY CHECK (id = 1),
    updated_at timestamptz NOT NULL,
    task_id    text        NOT NULL
);
INSERT INTO task_archive_horizon VALUES (1, '-infinity', '');
