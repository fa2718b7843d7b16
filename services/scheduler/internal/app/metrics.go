package app

import (
	"context"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// taskMetrics count lifecycle transitions as they commit
// (docs/operations.md). They are labelled by the task's ClusterQueue
// (cluster_queue, "" for tasks that need no admission): queues are the
// operator's, so the label stays bounded whatever tenants submit.
type taskMetrics struct {
	completed, failed, cancelled metric.Int64Counter
	retries, expirations         metric.Int64Counter
	preemptions                  metric.Int64Counter
	startLatency                 metric.Float64Histogram
}

func newTaskMetrics() *taskMetrics {
	meter := gotel.Meter("github.com/taskmesh/taskmesh/services/scheduler/internal/app")
	counter := func(name, desc string) metric.Int64Counter {
		// Instrument errors concern invalid names only; these are constant.
		c, _ := meter.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{task}"))
		c.Add(context.Background(), 0, metric.WithAttributes(attribute.String("cluster_queue", "")))
		return c
	}
	m := &taskMetrics{
		completed:   counter("taskmesh.tasks.completed", "attempts that completed (the task is completed)"),
		failed:      counter("taskmesh.tasks.failed", "attempts that failed (a retry may follow)"),
		cancelled:   counter("taskmesh.tasks.cancelled", "tasks cancelled"),
		retries:     counter("taskmesh.task.retries", "retries scheduled after a failed or lost attempt"),
		expirations: counter("taskmesh.task.lease_expirations", "attempts whose lease expired or whose agent was lost"),
		preemptions: counter("taskmesh.task.preemptions", "running attempts preempted for higher-priority work"),
	}
	m.startLatency, _ = meter.Float64Histogram("taskmesh.task.start_latency",
		metric.WithDescription("time from a task's submission to the start of its attempt"), metric.WithUnit("s"))
	return m
}

// recorded counts what one committed write recorded on task t (t is the
// task after the records).
func (m *taskMetrics) recorded(ctx context.Context, t domain.Task, recs []domain.Record) {
	attrs := metric.WithAttributes(attribute.String("cluster_queue", t.ClusterQueue))
	for _, r := range recs {
		switch r.Event.(type) {
		case domain.Started:
			if !t.StartedAt.IsZero() {
				m.startLatency.Record(ctx, max(t.StartedAt.Sub(t.CreatedAt).Seconds(), 0), attrs)
			}
		case domain.Succeeded:
			m.completed.Add(ctx, 1, attrs)
		case domain.Failed:
			m.failed.Add(ctx, 1, attrs)
		case domain.Canceled:
			m.cancelled.Add(ctx, 1, attrs)
		case domain.RetryScheduled:
			m.retries.Add(ctx, 1, attrs)
		case domain.LeaseExpired:
			m.expirations.Add(ctx, 1, attrs)
		case domain.Preempted:
			m.preemptions.Add(ctx, 1, attrs)
		}
	}
}

// meteredTasks is the TaskStore the use cases write through: it counts
// the records of every committed Mutate. decide may run more than once
// (a batch retried); the records of its last run are what committed.
type meteredTasks struct {
	TaskStore
	m *taskMetrics
}

func (s meteredTasks) Mutate(ctx context.Context, id string, decide func(t domain.Task) ([]domain.Record, error)) (domain.Task, error) {
	var recs []domain.Record
	out, err := s.TaskStore.Mutate(ctx, id, func(t domain.Task) ([]domain.Record, error) {
		r, err := decide(t)
		recs = r
		return r, err
	})
	if err == nil {
		s.m.recorded(ctx, out, recs)
	}
	return out, err
}
