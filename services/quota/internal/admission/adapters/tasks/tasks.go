// Package tasks turns the scheduler's task events (the task topic) into
// workload facts for the admission loop: WorkloadFacts is a
// projection.Handler whose writes commit with the consumer's offsets.
//
// It has the shape of every projection: a pure Convert of each event into
// the fact it means for the task's workload, and a Store that records the
// facts in their order, guarded by the task's version.
//
// A fact is written only for an event newer than the last one seen of its
// task (workload_task_versions), so redelivered or replayed records change
// nothing. Tasks that never had a ClusterQueue leave no row at all.
package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
)

// WorkloadFacts is the projection.Handler that records the workload facts
// of task events.
type WorkloadFacts struct {
	// Facts and Versions name the tables (workload_facts and
	// workload_task_versions when empty; a replay gives fresh ones).
	Facts, Versions string
}

func (w WorkloadFacts) tables() (facts, versions string) {
	facts, versions = "workload_facts", "workload_task_versions"
	if w.Facts != "" {
		facts = w.Facts
	}
	if w.Versions != "" {
		versions = w.Versions
	}
	return pgx.Identifier{facts}.Sanitize(), pgx.Identifier{versions}.Sanitize()
}

// Fact is what one task event means for its workload; Kind "" means
// nothing.
type Fact struct {
	app.Fact
	// Opens: the fact may start tracking a task (it names a queue).
	Opens bool
}

// ErrUnknownEvent is returned by Convert for an event it has no case for.
var ErrUnknownEvent = errors.New("workload facts: no case for the task event")

// Convert maps one task event to its fact (pure). Every event has a case:
// one that makes a fact, or one that says the event means nothing to the
// workload (Kind ""). An event without a case — one added to the task
// lifecycle after this was written — is ErrUnknownEvent, which the
// lifecycle-coverage test turns into a failure.
func Convert(ev *taskv1.TaskEvent) (Fact, error) {
	f := Fact{Fact: app.Fact{TaskID: ev.GetAggregateId(), TaskVersion: ev.GetVersion(), TenantID: ev.GetTenantId()}}
	queue := func(cq string, spec *taskv1.TaskSpec, created time.Time) Fact {
		return Fact{Fact: app.QueueFact(f.TaskID, f.TaskVersion, f.TenantID, cq, spec.GetPriority(), created, spec.GetResources()),
			Opens: true}
	}
	switch e := ev.GetEvent().(type) {
	case *taskv1.TaskEvent_Submitted:
		if cq := e.Submitted.GetClusterQueue(); cq != "" && !e.Submitted.GetHeldForDependencies() {
			return queue(cq, e.Submitted.GetSpec(), ev.GetOccurredAt().AsTime()), nil
		}
		// No queue: the task needs no admission. Held for its
		// dependencies: it enters the queue with TaskDependenciesMet.
	case *taskv1.TaskEvent_Updated:
		switch cq := e.Updated.GetClusterQueue(); {
		case cq == "":
			f.Kind, f.Reason = app.FactFinish, "the task no longer needs admission"
		case e.Updated.GetHeldForDependencies():
			// Out of the queue (its earlier stay ends) until its new
			// dependencies have completed.
			f.Kind, f.Reason = app.FactFinish, "the task waits for its dependencies"
		default:
			return queue(cq, e.Updated.GetSpec(), time.Time{}), nil
		}
	case *taskv1.TaskEvent_DependenciesMet:
		return queue(e.DependenciesMet.GetClusterQueue(), e.DependenciesMet.GetSpec(), ev.GetOccurredAt().AsTime()), nil
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
		// Retried: the task keeps its admission, another agent takes it.
	case *taskv1.TaskEvent_Deleted:
		f.Kind, f.Reason = app.FactDelete, "deleted"
	case *taskv1.TaskEvent_Expired:
		f.Kind, f.Reason = app.FactDelete, "expired"
	case *taskv1.TaskEvent_Admitted:
		// This service's own decision, echoed by the scheduler.
	case *taskv1.TaskEvent_Leased, *taskv1.TaskEvent_Started, *taskv1.TaskEvent_Progressed,
		*taskv1.TaskEvent_LeaseRenewed:
		// The admitted workload holds its quota while it runs.
	case *taskv1.TaskEvent_Preempted:
		// The workload keeps its usage until its agent stopped and the
		// scheduler requeued the task (Requeued).
	case *taskv1.TaskEvent_Checkpointed:
		// Saving a checkpoint changes nothing the quota counts: the
		// preemption or suspension around it does.
	default:
		// No event (an empty record, a tombstone) or one added to the
		// lifecycle after this build: nothing to make a fact of.
		return Fact{}, fmt.Errorf("%w: task %s v%d", ErrUnknownEvent, ev.GetAggregateId(), ev.GetVersion())
	}
	return f, nil
}

