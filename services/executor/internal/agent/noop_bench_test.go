package agent

import (
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// BenchmarkNoop measures end-to-end noop throughput against the fake
// server on loopback: claim, journal, CompleteTask, journal.
func BenchmarkNoop(b *testing.B) {
	h := newHarness(b, func(c *Config) { c.HeartbeatInterval = time.Second }).start()
	tasks := make([]*taskv1.Task, b.N)
	for i := range tasks {
		tasks[i] = &taskv1.Task{Name: "n", Type: "noop"}
	}
	b.ResetTimer()
	ids := h.fake.Add(tasks...)
	for _, id := range ids {
		h.fake.WaitComplete(b, id, time.Minute)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}
