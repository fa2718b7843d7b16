package live

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
	gotel "go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/otel"
)

// Another API registers the same routes under its prefix with a view in
// its own vocabulary; updates it does not show are skipped, the final one
// always comes.
func TestAnotherAPIRegistersItsOwnView(t *testing.T) {
	h := newHarness(t)
	videoStatus := map[string]string{StatusPending: "QUEUED", StatusAssigned: "QUEUED", StatusRunning: "RUNNING",
		StatusCompleted: "SUCCEEDED", StatusFailed: "FAILED", StatusCancelled: "CANCELED"}
	view := func(u Update) (Frame, bool) {
		if _, renewed := u.Event.GetEvent().(*taskv1.TaskEvent_Leased); renewed && !u.Final {
			return Frame{}, false // the video API does not tell queued from assigned
		}
		return Frame{Event: "video", Data: map[string]any{"status": videoStatus[u.Task.GetStatus()],
			"taskProgress": u.Task.GetProgress()}}, true
	}
	mux := runtime.NewServeMux()
	if err := h.svc.Register(mux, "/v1/video/generations/{task_id}", view); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.srv.Close) // the task API's server, replaced by the video API's
	h.srv = httptest.NewServer(withTenant(mux))

	h.submit("v1", "acme")
	c := h.openSSE("/v1/video/generations/v1/events", "acme")
	c.next()
	h.step("v1", leased("a1"))
	h.step("v1", started("a1"))
	h.step("v1", progressed("a1", 30))
	h.step("v1", succeeded("a1"))
	var got []string
	for _, f := range c.all() {
		d := f["data"].(map[string]any)
		got = append(got, f["id"].(string)+" "+d["status"].(string)+" "+fmt.Sprint(d["taskProgress"]))
	}
	if want := []string{"3 RUNNING 0", "4 RUNNING 30", "5 SUCCEEDED 100"}; !slices.Equal(got, want) {
		t.Fatalf("frames = %v, want %v", got, want)
	}
}

var (
	tracingOnce sync.Once
	spans       *tracetest.InMemoryExporter
	provider    *sdktrace.TracerProvider
)

// testTracing installs a recording tracer provider once per test binary:
// the package's tracer binds to the first global provider set, so it is
// never replaced. The spans of earlier tests are reset.
func testTracing() (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	tracingOnce.Do(func() {
		spans = tracetest.NewInMemoryExporter()
		provider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		gotel.SetTracerProvider(provider)
	})
	spans.Reset()
	return spans, provider
}

// The push span of a frame links to the trace of the command that caused
// the event (the record's trace headers).
func TestPushSpanLinksTheEventsTrace(t *testing.T) {
	exp, tp := testTracing()

	h := newHarness(t)
	h.submit("t1", "acme")
	c := h.openSSE(path, "acme")
	c.next()
	ctx, cmd := tp.Tracer("test").Start(context.Background(), "lease command")
	ev := h.record("t1", leased("a1"))
	raw, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Key: []byte("t1"), Value: raw}
	otel.InjectRecord(ctx, rec)
	cmd.End()
	if err := h.prod.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c.next()
	waitFor(t, "the push span", func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == "live push" && len(s.Links) == 1 && s.Links[0].SpanContext.TraceID() == cmd.SpanContext().TraceID() {
				return true
			}
		}
		return false
	})
}

// A saved checkpoint changes nothing a task frame shows.
func TestTaskViewSkipsCheckpoints(t *testing.T) {
	u := Update{Task: &taskv1.Task{Id: "t1", Status: StatusPreempted}, Version: 6,
		Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Checkpointed{Checkpointed: &taskv1.TaskCheckpointed{Key: "k"}}}}
	if f, shown := TaskView(u); shown {
		t.Fatalf("checkpoint shown as %+v", f)
	}
	u.Final = true
	if _, shown := TaskView(u); !shown {
		t.Fatal("a final update is always shown")
	}
}
