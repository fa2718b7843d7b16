// Package tasks turns the scheduler's task events (taskmesh.task.events.v1)
// into workload facts for the admission loop: a projection.Handler whose
// writes commit with the consumer's offsets.
//
// A fact is written only for an event newer than the last one seen of its
// task (workload_task_versions), so redelivered or replayed records change
// nothing. Tasks that never had a ClusterQueue leave no row at all.
package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/quantity"
)

// Facts is the projection.Handler.
type Facts struct{}

// Fact is what one task event means for its workload; Kind "" means
// nothing.
type Fact struct {
	app.Fact
	// Opens: the fact may start tracking a task (it names a queue).
	Opens bool
}

// Convert maps one task event to its fact (pure).
func Convert(ev *taskv1.TaskEvent) (Fact, error) {
	f := Fact{Fact: app.Fact{TaskID: ev.GetAggregateId(), TaskVersion: ev.GetVersion(), TenantID: ev.GetTenantId()}}
	queue := func(cq string, spec *taskv1.TaskSpec, created time.Time) error {
		reqs, err := quantity.MilliMap(spec.GetResources())
		if err != nil {
			// The scheduler validated the spec; a bad quantity here is
			// recorded as asking for nothing rather than stalling the
			// projection.
			reqs = map[string]int64{}
		}
		f.Kind, f.Opens, f.ClusterQueue, f.Created, f.Requests = app.FactQueue, true, cq, created, reqs
		f.Priority = Priority(spec.GetPriority())
		return nil
	}
	switch e := ev.GetEvent().(type) {
	case *taskv1.TaskEvent_Submitted:
		if cq := e.Submitted.GetClusterQueue(); cq != "" {
			return f, queue(cq, e.Submitted.GetSpec(), ev.GetOccurredAt().AsTime())
		}
	case *taskv1.TaskEvent_Updated:
		if cq := e.Updated.GetClusterQueue(); cq != "" {
			return f, queue(cq, e.Updated.GetSpec(), time.Time{})
		}
		f.Kind, f.Reason = app.FactFinish, "the task no longer needs admission"
	case *taskv1.TaskEvent_RetryScheduled:
		f.Kind, f.Reason = app.FactRequeue, "retry"
	case *taskv1.TaskEvent_Requeued:
		f.Kind, f.Reason = app.FactRequeue, e.Requeued.GetReason()
	case *taskv1.TaskEvent_Succeeded:
		f.Kind, f.Reason = app.FactFinish, "succeeded"
	case *taskv1.TaskEvent_Failed:
		f.Kind, f.Reason = app.FactFinish, "failed"
	case *taskv1.TaskEvent_Canceled:
		f.Kind, f.Reason = app.FactFinish, "canceled"
	case *taskv1.TaskEvent_Suspended:
		f.Kind, f.Reason = app.FactFinish, "suspended"
	case *taskv1.TaskEvent_LeaseExpired:
		if e.LeaseExpired.GetFailed() {
			f.Kind, f.Reason = app.FactFinish, "lease expired"
		}
	case *taskv1.TaskEvent_Deleted:
		f.Kind, f.Reason = app.FactDelete, "deleted"
	case *taskv1.TaskEvent_Expired:
		f.Kind, f.Reason = app.FactDelete, "expired"
	}
	return f, nil
}

// Priority maps a task priority (1 most important … 10) to Kueue's scale,
// where higher is more important.
func Priority(taskPriority int32) int {
	return 11 - int(taskPriority)
}

// Apply implements projection.Handler.
func (Facts) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	b := &pgx.Batch{}
	for _, r := range records {
		var ev taskv1.TaskEvent
		if err := proto.Unmarshal(r.Value, &ev); err != nil {
			return fmt.Errorf("decode task event at %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		f, err := Convert(&ev)
		if err != nil {
			return err
		}
		if f.Kind == "" {
			continue
		}
		var reqs any
		if f.Requests != nil {
			rb, err := json.Marshal(f.Requests)
			if err != nil {
				return fmt.Errorf("encode requests: %w", err)
			}
			reqs = string(rb)
		}
		var created any
		if !f.Created.IsZero() {
			created = f.Created
		}
		guard := `UPDATE workload_task_versions SET version = $2 WHERE task_id = $1 AND version < $2 RETURNING 1`
		if f.Opens {
			guard = `INSERT INTO workload_task_versions (task_id, version) VALUES ($1, $2)
				ON CONFLICT (task_id) DO UPDATE SET version = EXCLUDED.version
				WHERE workload_task_versions.version < EXCLUDED.version RETURNING 1`
		}
		b.Queue(`WITH g AS (`+guard+`)
			INSERT INTO workload_facts (task_id, task_version, kind, tenant_id, cluster_queue, priority, created_at, requests, reason)
			SELECT $1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9 FROM g`,
			f.TaskID, f.TaskVersion, string(f.Kind), f.TenantID, f.ClusterQueue, f.Priority, created, reqs, f.Reason)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record workload facts: %w", err)
	}
	return nil
}
