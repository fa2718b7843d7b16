package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// AttemptFiles is what an attempt keeps beyond its process
// (docs/api/tasks.md#checkpoints, #artifacts): whether the task
// checkpoints cooperatively and which output globs it declared. Journaled
// when the attempt is claimed, in its own table, so a restarted agent
// still knows them.
type AttemptFiles struct {
	Checkpoint bool
	Artifacts  []string
}

// Zero reports whether there is nothing to keep.
func (f AttemptFiles) Zero() bool { return !f.Checkpoint && len(f.Artifacts) == 0 }

const filesSchema = `
CREATE TABLE IF NOT EXISTS attempt_files (
    attempt_id TEXT PRIMARY KEY,
    checkpoint INTEGER NOT NULL DEFAULT 0,
    artifacts  TEXT NOT NULL DEFAULT '[]'
);
`

// SetAttemptFiles journals f for attemptID (a zero f stores nothing).
func (j *Journal) SetAttemptFiles(ctx context.Context, attemptID string, f AttemptFiles) error {
	if f.Zero() {
		return nil
	}
	globs, _ := json.Marshal(nonNil(f.Artifacts))
	_, err := j.db.ExecContext(ctx, `INSERT INTO attempt_files (attempt_id, checkpoint, artifacts) VALUES (?,?,?)
ON CONFLICT (attempt_id) DO UPDATE SET checkpoint = excluded.checkpoint, artifacts = excluded.artifacts`,
		attemptID, b2i(f.Checkpoint), string(globs))
	if err != nil {
		return fmt.Errorf("journal attempt files %s: %w", attemptID, err)
	}
	return nil
}

// AttemptFiles returns what was journaled for attemptID (zero if nothing).
func (j *Journal) AttemptFiles(ctx context.Context, attemptID string) (AttemptFiles, error) {
	var (
		f     AttemptFiles
		cp    int
		globs string
	)
	err := j.db.QueryRowContext(ctx, `SELECT checkpoint, artifacts FROM attempt_files WHERE attempt_id = ?`, attemptID).Scan(&cp, &globs)
	if errors.Is(err, sql.ErrNoRows) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("read attempt files %s: %w", attemptID, err)
	}
	f.Checkpoint = cp == 1
	if err := json.Unmarshal([]byte(globs), &f.Artifacts); err != nil {
		return f, fmt.Errorf("read attempt files %s: %w", attemptID, err)
	}
	return f, nil
}
