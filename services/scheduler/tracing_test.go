package scheduler_test

import (
	"testing"
	"time"

	gotel "go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// A request's trace continues on the server, is stored with the task's
// events, travels in the Kafka record headers, and the projection batch
// that applies the events links back to it.
func TestTraceFollowsATaskThroughKafka(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := gotel.GetTracerProvider()
	gotel.SetTracerProvider(tp)
	t.Cleanup(func() { gotel.SetTracerProvider(prev); _ = tp.Shutdown(t.Context()) })

	e := newEnv(t)
	ctx, span := tp.Tracer("test").Start(user("tenant-a"), "submit a task")
	if _, err := e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "traced", Command: "true"}}); err != nil {
		t.Fatal(err)
	}
	span.End()
	trace := span.SpanContext().TraceID()

	var serverSpan, linked bool
	eventually(t, time.Minute, "the projection span linked to the request's trace", func() bool {
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == trace && s.Name == "taskmesh.task.v1.TaskService/CreateTask" && s.SpanKind.String() == "server" {
				serverSpan = true
			}
			if s.Name == "projection task_read_models" {
				for _, l := range s.Links {
					if l.SpanContext.TraceID() == trace {
						linked = true
					}
				}
			}
		}
		return serverSpan && linked
	})
}
