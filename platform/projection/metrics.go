package projection

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the projection metrics.
const meterName = "github.com/taskmesh/taskmesh/platform/projection"

// runnerMetrics are a runner's instruments (docs/operations.md), labelled
// projection=<Config.Name>.
type runnerMetrics struct {
	attrs   metric.MeasurementOption
	applied metric.Int64Counter
	errors  metric.Int64Counter
	lag     metric.Float64Gauge
}

func newRunnerMetrics(name string, topics []string) runnerMetrics {
	meter := gotel.Meter(meterName)
	m := runnerMetrics{attrs: metric.WithAttributes(attribute.String("projection", name))}
	// Instrument errors concern invalid names only; these are constant.
	m.applied, _ = meter.Int64Counter("taskmesh.projection.applied",
		metric.WithDescription("records a projection runner committed to its read model"), metric.WithUnit("{record}"))
	m.errors, _ = meter.Int64Counter("taskmesh.projection.errors",
		metric.WithDescription("projection runner sessions ended by an error (the runner backs off and starts over)"),
		metric.WithUnit("{error}"))
	m.lag, _ = meter.Float64Gauge("taskmesh.projection.lag",
		metric.WithDescription("how old the newest record of the last committed batch was when it committed"),
		metric.WithUnit("s"))
	ctx := context.Background()
	m.applied.Add(ctx, 0, m.attrs)
	m.errors.Add(ctx, 0, m.attrs)
	for _, t := range topics {
		deadLetterCounter().Add(ctx, 0, deadLetterAttrs(name, t))
	}
	return m
}

// committed records a committed batch: its size, and the lag of its
// newest record (records carry their event's time, docs/events.md).
func (m runnerMetrics) committed(ctx context.Context, records []*kgo.Record, now time.Time) {
	m.applied.Add(ctx, int64(len(records)), m.attrs)
	var newest time.Time
	for _, r := range records {
		if r.Timestamp.After(newest) {
			newest = r.Timestamp
		}
	}
	m.lag.Record(ctx, max(now.Sub(newest).Seconds(), 0), m.attrs)
}

// deadLetterCounter counts parked records (ReportParked) by projection
// and topic; every runner exports it from its start, at 0.
func deadLetterCounter() metric.Int64Counter {
	c, _ := gotel.Meter(meterName).Int64Counter("taskmesh.projection.dead_letters",
		metric.WithDescription("records parked as dead letters"), metric.WithUnit("{record}"))
	return c
}

func deadLetterAttrs(projection, topic string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("projection", projection), attribute.String("topic", topic))
}
