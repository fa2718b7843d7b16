package app

import (
	"context"
	"maps"
	"slices"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/taskmesh/taskmesh/platform/domain/quantity"
)

// admissionMeter is the instrumentation scope of the admission metrics
// (docs/operations.md).
const admissionMeter = "github.com/taskmesh/taskmesh/services/quota/internal/admission/app"

// decisionCounter counts the decisions the loop committed, by
// ClusterQueue and kind (admit, preempt): its rate is decisions per
// second.
func decisionCounter() metric.Int64Counter {
	c, _ := gotel.Meter(admissionMeter).Int64Counter("taskmesh.admission.decisions",
		metric.WithDescription("admission decisions committed, by ClusterQueue and decision (admit, preempt)"),
		metric.WithUnit("{decision}"))
	return c
}

// countDecisions adds a committed cycle's decisions.
func countDecisions(ctx context.Context, decided map[[2]string]int64) {
	c := decisionCounter()
	for k, n := range decided {
		c.Add(ctx, n, metric.WithAttributes(attribute.String("cluster_queue", k[0]), attribute.String("decision", k[1])))
	}
}

// observe exports the active loop's view of every ClusterQueue until the
// returned function is called: workloads pending and admitted, the
// resources pending workloads request, and per flavor and resource the
// usage admitted, the part of it borrowed from the cohort, and the
// nominal quota. A standby loop (no core) exports none of them, so
// aggregating over replicas never double counts.
func (l *Loop) observe() (stop func()) {
	meter := gotel.Meter(admissionMeter)
	pending, _ := meter.Int64ObservableGauge("taskmesh.admission.pending_workloads",
		metric.WithDescription("workloads waiting for admission, by ClusterQueue"), metric.WithUnit("{workload}"))
	admitted, _ := meter.Int64ObservableGauge("taskmesh.admission.admitted_workloads",
		metric.WithDescription("workloads holding admission (evicting ones included), by ClusterQueue"), metric.WithUnit("{workload}"))
	pendingReq, _ := meter.Float64ObservableGauge("taskmesh.admission.pending_requests",
		metric.WithDescription("resources requested by pending workloads, by ClusterQueue and resource"))
	usage, _ := meter.Float64ObservableGauge("taskmesh.admission.admitted_usage",
		metric.WithDescription("resources admitted, by ClusterQueue, flavor and resource"))
	borrowed, _ := meter.Float64ObservableGauge("taskmesh.admission.borrowed_usage",
		metric.WithDescription("admitted resources borrowed from the cohort, by ClusterQueue, flavor and resource"))
	nominal, _ := meter.Float64ObservableGauge("taskmesh.admission.nominal_quota",
		metric.WithDescription("nominal quota, by ClusterQueue, flavor and resource"))
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.core == nil {
			return nil
		}
		pend, adm := map[string]int64{}, map[string]int64{}
		req := map[[2]string]int64{}
		for _, q := range l.queues {
			pend[q], adm[q] = 0, 0
		}
		for _, r := range l.work {
			switch r.State {
			case StatePending:
				pend[r.ClusterQueue]++
				for res, milli := range r.Requests {
					req[[2]string{r.ClusterQueue, res}] += milli
				}
			case StateAdmitted, StateEvicting:
				adm[r.ClusterQueue]++
			}
		}
		for q, n := range pend {
			o.ObserveInt64(pending, n, metric.WithAttributes(attribute.String("cluster_queue", q)))
		}
		for q, n := range adm {
			o.ObserveInt64(admitted, n, metric.WithAttributes(attribute.String("cluster_queue", q)))
		}
		for _, q := range l.queues {
			flavors, err := l.core.ClusterQueueUsage(q)
			if err != nil {
				continue // the queue left the topology since
			}
			for _, f := range flavors {
				for _, r := range f.GetResources() {
					attrs := metric.WithAttributes(attribute.String("cluster_queue", q),
						attribute.String("flavor", f.GetName()), attribute.String("resource", r.GetName()))
					o.ObserveFloat64(usage, amount(r.GetTotal()), attrs)
					o.ObserveFloat64(borrowed, amount(r.GetBorrowed()), attrs)
					o.ObserveFloat64(nominal, amount(r.GetNominalQuota()), attrs)
					// Every resource of a queue's quota has a pending
					// series, 0 when nothing waits for it.
					if k := [2]string{q, r.GetName()}; !hasKey(req, k) {
						req[k] = 0
					}
				}
			}
		}
		for k, milli := range req {
			o.ObserveFloat64(pendingReq, float64(milli)/1000,
				metric.WithAttributes(attribute.String("cluster_queue", k[0]), attribute.String("resource", k[1])))
		}
		return nil
	}, pending, admitted, pendingReq, usage, borrowed, nominal)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() } // fails only for a registration of another provider
}

// amount is a quantity as a number of units ("500m" → 0.5); one the core
// wrote and cannot be read counts 0.
func amount(q string) float64 {
	if q == "" {
		return 0
	}
	milli, err := quantity.Milli(q)
	if err != nil {
		return 0
	}
	return float64(milli) / 1000
}

// queueNames are the topology's ClusterQueues in name order.
func queueNames(defs Definitions) []string {
	return slices.Sorted(maps.Keys(defs.ClusterQueues))
}

func hasKey(m map[[2]string]int64, k [2]string) bool {
	_, ok := m[k]
	return ok
}
