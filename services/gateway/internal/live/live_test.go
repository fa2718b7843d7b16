package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/kafka"
)

const path = "/api/v1/tasks/t1/events"

// Events the tail missed (published before it started) are filled from
// the scheduler's snapshot; events already in the snapshot, or delivered
// twice, are not sent again.
func TestStreamFillsGapsAndDeduplicates(t *testing.T) {
	h := newHarness(t)
	h.submit("t1", "acme")
	c := h.openSSE(path, "acme")
	if f := c.next(); f["id"] != "1" || summary([]map[string]any{f})[0] != "1 status pending snapshot" {
		t.Fatalf("first frame = %v", f)
	}
	// Leased and started reach the scheduler, but only started the topic
	// the tail reads: the stream sees version 3 after 1.
	h.record("t1", leased("a1"))
	ev := h.step("t1", started("a1"))
	if f := c.next(); summary([]map[string]any{f})[0] != "3 status running snapshot" {
		t.Fatalf("gap fill = %v", summary([]map[string]any{f}))
	}
	h.publish(ev) // a redelivery
	h.step("t1", progressed("a1", 50))
	h.step("t1", succeeded("a1"))
	got := summary(c.all())
	want := []string{"4 progress running progressed", "5 status completed succeeded"}
	if !slices.Equal(got, want) {
		t.Fatalf("frames = %v, want %v", got, want)
	}
}

// An event on the topic beyond what the scheduler has committed was not
// published by its relay (it publishes only what committed): it is
// ignored, and the task's real events after it are still streamed.
func TestStreamIgnoresAnEventBeyondTheScheduler(t *testing.T) {
	h := newHarness(t)
	h.submit("t1", "acme")
	c := h.openSSE(path, "acme")
	if f := c.next(); f["id"] != "1" {
		t.Fatalf("first frame = %v", f)
	}
	h.step("t1", leased("a1"))
	forged := succeeded("a1")
	forged.AggregateId, forged.TenantId, forged.Version, forged.OccurredAt = "t1", "acme", math.MaxInt64, timestamppb.Now()
	h.publish(forged)
	h.step("t1", started("a1"))
	h.step("t1", succeeded("a1"))
	// Versions 3 and 4 come as their events or, when the forged one made
	// the stream read the scheduler after it recorded them, as a snapshot:
	// either way the stream ends at the real version 4, never at the
	// forged one.
	frames := summary(c.all())
	if len(frames) < 2 || frames[0] != "2 status assigned leased" || !strings.HasPrefix(frames[len(frames)-1], "4 status completed") {
		t.Fatalf("frames = %v, want version 2 assigned, then up to version 4 completed", frames)
	}
	for _, f := range frames {
		if strings.HasPrefix(f, "9223372036854775807 ") {
			t.Fatalf("the forged event was streamed: %v", frames)
		}
	}
}

// A stream opened on the name the task's create gave it follows the task's
// events, which the topic keys by the task's id.
func TestStreamByTheClientsNameFollowsTheTask(t *testing.T) {
	h := newHarness(t)
	h.submit("t1", "acme")
	h.tasks.mu.Lock()
	h.tasks.names = map[string]string{"task-train-001": "t1"}
	h.tasks.mu.Unlock()
	c := h.openSSE("/api/v1/tasks/task-train-001/events", "acme")
	if f := c.next(); f["id"] != "1" || summary([]map[string]any{f})[0] != "1 status pending snapshot" {
		t.Fatalf("first frame = %v", f)
	}
	h.step("t1", leased("a1"))
	h.step("t1", started("a1"))
	h.step("t1", succeeded("a1"))
	got := summary(c.all())
	want := []string{"2 status assigned leased", "3 status running started", "4 status completed succeeded"}
	if !slices.Equal(got, want) {
		t.Fatalf("frames = %v, want %v", got, want)
	}
}

// A failed attempt with a retry left is not the end: the stream goes on to
// the retry and ends at the real final state.
func TestStreamGoesOnAfterAFailureThatIsRetried(t *testing.T) {
	h := newHarness(t)
	h.submit("t1", "acme")
	c := h.openSSE(path, "acme")
	c.next()
	h.step("t1", leased("a1"))
	failed := h.record("t1", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{AttemptId: "a1", Error: "boom"}}})
	// The retry is committed with the failure: the scheduler shows it
	// before the failure reaches the stream.
	retry := h.record("t1", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_RetryScheduled{RetryScheduled: &taskv1.TaskRetryScheduled{RetryCount: 1}}})
	h.publish(failed)
	h.publish(retry)
	h.step("t1", leased("a2"))
	h.step("t1", succeeded("a2"))
	frames := c.all()
	got := summary(frames)
	want := []string{"2 status assigned leased", "3 status failed failed", "4 status pending retry_scheduled",
		"5 status assigned leased", "6 status completed succeeded"}
	if !slices.Equal(got, want) {
		t.Fatalf("frames = %v, want %v", got, want)
	}
	for i, f := range frames {
		if final := f["data"].(map[string]any)["final"] == true; final != (i == len(frames)-1) {
			t.Errorf("frame %d final = %v", i, final)
		}
	}
}

