package outbox

import (
	"context"
	"time"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// relayMetrics are a relay's instruments (docs/operations.md), labelled
// relay=<Config.Name>.
type relayMetrics struct {
	attrs         metric.MeasurementOption
	published     metric.Int64Counter
	publishErrors metric.Int64Counter
	// foreignRecords counts records that named the relay in its topics but
	// matched none of its events, found by a start-up scan.
	foreignRecords metric.Int64Counter
}

func newRelayMetrics(name string) relayMetrics {
	meter := gotel.Meter("github.com/taskmesh/taskmesh/platform/outbox")
	m := relayMetrics{attrs: metric.WithAttributes(attribute.String("relay", name))}
	// Instrument errors concern invalid names only; these are constant.
	m.published, _ = meter.Int64Counter("taskmesh.outbox.published",
		metric.WithDescription("events the outbox relay committed to Kafka"), metric.WithUnit("{event}"))
	m.publishErrors, _ = meter.Int64Counter("taskmesh.outbox.publish_errors",
		metric.WithDescription("outbox relay batches whose produce or Kafka commit failed (the session restarts)"),
		metric.WithUnit("{error}"))
	m.foreignRecords, _ = meter.Int64Counter("taskmesh.outbox.foreign_records",
		metric.WithDescription("records naming the outbox relay that matched none of its events, found and ignored when a relay session started"),
		metric.WithUnit("{record}"))
	// Present from the start, so a rate over them is 0 rather than absent.
	m.published.Add(context.Background(), 0, m.attrs)
	m.publishErrors.Add(context.Background(), 0, m.attrs)
	m.foreignRecords.Add(context.Background(), 0, m.attrs)
	return m
}

// observe exports the relay's backlog and whether it is the active one
// until the returned function is called.
func (r *Relay) observe() (stop func()) {
	meter := gotel.Meter("github.com/taskmesh/taskmesh/platform/outbox")
	backlog, _ := meter.Float64ObservableGauge("taskmesh.outbox.backlog_age",
		metric.WithDescription("age of the oldest committed event the active outbox relay has not published yet (0: caught up)"),
		metric.WithUnit("s"))
	active, _ := meter.Int64ObservableGauge("taskmesh.outbox.relay_active",
		metric.WithDescription("1 while this process's relay holds the lock and publishes"))
	attrs := metric.WithAttributes(attribute.String("relay", r.cfg.Name))
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if !r.active.Load() {
			o.ObserveInt64(active, 0, attrs)
			return nil
		}
		o.ObserveInt64(active, 1, attrs)
		age := 0.0
		if at := r.oldestUnrelayed.Load(); at != 0 {
			age = max(time.Since(time.Unix(0, at)).Seconds(), 0)
		}
		o.ObserveFloat64(backlog, age, attrs)
		return nil
	}, backlog, active)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() } // fails only for a registration of another provider
}

// noteBacklog records what the last read found: the oldest event not yet
// published, or none (caught up).
func (r *Relay) noteBacklog(batch []row) {
	if len(batch) == 0 {
		r.oldestUnrelayed.Store(0)
		return
	}
	r.oldestUnrelayed.Store(batch[0].occurredAt.UnixNano())
}
