// Package views builds the scheduler's read model from the Kafka task
// topic (a projection handler for platform/projection): task_views for
// lists and searches. (The audit trail is the consumers service's.)
//
// The handler has the shape of every projection: Decode the batch's
// records once, a pure Convert of the decoded events into the operations
// on its table (ConvertTaskViews), and a Store that applies them in the
// runner's transaction, guarded by the task's version so that applying an
// operation twice changes nothing. Converts read nothing but the events —
// no clock, no database — so a replay into fresh tables reproduces the
// live ones exactly, and they are tested without a database. Text a
// column cannot hold (NUL, invalid UTF-8) is cleaned the same way live and
// on replay (pg.CleanText).
package views

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Event is one record of the task topic, decoded.
type Event struct {
	Envelope *taskv1.TaskEvent
	Record   domain.Record
}

// Decode decodes a batch of task-topic records. A record that does not
// decode, or holds an event this build has no case for, fails the batch
// (the runner retries it, then a replay can be run once the code knows it).
func Decode(records []*kgo.Record) ([]Event, error) {
	out := make([]Event, len(records))
	for i, rec := range records {
		env, r, err := codec.Unmarshal(rec.Value)
		if err != nil {
			return nil, fmt.Errorf("task event at %d/%d: %w", rec.Partition, rec.Offset, err)
		}
		out[i] = Event{Envelope: env, Record: r}
	}
	return out, nil
}

// TaskViews is the projection.Handler of task_views.
type TaskViews struct{ Table string }

// Apply implements projection.Handler.
func (v TaskViews) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	events, err := Decode(records)
	if err != nil {
		return fmt.Errorf("task_views: %w", err)
	}
	return TaskViewStore(v).Store(ctx, tx, ConvertTaskViews(events))
}
