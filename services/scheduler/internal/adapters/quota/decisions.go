package quota

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
)

// ErrNoEvent is returned for a quota-topic record that holds no event this
// build knows.
var ErrNoEvent = errors.New("admission decisions: the record holds no quota event")

// Tasks are the use cases decisions apply to (app.App).
type Tasks interface {
	AdmitTask(ctx context.Context, id string, epoch int64, clusterQueue string, flavors map[string]string) error
	EvictTask(ctx context.Context, id string, epoch int64, preemptor, reason string) error
}

// Decisions is a projection.Handler over the quota topic that applies
// admission decisions to tasks. It writes through the scheduler's own
// batched commands, not the runner's transaction, so it is not a read
// model and is never replayed; at-least-once delivery is safe because
// every decision is idempotent.
type Decisions struct {
	Tasks Tasks
	// Parallel bounds how many tasks are changed at once (default 64).
	Parallel int
}

type decision struct {
	admit *quotav1.WorkloadAdmitted
	evict *quotav1.WorkloadPreemptionRequested
}

// Apply implements projection.Handler. Decisions about different tasks
// run concurrently (they batch into few transactions); those about one
// task run in their order on the topic. A record that does not decode or
// holds no known event fails the batch (ErrNoEvent), so the runner parks
// it; a known event of another kind is skipped.
func (d Decisions) Apply(ctx context.Context, _ pgx.Tx, records []*kgo.Record) error {
	byTask := map[string][]decision{}
	var order []string
	for _, r := range records {
		var env quotav1.QuotaEvent
		if err := proto.Unmarshal(r.Value, &env); err != nil {
			return fmt.Errorf("decode quota event at %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		var dec decision
		var id string
		switch e := env.GetEvent().(type) {
		case *quotav1.QuotaEvent_WorkloadAdmitted:
			dec.admit, id = e.WorkloadAdmitted, e.WorkloadAdmitted.GetTaskId()
		case *quotav1.QuotaEvent_WorkloadPreemptionRequested:
			dec.evict, id = e.WorkloadPreemptionRequested, e.WorkloadPreemptionRequested.GetTaskId()
		case nil:
			// An empty record (a tombstone among them) or an event this
			// build does not know (an unknown field, which the oneof
			// does not hold): parked by the runner as a dead letter,
			// with its log line and metric, like in every projection
			// (docs/decisions/0025-dead-letters.md).
			return fmt.Errorf("quota event at %s/%d@%d (%s): %w", r.Topic, r.Partition, r.Offset, env.GetEventId(), ErrNoEvent)
		default:
			continue // quotas, WorkGroups, definitions: known events, not the scheduler's business
		}
		if _, seen := byTask[id]; !seen {
			order = append(order, id)
		}
		byTask[id] = append(byTask[id], dec)
	}
	g, ctx := errgroup.WithContext(ctx)
	limit := d.Parallel
	if limit <= 0 {
		limit = 64
	}
	g.SetLimit(limit)
	for _, id := range order {
		g.Go(func() error {
			for _, dec := range byTask[id] {
				var err error
				switch {
				case dec.admit != nil:
					a := dec.admit
					err = d.Tasks.AdmitTask(ctx, id, a.GetTaskVersion(), a.GetClusterQueue(), a.GetFlavors())
				case dec.evict != nil:
					e := dec.evict
					err = d.Tasks.EvictTask(ctx, id, e.GetTaskVersion(), e.GetPreemptorTaskId(), e.GetReason())
				}
				if err != nil {
					return fmt.Errorf("apply admission decision to task %s: %w", id, err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}