// Priority maps a task priority (1 most important … 10) to Kueue's scale,
// where higher is more important (app.WorkloadPriority).
func Priority(taskPriority int32) int { return app.WorkloadPriority(taskPriority) }

// Apply implements projection.Handler: decode, Convert, Store. A record
// that does not decode, is empty (a tombstone among them) or holds no
// event this build knows fails, like in every projection: the runner
// parks it as a dead letter, with its log line and metric, and goes on
// with the records behind it (docs/decisions/0025-dead-letters.md), so it
// stalls no queue and is not lost without a trace. A known event that
// means nothing to workloads is a fact of Kind "", skipped.
func (w WorkloadFacts) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	var facts []Fact
	for _, r := range records {
		var ev taskv1.TaskEvent
		if err := proto.Unmarshal(r.Value, &ev); err != nil {
			return fmt.Errorf("decode task event at %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		f, err := Convert(&ev)
		if err != nil {
			return fmt.Errorf("task event at %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		if f.Kind != "" {
			facts = append(facts, f)
		}
	}
	f, v := w.tables()
	return store(ctx, tx, f, v, facts)
}

// Store records facts in their order in three statements: read the tasks'
// last versions, insert the facts newer than those, store the new
// versions. A task is followed once a fact names its queue; a fact at or
// below its task's last version was recorded before and is skipped, so
// storing the same facts twice records nothing the second time. The
// projection runner is the only writer of the facts; the admission loop
// also records versions, of the facts the scheduler hands it directly
// (app.Loop.Queue). When the two race on a task, the fact may be stored
// here as well, and the loop applies it once (a stay's version is never
// begun twice); the version stored never goes down.
func Store(ctx context.Context, tx pgx.Tx, facts []Fact) error {
	f, v := WorkloadFacts{}.tables()
	return store(ctx, tx, f, v, facts)
}

func store(ctx context.Context, tx pgx.Tx, factsTable, versionsTable string, facts []Fact) error {
	if len(facts) == 0 {
		return nil
	}
	ids := make([]string, len(facts))
	for i, f := range facts {
		ids[i] = f.TaskID
	}
	seen := map[string]int64{}
	rows, err := tx.Query(ctx, `SELECT task_id, version FROM `+versionsTable+` WHERE task_id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("read task versions: %w", err)
	}
	for rows.Next() {
		var id string
		var v int64
		if err := rows.Scan(&id, &v); err != nil {
			rows.Close()
			return fmt.Errorf("read task versions: %w", err)
		}
		seen[id] = v
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read task versions: %w", err)
	}
	n := len(facts)
	var (
		taskIDs, kinds, tenants, queues, reasons = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		versions                                 = make([]int64, 0, n)
		prios                                    = make([]int32, 0, n)
		created                                  = make([]*time.Time, 0, n)
		reqs                                     = make([]*string, 0, n)
	)
	changed := map[string]bool{}
	for _, f := range facts {
		last, known := seen[f.TaskID]
		if (!known && !f.Opens) || (known && f.TaskVersion <= last) {
			continue
		}
		seen[f.TaskID], changed[f.TaskID] = f.TaskVersion, true
		var c *time.Time
		if !f.Created.IsZero() {
			c = &f.Created
		}
		var rq *string
		if f.Requests != nil {
			b, err := json.Marshal(f.Requests)
			if err != nil {
				return fmt.Errorf("encode requests: %w", err)
			}
			s := string(b)
			rq = &s
		}
		taskIDs, versions, kinds = append(taskIDs, f.TaskID), append(versions, f.TaskVersion), append(kinds, string(f.Kind))
		tenants, queues, prios = append(tenants, f.TenantID), append(queues, f.ClusterQueue), append(prios, int32(f.Priority))
		created, reqs, reasons = append(created, c), append(reqs, rq), append(reasons, f.Reason)
	}
	if len(taskIDs) == 0 {
		return nil
	}
	// In id order: the admission loop writes versions too (StartCycle, in
	// id order), and one lock order keeps the two from deadlocking.
	vids := slices.Sorted(maps.Keys(changed))
	vvers := make([]int64, len(vids))
	for i, id := range vids {
		vvers[i] = seen[id]
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO `+factsTable+` (task_id, task_version, kind, tenant_id, cluster_queue, priority, created_at, requests, reason)
		SELECT t, v, k, tn, q, p, c, r, rs
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::int[], $7::timestamptz[], $8::jsonb[], $9::text[])
		     WITH ORDINALITY AS x(t, v, k, tn, q, p, c, r, rs, ord)
		ORDER BY ord`, taskIDs, versions, kinds, tenants, queues, prios, created, reqs, reasons)
	b.Queue(`INSERT INTO `+versionsTable+` AS w (task_id, version) SELECT * FROM unnest($1::text[], $2::bigint[])
		ON CONFLICT (task_id) DO UPDATE SET version = greatest(w.version, EXCLUDED.version)`, vids, vvers)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record workload facts: %w", err)
	}
	return nil
}
