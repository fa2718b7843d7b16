package live

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
)

// fakeTasks is the scheduler's GetTask as the caller's tenant sees it.
type fakeTasks struct {
	mu     sync.Mutex
	tasks  map[string]*taskv1.Task
	tenant map[string]string
	err    error // answered to every call while set
	calls  int
	// names maps the names creates gave tasks to the tasks' ids, as the
	// scheduler resolves them for the task's own tenant.
	names map[string]string
}

func (f *fakeTasks) GetTask(ctx context.Context, in *taskv1.GetTaskRequest, _ ...grpc.CallOption) (*taskv1.GetTaskResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	p, _ := authn.FromContext(ctx)
	id := in.GetId()
	if f.tasks[id] == nil && f.names[id] != "" {
		id = f.names[id]
	}
	t := f.tasks[id]
	if t == nil || f.tenant[id] != p.TenantID {
		return nil, status.Error(codes.NotFound, "task not found")
	}
	return &taskv1.GetTaskResponse{Task: proto.CloneOf(t)}, nil
}

func (f *fakeTasks) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// harness is a Service tailing a real (embedded) broker, behind an HTTP
// server that authenticates by the X-Tenant header, with the scheduler
// faked by fakeTasks.
type harness struct {
	t     *testing.T
	prod  *kgo.Client
	tasks *fakeTasks
	svc   *Service
	srv   *httptest.Server
}

func newHarness(t *testing.T, mutate ...func(*Config)) *harness {
	t.Helper()
	broker := kafkatest.New(t, kafkatest.WithPartitions(2))
	opts, err := broker.Config().Opts()
	if err != nil {
		t.Fatal(err)
	}
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(DefaultTopic))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafka.EnsureTopics(ctx, prod, kafka.TopicSpec{Name: DefaultTopic, Partitions: 2, ReplicationFactor: -1}); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, prod: prod, tasks: &fakeTasks{tasks: map[string]*taskv1.Task{}, tenant: map[string]string{}}}
	cfg := Config{Kafka: broker.Config(), Tasks: h.tasks, KeepAlive: time.Hour, IdleTimeout: time.Hour}
	for _, m := range mutate {
		m(&cfg)
	}
	if h.svc, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.svc.Run(runCtx) }()
	mux := runtime.NewServeMux()
	if err := h.svc.Register(mux, "/api/v1/tasks/{task_id}", TaskView); err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(withTenant(mux))
	t.Cleanup(func() {
		h.svc.Shutdown()
		h.srv.Close()
		stop()
		<-done
	})
	waitFor(t, "the tail to start", h.svc.Live)
	return h
}

// withTenant authenticates requests as the tenant in X-Tenant.
func withTenant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := authn.Principal{Kind: authn.KindUser, TenantID: r.Header.Get("X-Tenant"), Subject: "key"}
		next.ServeHTTP(w, r.WithContext(authn.NewContext(r.Context(), p)))
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// submit makes task id of tenant exist at version 1 (pending), without
// publishing its event: the streams start after it.
func (h *harness) submit(id, tenant string) {
	h.tasks.mu.Lock()
	defer h.tasks.mu.Unlock()
	t := &taskv1.Task{}
	apply(t, &taskv1.TaskEvent{AggregateId: id, Version: 1, OccurredAt: timestamppb.Now(),
		Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{}}})
	t.MaxRetries = 1
	h.tasks.tasks[id], h.tasks.tenant[id] = t, tenant
}

// record moves the scheduler's task id one version on with ev (filled in)
// and returns the event, without publishing it.
func (h *harness) record(id string, ev *taskv1.TaskEvent) *taskv1.TaskEvent {
	h.tasks.mu.Lock()
	defer h.tasks.mu.Unlock()
	t := h.tasks.tasks[id]
	ev.AggregateId, ev.Version, ev.TenantId, ev.OccurredAt = id, int64(t.GetVersion())+1, h.tasks.tenant[id], timestamppb.Now()
	if apply(t, ev) {
		// GetTask hides deleted tasks; keep the version for the next one.
		h.tasks.tasks[id] = &taskv1.Task{Id: id, Version: t.Version}
		delete(h.tasks.tenant, id)
	}
	return ev
}

// publish writes ev to the task topic.
func (h *harness) publish(ev *taskv1.TaskEvent) {
	h.t.Helper()
	raw, err := proto.Marshal(ev)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.prod.ProduceSync(ctx, &kgo.Record{Key: []byte(ev.GetAggregateId()), Value: raw}).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

// step records and publishes one event.
func (h *harness) step(id string, ev *taskv1.TaskEvent) *taskv1.TaskEvent {
	ev = h.record(id, ev)
	h.publish(ev)
	return ev
}

func leased(attempt string) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Leased{Leased: &taskv1.TaskLeased{AttemptId: attempt, AgentId: "agent-1"}}}
}

func started(attempt string) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Started{Started: &taskv1.TaskStarted{AttemptId: attempt}}}
}

func progressed(attempt string, p int32) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{AttemptId: attempt, Progress: p,
		Message: "step " + strconv.Itoa(int(p))}}}
}

func succeeded(attempt string) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{AttemptId: attempt,
		EndedAt: timestamppb.Now()}}}
}

// sse is a test SSE client.
type sse struct {
	t      *testing.T
	resp   *http.Response
	frames chan map[string]any // id, event and data of each frame
}

// get sends a GET to path as tenant.
func (h *harness) get(path, tenant string, header ...string) *http.Response {
	h.t.Helper()
	req, err := http.NewRequest("GET", h.srv.URL+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("X-Tenant", tenant)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (h *harness) openSSE(path, tenant string, header ...string) *sse {
	h.t.Helper()
	resp := h.get(path, tenant, header...)
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	c := &sse{t: h.t, resp: resp, frames: make(chan map[string]any, 1000)}
	go func() {
		defer close(c.frames)
		rd := bufio.NewReader(resp.Body)
		f := map[string]any{}
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			if line == "" {
				if len(f) > 0 {
					c.frames <- f
				}
				f = map[string]any{}
				continue
			}
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "id", "event":
				f[k] = v
			case "data":
				var data map[string]any
				if err := json.Unmarshal([]byte(v), &data); err != nil {
					c.t.Errorf("data %q: %v", v, err)
				}
				f[k] = data
			}
		}
	}()
	return c
}

// all reads frames until the stream ends.
func (c *sse) all() []map[string]any {
	c.t.Helper()
	var out []map[string]any
	timeout := time.After(20 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return out
			}
			out = append(out, f)
		case <-timeout:
			c.t.Fatalf("stream did not end; frames so far %v", summary(out))
		}
	}
}

// next reads one frame.
func (c *sse) next() map[string]any {
	c.t.Helper()
	select {
	case f, ok := <-c.frames:
		if !ok {
			c.t.Fatal("stream ended")
		}
		return f
	case <-time.After(20 * time.Second):
		c.t.Fatal("no frame")
	}
	return nil
}

// summary lists frames as "id event status change".
func summary(frames []map[string]any) []string {
	var out []string
	for _, f := range frames {
		d, _ := f["data"].(map[string]any)
		out = append(out, strings.TrimSpace(strings.Join([]string{str(f["id"]), str(f["event"]), str(d["status"]), str(d["change"])}, " ")))
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
