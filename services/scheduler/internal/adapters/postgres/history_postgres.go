package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// SaveNew records whole lifecycles of tasks that are not stored yet —
// each list of records starts with the task's TaskSubmitted — through the
// same write path a command takes: the events encoded by the codec and
// appended to the event store, and the tasks rows written from the fold,
// all in tx with one statement each. It returns the tasks as stored. A
// history loader (docs/operations.md, "Measuring at scale") uses it to
// write weeks of tasks in set-based batches instead of one command at a
// time.
func SaveNew(ctx context.Context, tx pgx.Tx, lifecycles [][]domain.Record) ([]domain.Task, error) {
	changes := make([]change, len(lifecycles))
	for i, recs := range lifecycles {
		if _, err := submittedID(recs); err != nil {
			return nil, err
		}
		changes[i] = change{Records: recs}
	}
	return save(ctx, tx, changes...)
}
