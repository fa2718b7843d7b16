package agent

import (
	"context"
	"time"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// agentMeter is the instrumentation scope of the agent metrics
// (docs/operations.md). An agent process runs one agent; Prometheus's
// instance label tells agents apart, so none of these names the agent.
const agentMeter = "github.com/taskmesh/taskmesh/services/executor/internal/agent"

// agentMetrics are the agent's synchronous instruments.
type agentMetrics struct {
	heartbeats        metric.Int64Counter
	heartbeatDuration metric.Float64Histogram
	fenceLapses       metric.Int64Counter
	spawn             metric.Float64Histogram
	shimHosts         metric.Int64Counter
	ok, failed        metric.MeasurementOption
}

func newAgentMetrics() agentMetrics {
	meter := gotel.Meter(agentMeter)
	m := agentMetrics{ok: metric.WithAttributes(attribute.String("result", "ok")),
		failed: metric.WithAttributes(attribute.String("result", "error"))}
	// Instrument errors concern invalid names only; these are constant.
	m.heartbeats, _ = meter.Int64Counter("taskmesh.agent.heartbeats",
		metric.WithDescription("machine heartbeats sent, by result (ok, error)"), metric.WithUnit("{heartbeat}"))
	m.heartbeatDuration, _ = meter.Float64Histogram("taskmesh.agent.heartbeat_duration",
		metric.WithDescription("time from sending a machine heartbeat to its answer or error, by result (ok, error)"), metric.WithUnit("s"))
	m.fenceLapses, _ = meter.Int64Counter("taskmesh.agent.fence_lapses",
		metric.WithDescription("times the server answered none of the agent's calls for longer than the fence, counted when it answered again"),
		metric.WithUnit("{lapse}"))
	m.fenceLapses.Add(context.Background(), 0)
	m.spawn, _ = meter.Float64Histogram("taskmesh.agent.spawn_duration",
		metric.WithDescription("time to start a task's process (shim and child) until its PID is known"), metric.WithUnit("s"))
	m.shimHosts, _ = meter.Int64Counter("taskmesh.agent.shim_host_starts",
		metric.WithDescription("shim hosts started: the first, and each that replaced one that died"), metric.WithUnit("{start}"))
	m.shimHosts.Add(context.Background(), 0)
	m.heartbeats.Add(context.Background(), 0, m.ok)
	m.heartbeats.Add(context.Background(), 0, m.failed)
	return m
}

func (m agentMetrics) heartbeat(ctx context.Context, sent time.Time, err error) {
	result := m.ok
	if err != nil {
		result = m.failed
	}
	m.heartbeats.Add(ctx, 1, result)
	m.heartbeatDuration.Record(ctx, time.Since(sent).Seconds(), result)
}

func (m agentMetrics) fenceLapsed(ctx context.Context) {
	m.fenceLapses.Add(ctx, 1)
}

func (m agentMetrics) shimHostStarted(ctx context.Context) {
	m.shimHosts.Add(ctx, 1)
}

func (m agentMetrics) spawned(ctx context.Context, since time.Time) {
	m.spawn.Record(ctx, time.Since(since).Seconds())
}

// observe exports the process slots in use and free until the returned
// function is called: used are the processes running now, as the
// heartbeat reports them (a claim waiting for work holds slots without
// using them).
func (a *Agent) observe() (stop func()) {
	meter := gotel.Meter(agentMeter)
	slots, _ := meter.Int64ObservableGauge("taskmesh.agent.slots",
		metric.WithDescription("the agent's process slots by state (used, free)"), metric.WithUnit("{slot}"))
	used, free := metric.WithAttributes(attribute.String("state", "used")), metric.WithAttributes(attribute.String("state", "free"))
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		n := int(a.running.Load())
		o.ObserveInt64(slots, int64(n), used)
		o.ObserveInt64(slots, int64(max(a.cfg.Slots-n, 0)), free)
		return nil
	}, slots)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() } // fails only for a registration of another provider
}
