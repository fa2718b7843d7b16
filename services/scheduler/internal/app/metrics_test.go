package app_test

import (
	"context"
	"testing"

	gotel "go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// The task counters follow committed writes: a completion, a failed
// attempt and its retry, each start's latency; a refused write (a stale
// attempt) counts nothing.
func TestTaskMetricsCountCommittedTransitions(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	gotel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	h := newHarness(t)
	x := h.running("a1", "m1", spec("a"))
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID}); err != nil {
		t.Fatal(err)
	}
	y := h.running("a1", "m1", spec("b", func(in *domain.SpecInput) { in.RetryDelay, in.MaxRetries = intp(60), intp(1) }))
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), y.ID, app.Completion{AgentID: "a1", AttemptID: y.AttemptID, ExitCode: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), y.ID, app.Completion{AgentID: "a1", AttemptID: "stale"}); err == nil {
		t.Fatal("a stale attempt's complete was accepted")
	}
	got := collect(t, reader)
	for name, want := range map[string]int64{
		"taskmesh.tasks.completed": 1, "taskmesh.tasks.failed": 1, "taskmesh.task.retries": 1,
		"taskmesh.tasks.cancelled": 0, "taskmesh.task.lease_expirations": 0, "taskmesh.task.preemptions": 0,
		"taskmesh.task.start_latency": 2,
	} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d", name, got[name], want)
		}
	}
}

// collect sums each counter's points, and counts each histogram's
// observations.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] += int64(p.Count)
				}
			}
		}
	}
	return out
}