// Deletion ends the stream with a "deleted" frame; a client connecting
// afterwards gets 404.
func TestStreamEndsWhenTheTaskIsDeleted(t *testing.T) {
	h := newHarness(t)
	h.submit("t1", "acme")
	c := h.openSSE(path, "acme")
	c.next()
	h.step("t1", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Deleted{Deleted: &taskv1.TaskDeleted{}}})
	frames := c.all()
	if got := summary(frames); !slices.Equal(got, []string{"2 deleted pending deleted"}) || frames[0]["data"].(map[string]any)["final"] != true {
		t.Fatalf("frames = %v", got)
	}
	resp := h.get(path, "acme")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("after deletion: %d", resp.StatusCode)
	}
}

// blockingWriter is a client that stops reading: after the first write,
// writes block until release is closed.
type blockingWriter struct {
	header  http.Header
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
	blocked chan struct{} // closed when a write blocks
	release chan struct{}
	once    sync.Once
}

func (b *blockingWriter) Header() http.Header { return b.header }
func (b *blockingWriter) WriteHeader(int)     {}
func (b *blockingWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.writes++
	n := b.writes
	b.mu.Unlock()
	if n > 1 {
		b.once.Do(func() { close(b.blocked) })
		<-b.release
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *blockingWriter) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A client that stops reading is dropped once it falls a buffer behind,
// with reason slow_consumer; it holds up neither the tail nor a client
// that reads, which gets every frame.
func TestSlowConsumerIsDroppedWithoutBlockingOthers(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Buffer = 4; c.WriteTimeout = time.Minute })
	h.submit("t1", "acme")
	fast := h.openSSE(path, "acme")
	fast.next()

	slow := &blockingWriter{header: http.Header{}, blocked: make(chan struct{}), release: make(chan struct{})}
	req := httptest.NewRequest("GET", path, nil)
	req = req.WithContext(authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "acme"}))
	done := make(chan struct{})
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(slow.release) }) }
	t.Cleanup(release) // before the harness's cleanup, which waits for the stream
	go func() { defer close(done); h.svc.ServeSSE(slow, req, "t1", TaskView) }()
	waitFor(t, "both subscriptions", func() bool { return h.svc.Stats().Subscribers == 2 })

	// The fast client reads each frame before the next event is
	// published; the slow one reads nothing after the first.
	events := []*taskv1.TaskEvent{leased("a1"), started("a1")}
	for p := int32(1); p <= 10; p++ {
		events = append(events, progressed("a1", p*5))
	}
	events = append(events, succeeded("a1"))
	frames := []map[string]any{}
	for i, ev := range events {
		h.step("t1", ev)
		frames = append(frames, fast.next())
		if i == 0 {
			<-slow.blocked // the slow client holds its stream in a write
		}
	}
	frames = append(frames, fast.all()...)
	if len(frames) != 13 || summary(frames)[12] != "14 status completed succeeded" {
		t.Fatalf("fast client got %v", summary(frames))
	}
	waitFor(t, "the slow client to be dropped", func() bool { return h.svc.Stats().Dropped == 1 })
	release()
	<-done
	out := slow.String()
	if !strings.Contains(out, "event: close\ndata: {") || !strings.Contains(out, `"reason":"slow_consumer"`) ||
		strings.Contains(out, "completed") {
		t.Errorf("slow client got:\n%s", out)
	}
	st := h.svc.Stats()
	if st.Ended["slow_consumer"] != 1 || st.Ended["final"] != 1 || st.Streams != 0 || st.Subscribers != 0 {
		t.Errorf("stats = %+v", st)
	}
}

// A stream that sends nothing for the idle timeout is closed with reason
// idle, after keep-alive comments.
func TestIdleStreamIsClosed(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond; c.KeepAlive = 50 * time.Millisecond })
	h.submit("t1", "acme")
	resp := h.get(path, "acme")
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	s := string(body)
	if !strings.HasPrefix(s, "id: 1\nevent: status\n") || !strings.Contains(s, ": keep-alive\n\n") ||
		!strings.HasSuffix(s, "event: close\ndata: {\"message\":\"nothing to send for 300ms\",\"reason\":\"idle\"}\n\n") {
		t.Errorf("stream:\n%s", s)
	}
}

