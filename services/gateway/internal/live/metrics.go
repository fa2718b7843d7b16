package live

import (
	"context"
	"sync/atomic"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Stats is a snapshot of the service's counters.
type Stats struct {
	// Streams is the number of open streams, Subscribers the hub's
	// subscriptions (one per stream).
	Streams, Subscribers int
	// Frames counts frames sent; Delivered events handed to streams by
	// the hub.
	Frames, Delivered int64
	// Dropped counts streams closed as slow consumers; Refused streams
	// refused over a tenant's limit.
	Dropped, Refused int64
	// Ended counts finished streams by reason: final, slow_consumer, idle,
	// shutdown, client.
	Ended map[string]int64
}

// metrics are the service's counters, kept both for Stats and as
// OpenTelemetry instruments (the global MeterProvider; a no-op until one
// is installed).
type metrics struct {
	open, frames, refusedN atomic.Int64
	ended                  [endClient + 1]atomic.Int64

	streamsI metric.Int64UpDownCounter
	framesI  metric.Int64Counter
	endedI   metric.Int64Counter
	refusedI metric.Int64Counter
}

func newMetrics() *metrics {
	m := &metrics{}
	meter := gotel.Meter("github.com/taskmesh/taskmesh/services/gateway/internal/live")
	// Instrument errors only concern invalid names; the no-op instrument
	// returned with them keeps the service working.
	m.streamsI, _ = meter.Int64UpDownCounter("taskmesh.live.streams", metric.WithDescription("open live task streams"))
	m.framesI, _ = meter.Int64Counter("taskmesh.live.frames", metric.WithDescription("frames pushed to live task streams"))
	m.endedI, _ = meter.Int64Counter("taskmesh.live.stream_ends", metric.WithDescription("live task streams ended, by reason"))
	m.refusedI, _ = meter.Int64Counter("taskmesh.live.refused", metric.WithDescription("live task streams refused over a tenant's limit"))
	return m
}

func (m *metrics) started(ctx context.Context, transport string) {
	m.open.Add(1)
	m.streamsI.Add(ctx, 1, metric.WithAttributes(attribute.String("transport", transport)))
}

func (m *metrics) finished(ctx context.Context, transport string, e end) {
	m.open.Add(-1)
	m.ended[e].Add(1)
	m.streamsI.Add(ctx, -1, metric.WithAttributes(attribute.String("transport", transport)))
	m.endedI.Add(ctx, 1, metric.WithAttributes(attribute.String("transport", transport), attribute.String("reason", e.String())))
}

func (m *metrics) refused(ctx context.Context) {
	m.refusedN.Add(1)
	m.refusedI.Add(ctx, 1)
}

func (s *Service) frameSent() {
	s.metrics.frames.Add(1)
	s.metrics.framesI.Add(context.Background(), 1)
}

// Stats returns the service's counters.
func (s *Service) Stats() Stats {
	m := s.metrics
	st := Stats{Streams: int(m.open.Load()), Frames: m.frames.Load(), Refused: m.refusedN.Load(), Ended: map[string]int64{}}
	for e := endFinal; e <= endClient; e++ {
		st.Ended[e.String()] = m.ended[e].Load()
	}
	if s.hub != nil {
		st.Subscribers = s.hub.Subscribers()
		st.Delivered, st.Dropped = s.hub.delivered.Load(), s.hub.dropped.Load()
	}
	return st
}
