package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

// DefaultTopic is the task event topic, as TaskEvent declares it in
// proto/taskmesh/task/v1/task_events.proto.
var DefaultTopic = kafka.EnvelopeTopic(&taskv1.TaskEvent{})

// Defaults of Config.
const (
	DefaultMaxStreamsPerTenant = 100
	DefaultBuffer              = 256
	DefaultKeepAlive           = 15 * time.Second
	DefaultIdleTimeout         = 10 * time.Minute
	DefaultWriteTimeout        = 10 * time.Second
	// getTaskTimeout bounds each snapshot read from the scheduler.
	getTaskTimeout = 10 * time.Second
)

// TaskReader reads one task as the caller (the principal in ctx) may see
// it; taskv1.TaskServiceClient on the gateway's upstream connection is one.
type TaskReader interface {
	GetTask(ctx context.Context, in *taskv1.GetTaskRequest, opts ...grpc.CallOption) (*taskv1.GetTaskResponse, error)
}

// Config configures a Service. Zero durations and counts take the defaults.
type Config struct {
	// Kafka feeds the streams. Without brokers the stream routes answer
	// 503: the gateway then serves only polling.
	Kafka kafka.Config
	// Topic is the task event topic (DefaultTopic).
	Topic string
	// Tasks reads snapshots; required.
	Tasks TaskReader
	// Groups, if set, feeds task-group streams (RegisterGroups); they
	// need no Kafka brokers.
	Groups GroupWatcher
	// Jobs, if set, reads job snapshots, and the job topic (JobTopic,
	// default DefaultJobTopic) feeds the job streams (RegisterJobs).
	Jobs     JobReader
	JobTopic string
	// MaxStreamsPerTenant bounds a tenant's open streams on this gateway;
	// one more is answered 429.
	MaxStreamsPerTenant int
	// Buffer is how many events a stream may fall behind before it is
	// closed as a slow consumer.
	Buffer int
	// KeepAlive is the interval of SSE comments and WebSocket pings.
	KeepAlive time.Duration
	// IdleTimeout closes a stream that sent nothing for that long; the
	// client reconnects with its last id.
	IdleTimeout time.Duration
	// WriteTimeout bounds one write to a client (a frame, a ping).
	WriteTimeout time.Duration
	Logger       *slog.Logger
}

