// Package views builds the scheduler's read models from the Kafka task
// topic and the orchestration topic (projection handlers for
// platform/projection): task_views for lists and searches, audit_logs for
// the audit trail of tasks, task groups and templates.
//
// Every handler has the same shape: Decode the batch's records once, a pure
// Convert of the decoded events into the operations on its table
// (ConvertTaskViews, ConvertAudit), and a Store that applies them in the
// runner's transaction, guarded so that applying an operation twice changes
// nothing (task_views by the task's version, audit_logs by the event id).
// Converts read nothing but the events — no clock, no database — so a
// replay into fresh tables reproduces the live ones exactly, and they are
// tested without a database.
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

// ReadModels is the projection.Handler of both read models: each batch is
// decoded once and fed to both, in the runner's one transaction. Records
// of the orchestration topic (task groups and templates) only add audit
// rows.
type ReadModels struct {
	// TaskViews and AuditLogs name the tables (normally "task_views" and
	// "audit_logs"; replays use fresh ones).
	TaskViews, AuditLogs string
	// OrchestrationTopic names the topic whose records are orchestration
	// events; every other record is a task event.
	OrchestrationTopic string
}

// Apply implements projection.Handler.
func (m ReadModels) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	tasks, orchestration := records, []*kgo.Record(nil)
	if m.OrchestrationTopic != "" {
		tasks = make([]*kgo.Record, 0, len(records))
		for _, rec := range records {
			if rec.Topic == m.OrchestrationTopic {
				orchestration = append(orchestration, rec)
			} else {
				tasks = append(tasks, rec)
			}
		}
	}
	events, err := Decode(tasks)
	if err != nil {
		return err
	}
	if err := (TaskViewStore{Table: m.TaskViews}).Store(ctx, tx, ConvertTaskViews(events)); err != nil {
		return err
	}
	rows, err := ConvertAudit(events)
	if err != nil {
		return err
	}
	orchestrationEvents, err := DecodeOrchestration(orchestration)
	if err != nil {
		return err
	}
	more, err := ConvertOrchestrationAudit(orchestrationEvents)
	if err != nil {
		return err
	}
	return AuditStore{Table: m.AuditLogs}.Store(ctx, tx, append(rows, more...))
}

// TaskViews is the projection.Handler of task_views alone.
type TaskViews struct{ Table string }

// Apply implements projection.Handler.
func (v TaskViews) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	events, err := Decode(records)
	if err != nil {
		return fmt.Errorf("task_views: %w", err)
	}
	return TaskViewStore(v).Store(ctx, tx, ConvertTaskViews(events))
}

// AuditLogs is the projection.Handler of audit_logs alone.
type AuditLogs struct{ Table string }

// Apply implements projection.Handler.
func (a AuditLogs) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	events, err := Decode(records)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	rows, err := ConvertAudit(events)
	if err != nil {
		return err
	}
	return AuditStore(a).Store(ctx, tx, rows)
}
