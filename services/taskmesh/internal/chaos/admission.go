package chaos

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/resource"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
)

// queueLimits are a ClusterQueue's nominal quotas (milli-units by
// resource, summed over its flavors), its borrowing limits (absent:
// unlimited) and its cohort.
type queueLimits struct {
	cohort  string
	nominal map[string]int64
	borrow  map[string]int64
}

// clusterQueues reads the ClusterQueue definitions through a gateway's
// gRPC front door with the operator key.
func clusterQueues(ctx context.Context, d *deployment) (map[string]queueLimits, error) {
	conn, err := grpc.NewClient(d.gatewayRPC[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+d.adminKey)
	resp, err := quotav1.NewAdmissionServiceClient(conn).ListClusterQueues(ctx, &quotav1.ListClusterQueuesRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]queueLimits{}
	for _, cq := range resp.GetClusterQueues() {
		l := queueLimits{cohort: cq.GetSpec().GetCohort(), nominal: map[string]int64{}, borrow: map[string]int64{}}
		for _, g := range cq.GetSpec().GetResourceGroups() {
			for _, f := range g.GetFlavors() {
				for _, r := range f.GetResources() {
					q, err := resource.ParseQuantity(r.GetNominalQuota())
					if err != nil {
						return nil, fmt.Errorf("cluster queue %s: %w", cq.GetName(), err)
					}
					l.nominal[r.GetName()] += q.MilliValue()
					if r.BorrowingLimit != nil {
						b, err := resource.ParseQuantity(r.GetBorrowingLimit())
						if err != nil {
							return nil, fmt.Errorf("cluster queue %s: %w", cq.GetName(), err)
						}
						l.borrow[r.GetName()] += b.MilliValue()
					}
				}
			}
		}
		out[cq.GetName()] = l
	}
	return out, nil
}

// admissionLedger follows what admitted workloads hold, event by event.
type admissionLedger struct {
	queues   map[string]queueLimits
	cohorts  map[string]map[string]int64 // cohort → resource → nominal
	requests map[string]map[string]int64 // task → what it asked for
	held     map[string]string           // task → the ClusterQueue it holds quota in
}

func newLedger(queues map[string]queueLimits) *admissionLedger {
	l := &admissionLedger{queues: queues, cohorts: map[string]map[string]int64{},
		requests: map[string]map[string]int64{}, held: map[string]string{}}
	for _, q := range queues {
		if q.cohort == "" {
			continue
		}
		if l.cohorts[q.cohort] == nil {
			l.cohorts[q.cohort] = map[string]int64{}
		}
		for r, n := range q.nominal {
			l.cohorts[q.cohort][r] += n
		}
	}
	return l
}

// step applies one admission event; a non-empty result describes the
// over-admission it caused.
func (l *admissionLedger) step(ev *quotav1.QuotaEvent) string {
	switch {
	case ev.GetWorkloadQueued() != nil:
		w := ev.GetWorkloadQueued()
		l.requests[w.GetTaskId()] = w.GetRequests()
	case ev.GetWorkloadAdmitted() != nil:
		w := ev.GetWorkloadAdmitted()
		l.held[w.GetTaskId()] = w.GetClusterQueue()
		return l.over(w.GetTaskId(), w.GetClusterQueue())
	case ev.GetWorkloadEvicted() != nil:
		delete(l.held, ev.GetWorkloadEvicted().GetTaskId())
	case ev.GetWorkloadFinished() != nil:
		id := ev.GetWorkloadFinished().GetTaskId()
		delete(l.held, id)
		delete(l.requests, id)
	}
	return ""
}

// over checks the usage of cq and its cohort right after task's admission.
func (l *admissionLedger) over(task, cq string) string {
	limits, known := l.queues[cq]
	if !known {
		return "" // a queue defined after the run read the definitions (a WorkGroup's): not judged
	}
	queueUse, cohortUse := map[string]int64{}, map[string]int64{}
	for t, q := range l.held {
		for r, n := range l.requests[t] {
			if q == cq {
				queueUse[r] += n
			}
			if limits.cohort != "" && l.queues[q].cohort == limits.cohort {
				cohortUse[r] += n
			}
		}
	}
	for r, used := range queueUse {
		reach := limits.nominal[r]
		if limits.cohort != "" {
			reach = l.cohorts[limits.cohort][r]
			if b, ok := limits.borrow[r]; ok {
				reach = min(reach, limits.nominal[r]+b)
			}
		}
		if used > reach {
			return fmt.Sprintf("admitting %s put %s at %d milli %s, beyond %d", task, cq, used, r, reach)
		}
	}
	for r, used := range cohortUse {
		if nominal := l.cohorts[limits.cohort][r]; used > nominal {
			return fmt.Sprintf("admitting %s put cohort %s at %d milli %s, beyond %d", task, limits.cohort, used, r, nominal)
		}
	}
	return ""
}

// checkOverAdmission replays the admission events in the order they were
// stored and checks every admission against the queues' quotas.
func checkOverAdmission(ctx context.Context, db *pgxpool.Pool, d *deployment) (Invariant, error) {
	inv := Invariant{Name: "over-admission"}
	queues, err := clusterQueues(ctx, d)
	if err != nil {
		return inv, fmt.Errorf("read the cluster queues: %w", err)
	}
	rows, err := db.Query(ctx, `SELECT payload FROM admission.events WHERE aggregate_id LIKE 'workload/%' ORDER BY id`)
	if err != nil {
		return inv, err
	}
	defer rows.Close()
	l := newLedger(queues)
	events, admissions := 0, 0
	for rows.Next() {
		var payload []byte
		if err := rows.Scan(&payload); err != nil {
			return inv, err
		}
		ev := &quotav1.QuotaEvent{}
		if err := proto.Unmarshal(payload, ev); err != nil {
			return inv, err
		}
		events++
		if ev.GetWorkloadAdmitted() != nil {
			admissions++
		}
		if bad := l.step(ev); bad != "" {
			inv.offend(bad)
		}
	}
	inv.Checked = fmt.Sprintf("%d admissions in %d workload events, %d cluster queues", admissions, events, len(queues))
	return inv, rows.Err()
}
