package chaos

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
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

// limitsOf converts a ClusterQueue definition.
func limitsOf(spec *quotav1.ClusterQueueSpec) (queueLimits, error) {
	l := queueLimits{cohort: spec.GetCohort(), nominal: map[string]int64{}, borrow: map[string]int64{}}
	for _, g := range spec.GetResourceGroups() {
		for _, f := range g.GetFlavors() {
			for _, r := range f.GetResources() {
				q, err := resource.ParseQuantity(r.GetNominalQuota())
				if err != nil {
					return l, err
				}
				l.nominal[r.GetName()] += q.MilliValue()
				if r.BorrowingLimit != nil {
					b, err := resource.ParseQuantity(r.GetBorrowingLimit())
					if err != nil {
						return l, err
					}
					l.borrow[r.GetName()] += b.MilliValue()
				}
			}
		}
	}
	return l, nil
}

// admissionLedger follows the ClusterQueue definitions and what admitted
// workloads hold, event by event, so each admission is judged against the
// quotas in force when it was made (the load changes them while it runs).
type admissionLedger struct {
	queues   map[string]queueLimits
	cohorts  map[string]map[string]int64 // cohort → resource → nominal
	requests map[string]map[string]int64 // task → what it asked for
	held     map[string]string           // task → the ClusterQueue it holds quota in
}

func newLedger(queues map[string]queueLimits) *admissionLedger {
	l := &admissionLedger{queues: queues, requests: map[string]map[string]int64{}, held: map[string]string{}}
	l.sumCohorts()
	return l
}

// sumCohorts recomputes each cohort's nominal quota from its queues.
func (l *admissionLedger) sumCohorts() {
	l.cohorts = map[string]map[string]int64{}
	for _, q := range l.queues {
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
}

// step applies one admission event; a non-empty result describes the
// over-admission it caused.
func (l *admissionLedger) step(ev *quotav1.QuotaEvent) (string, error) {
	switch {
	case ev.GetClusterQueueDefined() != nil:
		d := ev.GetClusterQueueDefined()
		limits, err := limitsOf(d.GetSpec())
		if err != nil {
			return "", fmt.Errorf("cluster queue %s: %w", d.GetName(), err)
		}
		l.queues[d.GetName()] = limits
		l.sumCohorts()
	case ev.GetClusterQueueDeleted() != nil:
		delete(l.queues, ev.GetClusterQueueDeleted().GetName())
		l.sumCohorts()
	case ev.GetWorkloadQueued() != nil:
		w := ev.GetWorkloadQueued()
		l.requests[w.GetTaskId()] = w.GetRequests()
	case ev.GetWorkloadAdmitted() != nil:
		w := ev.GetWorkloadAdmitted()
		l.held[w.GetTaskId()] = w.GetClusterQueue()
		return l.over(w.GetTaskId(), w.GetClusterQueue()), nil
	case ev.GetWorkloadEvicted() != nil:
		delete(l.held, ev.GetWorkloadEvicted().GetTaskId())
	case ev.GetWorkloadFinished() != nil:
		id := ev.GetWorkloadFinished().GetTaskId()
		delete(l.held, id)
		delete(l.requests, id)
	}
	return "", nil
}

// over checks the usage of cq and its cohort right after task's admission.
func (l *admissionLedger) over(task, cq string) string {
	limits, known := l.queues[cq]
	if !known {
		return "admitting " + task + " into " + cq + ", a ClusterQueue not defined then"
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

// checkOverAdmission replays the admission events — ClusterQueue
// definitions and workloads — in the order they were stored and checks
// every admission against the quotas in force.
func checkOverAdmission(ctx context.Context, db *pgxpool.Pool) (Invariant, error) {
	inv := Invariant{Name: "over-admission"}
	rows, err := db.Query(ctx, `SELECT payload FROM admission.events
		WHERE aggregate_id LIKE 'workload/%' OR aggregate_id LIKE 'cluster-queue/%' ORDER BY id`)
	if err != nil {
		return inv, err
	}
	defer rows.Close()
	l := newLedger(map[string]queueLimits{})
	events, admissions, definitions := 0, 0, 0
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
		if ev.GetClusterQueueDefined() != nil {
			definitions++
		}
		bad, err := l.step(ev)
		if err != nil {
			return inv, err
		}
		if bad != "" {
			inv.offend(bad)
		}
	}
	inv.Checked = fmt.Sprintf("%d admissions, %d queue definitions in %d events", admissions, definitions, events)
	return inv, rows.Err()
}