// Bad requests are refused with the envelope and open nothing.
func TestStreamRefusals(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxStreamsPerTenant = 1 })
	h.submit("t1", "acme")
	tests := []struct {
		name         string
		path, tenant string
		header       []string
		status, code int
	}{
		{"other tenant", path, "other", nil, 404, 30004},
		{"unknown task", "/api/v1/tasks/nope/events", "acme", nil, 404, 30004},
		{"bad after_version", path + "?after_version=-1", "acme", nil, 400, 30005},
		{"bad Last-Event-ID", path, "acme", []string{"Last-Event-ID", "x"}, 400, 30005},
		{"websocket without upgrade", "/api/v1/tasks/t1/ws", "acme", nil, 400, 30005},
	}
	for _, tt := range tests {
		resp := h.get(tt.path, tt.tenant, tt.header...)
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		if resp.StatusCode != tt.status || body["code"] != float64(tt.code) {
			t.Errorf("%s: %d %v", tt.name, resp.StatusCode, body)
		}
	}
	if st := h.svc.Stats(); st.Subscribers != 0 || st.Frames != 0 {
		t.Errorf("refusals opened streams: %+v", st)
	}

	// One stream per tenant: the second is 429, another tenant's is fine.
	first := h.openSSE(path, "acme")
	first.next()
	resp := h.get(path, "acme")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("over the tenant's limit: %d", resp.StatusCode)
	}
	h.submit("t2", "other")
	h.openSSE("/api/v1/tasks/t2/events", "other").next()
	if st := h.svc.Stats(); st.Refused != 1 || st.Streams != 2 {
		t.Errorf("stats = %+v", st)
	}

	// The scheduler failing is 503, not a stream.
	h.tasks.setErr(status.Error(codes.Unavailable, "scheduler down"))
	h.submit("t3", "acme")
	first.resp.Body.Close()
	waitFor(t, "the first stream to end", func() bool { return h.svc.Stats().Streams == 1 })
	if resp := h.get("/api/v1/tasks/t3/events", "acme"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("scheduler down: %d", resp.StatusCode)
	}

	// After Shutdown: open streams end, new ones are 503.
	h.tasks.setErr(nil)
	h.svc.Shutdown()
	if resp := h.get(path, "acme"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("after shutdown: %d", resp.StatusCode)
	}
}

// Without Kafka brokers the routes exist and answer 503: clients poll.
func TestStreamsDisabledWithoutKafka(t *testing.T) {
	svc, err := New(Config{Tasks: &fakeTasks{}})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Enabled() || svc.Live() {
		t.Error("enabled without brokers")
	}
	mux := runtime.NewServeMux()
	if err := svc.Register(mux, "/api/v1/tasks/{task_id}", TaskView); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", path, nil)
	withTenant(mux).ServeHTTP(rec, req.WithContext(context.Background()))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"code":30099`) {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := svc.Run(ctx); err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "Tasks") {
		t.Errorf("New without Tasks: %v", err)
	}
	bad := kafka.Config{Brokers: []string{"localhost:1"}, SASL: &kafka.SASLConfig{Mechanism: "nope"}}
	if _, err := New(Config{Tasks: &fakeTasks{}, Kafka: bad}); err == nil {
		t.Error("New accepted a bad Kafka config")
	}
	good := kafka.Config{Brokers: []string{"localhost:1"}}
	for _, c := range []HubConfig{{Kafka: good}, {Kafka: good, Topic: "x"}} {
		if _, err := NewHub(c); err == nil {
			t.Errorf("NewHub(%+v) accepted", c)
		}
	}
	svc, err := New(Config{Tasks: &fakeTasks{}})
	if err != nil {
		t.Fatal(err)
	}
	mux := runtime.NewServeMux()
	if err := svc.Register(mux, "/api/v1/tasks/{id}", TaskView); err == nil {
		t.Error("Register accepted a prefix without {task_id}")
	}
	if err := svc.Register(mux, "/api/v1/tasks/{task_id}", nil); err == nil {
		t.Error("Register accepted a nil view")
	}
}

// An idle WebSocket gets its frames, pings, and a 1001 close frame saying
// to reconnect.
func TestIdleWebSocketIsClosedWithGoingAway(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond; c.KeepAlive = 50 * time.Millisecond })
	h.submit("t1", "acme")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.srv.URL, "http")+"/api/v1/tasks/t1/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"X-Tenant": {"acme"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	_, msg, err := c.Read(ctx)
	if err != nil || !strings.HasPrefix(string(msg), `{"id":1,"event":"status","data":{"task_id":"t1","version":1,"change":"snapshot"`) {
		t.Fatalf("first message %s, %v", msg, err)
	}
	_, _, err = c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusGoingAway || !strings.Contains(ce.Reason, "idle") {
		t.Errorf("close = %v", err)
	}
	waitFor(t, "the stream to end", func() bool { return h.svc.Stats().Ended["idle"] == 1 })
}