func (c *Config) defaults() {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.MaxStreamsPerTenant <= 0 {
		c.MaxStreamsPerTenant = DefaultMaxStreamsPerTenant
	}
	if c.Buffer <= 0 {
		c.Buffer = DefaultBuffer
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Service serves live task streams: SSE and WebSocket endpoints fed by a
// Hub tailing the task topic.
type Service struct {
	cfg Config
	log *slog.Logger
	hub *Hub // nil without Kafka brokers
	// jobHub tails the job topic; nil without Kafka brokers or Jobs.
	jobHub *Hub

	stopping context.Context
	stop     context.CancelFunc
	streams  sync.WaitGroup

	mu        sync.Mutex
	perTenant map[string]int
	metrics   *metrics
}

// New returns a service; Run tails the topic, Shutdown ends the streams.
func New(cfg Config) (*Service, error) {
	cfg.defaults()
	if cfg.Tasks == nil {
		return nil, errors.New("live: Config.Tasks is nil")
	}
	s := &Service{cfg: cfg, log: cfg.Logger.With("component", "live"), perTenant: map[string]int{}, metrics: newMetrics()}
	s.stopping, s.stop = context.WithCancel(context.Background())
	if len(cfg.Kafka.Brokers) > 0 {
		hub, err := NewHub(HubConfig{Kafka: cfg.Kafka, Topic: cfg.Topic, Buffer: cfg.Buffer, Logger: s.log})
		if err != nil {
			return nil, err
		}
		s.hub = hub
		if cfg.Jobs != nil {
			if cfg.JobTopic == "" {
				cfg.JobTopic = DefaultJobTopic
				s.cfg.JobTopic = cfg.JobTopic
			}
			if s.jobHub, err = NewHub(HubConfig{Kafka: cfg.Kafka, Topic: cfg.JobTopic, Buffer: cfg.Buffer, Logger: s.log,
				NewEnvelope: func() Envelope { return &pipelinev1.JobEvent{} }}); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Enabled reports whether streams are served (Kafka is configured).
func (s *Service) Enabled() bool { return s.hub != nil }

// Live reports whether the hub's tail is running.
func (s *Service) Live() bool { return s.hub != nil && s.hub.Live() }

// Run tails the task topic (and the job topic) until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	if s.hub == nil {
		<-ctx.Done()
		return nil
	}
	if s.jobHub == nil {
		return s.hub.Run(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- s.jobHub.Run(ctx) }()
	err := s.hub.Run(ctx)
	return errors.Join(err, <-done)
}

// Shutdown ends every open stream (SSE clients get a "close" event,
// WebSocket clients status 1001) and waits for them to finish. New streams
// are refused with 503 afterwards.
func (s *Service) Shutdown() {
	s.mu.Lock()
	s.stop()
	s.mu.Unlock()
	s.streams.Wait()
}

// Router is where Register adds routes: a grpc-gateway runtime.ServeMux.
type Router interface {
	HandlePath(method, pattern string, h runtime.HandlerFunc) error
}

// Register adds the two stream routes of an API to mux: GET
// <prefix>/events (SSE) and GET <prefix>/ws (WebSocket), where prefix ends
// with the path parameter {task_id}, e.g. "/api/v1/tasks/{task_id}".
// view renders the API's frames. Authentication is mux's caller's job: the
// handlers expect the principal in the request's context.
func (s *Service) Register(mux Router, prefix string, view View) error {
	if view == nil {
		return errors.New("live: nil view")
	}
	return s.register(mux, prefix, func(_ bool, serve transport) serveFunc {
		return func(w http.ResponseWriter, r *http.Request, taskID string) { serve(w, r, taskID, view) }
	})
}

// transport serves one stream (ServeSSE, ServeWebSocket).
type transport func(w http.ResponseWriter, r *http.Request, taskID string, view View)

// serveFunc answers one stream request for taskID.
type serveFunc func(w http.ResponseWriter, r *http.Request, taskID string)

// register adds GET <prefix>/events and <prefix>/ws, each served by what
// handler makes of its transport (ws: the WebSocket's, else SSE's).
func (s *Service) register(mux Router, prefix string, handler func(ws bool, serve transport) serveFunc) error {
	if !strings.HasSuffix(prefix, "/{task_id}") {
		return fmt.Errorf("live: route prefix %q must end with /{task_id}", prefix)
	}
	routes := []struct {
		suffix string
		ws     bool
		serve  transport
	}{{"/events", false, s.ServeSSE}, {"/ws", true, s.ServeWebSocket}}
	for _, rt := range routes {
		serve := handler(rt.ws, rt.serve)
		err := mux.HandlePath(http.MethodGet, prefix+rt.suffix, func(w http.ResponseWriter, r *http.Request, p map[string]string) {
			serve(w, r, p["task_id"])
		})
		if err != nil {
			return fmt.Errorf("live: route %s%s: %w", prefix, rt.suffix, err)
		}
	}
	return nil
}

// open checks a stream request and reads the task's snapshot as the caller.
// On a refusal it has answered with the API's error envelope and returns
// false. Otherwise the caller must call close when the stream ends.
func (s *Service) open(w http.ResponseWriter, r *http.Request, taskID string, view View) (st *stream, closeFn func(), ok bool) {
	switch {
	case s.hub == nil:
		httperr.WriteFor(w, r, httperr.New(http.StatusServiceUnavailable, httperr.CodeInternal,
			"live task streams are not enabled on this gateway (no Kafka brokers configured); poll the task instead"))
		return nil, nil, false
	case taskID == "":
		httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, "task id is empty"))
		return nil, nil, false
	}
	after, p, slot, ok := s.admit(w, r)
	if !ok {
		return nil, nil, false
	}
	// Subscribe before reading the snapshot: an event committed after the
	// read is then either in the subscription or in a later snapshot.
	sub := s.hub.Subscribe(taskID, p.TenantID)
	closeFn = func() { sub.Close(); s.release(slot) }
	snap, err := s.getTask(r.Context(), taskID)
	if err == nil && snap.GetId() != "" && snap.GetId() != taskID {
		// The path named the task by the name its create gave it
		// (docs/api/tasks.md, "The client's id"): the topic knows it by
		// its id, so subscribe to that and read the snapshot again.
		sub.Close()
		taskID = snap.GetId()
		sub = s.hub.Subscribe(taskID, p.TenantID)
		closeFn = func() { sub.Close(); s.release(slot) }
		snap, err = s.getTask(r.Context(), taskID)
	}
	if err != nil {
		closeFn()
		s.openFailed(w, r, err, "live stream: reading the task failed", "task_id", taskID)
		return nil, nil, false
	}
	st = &stream{svc: s, view: view, id: taskID, sub: sub, sent: after}
	st.start(snap)
	return st, closeFn, true
}

// admit reads a stream request's resume point (resumePoint) and takes one
// of its caller's stream slots (acquire): the slot's key is the caller's
// tenant, or its subject for a caller of no tenant (an operator). On a
// refusal it has answered with the API's error envelope (400 for a bad
// resume point, 429 at the caller's limit, 503 while the gateway stops)
// and returns false; otherwise the caller releases the slot (release)
// when the stream ends.
func (s *Service) admit(w http.ResponseWriter, r *http.Request) (after int64, p authn.Principal, slot string, ok bool) {
	after, err := resumePoint(r)
	if err != nil {
		httperr.WriteFor(w, r, httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, err.Error()))
		return 0, p, "", false
	}
	p, _ = authn.FromContext(r.Context())
	slot = p.TenantID
	if slot == "" {
		slot = "subject:" + p.Subject
	}
	switch err := s.acquire(slot); {
	case errors.Is(err, errStopping):
		httperr.WriteFor(w, r, httperr.New(http.StatusServiceUnavailable, httperr.CodeInternal, "gateway shutting down"))
		return 0, p, "", false
	case err != nil:
		s.metrics.refused(r.Context())
		httperr.WriteFor(w, r, httperr.New(http.StatusTooManyRequests, httperr.CodeTooManyRequests, err.Error()))
		return 0, p, "", false
	}
	return after, p, slot, true
}

// openFailed answers a stream whose first read failed with err, as the
// API answers that error, and logs it when it is the server's (5xx) with
// msg and the stream's attributes.
func (s *Service) openFailed(w http.ResponseWriter, r *http.Request, err error, msg string, attrs ...any) {
	pr := httperr.FromError(err)
	if pr.HTTPStatus >= 500 {
		s.log.Error(msg, append(attrs, "err", err, "request_id", requestid.FromContext(r.Context()))...)
	}
	httperr.WriteFor(w, r, pr)
}

// resumePoint is the last version the client has: the larger of the
// Last-Event-ID header (sent by EventSource when it reconnects) and the
// after_version query parameter; 0 when neither is given.
func resumePoint(r *http.Request) (int64, error) {
	var after int64
	for _, src := range []struct{ name, value string }{
		{"Last-Event-ID", r.Header.Get("Last-Event-ID")},
		{"after_version", r.URL.Query().Get("after_version")},
	} {
		if src.value == "" {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(src.value), 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("%s must be a task version (a non-negative integer), got %q", src.name, src.value)
		}
		after = max(after, v)
	}
	return after, nil
}

func (s *Service) getTask(ctx context.Context, id string) (*taskv1.Task, error) {
	ctx, cancel := context.WithTimeout(ctx, getTaskTimeout)
	defer cancel()
	resp, err := s.cfg.Tasks.GetTask(ctx, &taskv1.GetTaskRequest{Id: id})
	if err != nil {
		return nil, err
	}
	return resp.GetTask(), nil
}

var errStopping = errors.New("gateway shutting down")

// acquire counts a new stream of tenant, refusing it over the tenant's
// limit or once Shutdown began. Under mu, so Shutdown's Wait never races
// an Add.
func (s *Service) acquire(tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopping.Err() != nil:
		return errStopping
	case s.perTenant[tenant] >= s.cfg.MaxStreamsPerTenant:
		return fmt.Errorf("too many live streams for this tenant (at most %d per gateway)", s.cfg.MaxStreamsPerTenant)
	}
	s.perTenant[tenant]++
	s.streams.Add(1)
	return nil
}

func (s *Service) release(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perTenant[tenant]--; s.perTenant[tenant] <= 0 {
		delete(s.perTenant, tenant)
	}
	s.streams.Done()
}

// streamContext is ctx, also cancelled when the service shuts down.
func (s *Service) streamContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.stopping, cancel)
	return ctx, func() { stop(); cancel() }
}
