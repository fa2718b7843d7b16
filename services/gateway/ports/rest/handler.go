package rest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"google.golang.org/grpc"

	openapi "github.com/taskmesh/taskmesh/gen/openapi"
	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/gateway/internal/edge"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
	"github.com/taskmesh/taskmesh/services/gateway/internal/live"
	"github.com/taskmesh/taskmesh/services/gateway/internal/outbound"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

// maxBodyBytes bounds request bodies. The largest legitimate body is a
// completion with 64 KiB each of stdout and stderr; larger results go to the
// object store.
const maxBodyBytes = 1 << 20

// Authenticator checks a bearer secret used from an address (see
// credentials.Store.Authenticate for the errors).
type Authenticator interface {
	Authenticate(ctx context.Context, bearer, remoteIP string) (authn.Principal, error)
}

// Options configure the handler.
type Options struct {
	// Upstream is the connection to the scheduler; it must carry the
	// interceptors of package outbound.
	Upstream grpc.ClientConnInterface
	// QuotaUpstream, if set, is the connection to the quota service
	// (QuotaService and AdmissionService routes), with the same interceptors.
	QuotaUpstream grpc.ClientConnInterface
	// ConsumersUpstream, if set, is the connection to the consumers service
	// (audit log, usage, webhooks routes), with the same interceptors.
	ConsumersUpstream grpc.ClientConnInterface
	Auth              Authenticator
	// TrustedProxies may set X-Forwarded-For (see package clientip).
	TrustedProxies []netip.Prefix
	// Ready reports whether the scheduler connection is ready (/healthz).
	Ready func() bool
	// Objects, if not nil, serves /objects/ without authentication: its
	// URLs are signed. It sees the full path, which signatures cover.
	Objects http.Handler
	// Throttle, if not nil, wraps the API after authentication (the
	// principal is in the request's context): the rate limits.
	Throttle func(http.Handler) http.Handler
	// Admin and Agents, if not nil, are served under /api/v1/admin/ to
	// operator keys.
	Admin  adminv1.AdminServiceServer
	Agents adminv1.AgentServiceServer
	// DeadLetters, if not nil, is served under /api/v1/admin/dead-letters
	// to operator keys.
	DeadLetters deadletterv1.DeadLetterServiceServer
	// Live, if not nil, serves live task streams at
	// /api/v1/tasks/{task_id}/events and /ws (and, when it watches groups,
	// /api/v1/task-groups/{group_id}/events and /ws), and live job streams
	// at /jobs/{job_id}/events.
	Live *live.Service
	// MaxUploadBytes bounds a POST /jobs/uploads request (default
	// DefaultMaxUploadBytes).
	MaxUploadBytes int64
	// Console, if not nil, is served at /ui/ without authentication (the
	// web console's static files; it signs in with an API key itself).
	Console http.Handler
	// Metrics, if not nil, is served at /metrics without authentication
	// (the Prometheus exposition; the gateway's --metrics-addr moves it
	// off the public port).
	Metrics http.Handler
	Logger  *slog.Logger
}

// liveTaskRoutes and liveVideoRoutes are the prefixes of the task and
// video APIs' live stream routes (…/events: SSE, …/ws: WebSocket).
const (
	liveTaskRoutes  = "/api/v1/tasks/{task_id}"
	liveVideoRoutes = "/v1/video/generations/{task_id}"
	liveGroupRoutes = "/api/v1/task-groups/{group_id}"
	liveJobRoutes   = "/jobs/{job_id}"
)

// apiDocument is the OpenAPI document of a handler and the index of the
// routes it serves, read from it. Both depend only on the compiled protos
// and on which live routes the handler has, so a process builds each of
// the three shapes at most once (apiDocuments) and every handler of that
// shape shares it; neither is changed after it is built. A process with
// several gateways (the end-to-end tests start one per deployment) built
// the same few megabytes of maps once per gateway before
// (docs/decisions/0129-one-openapi-document-and-validator-per-process.md).
type apiDocument struct {
	doc    []byte
	routes routeIndex
}

// apiDocuments builds the document of a handler with the live stream
// routes or without (the key's first flag), and with the live group
// routes or without (its second).
var apiDocuments = map[[2]bool]func() (apiDocument, error){
	{false, false}: sync.OnceValues(func() (apiDocument, error) { return buildAPIDocument(false, false) }),
	{true, false}:  sync.OnceValues(func() (apiDocument, error) { return buildAPIDocument(true, false) }),
	{true, true}:   sync.OnceValues(func() (apiDocument, error) { return buildAPIDocument(true, true) }),
}

func buildAPIDocument(withLive, liveGroups bool) (apiDocument, error) {
	extras := []Extra{{Video: openapi.VideoJSON}, pipelineExtra(withLive)}
	if withLive {
		extras = append(extras, Extra{
			Paths:       live.OpenAPIPaths(liveTaskRoutes, "TaskService", "#/definitions/liveTaskFrame"),
			Definitions: map[string]any{"liveTaskFrame": live.TaskFrameSchema()},
		}, Extra{
			Paths:       live.OpenAPIPaths(liveVideoRoutes, "VideoService", "#/definitions/liveVideoFrame"),
			Definitions: map[string]any{"liveVideoFrame": live.VideoFrameSchema()},
		})
		if liveGroups {
			extras = append(extras, Extra{
				Paths:       live.OpenAPIGroupPaths(liveGroupRoutes, "TaskGroupService", "#/definitions/liveGroupFrame"),
				Definitions: map[string]any{"liveGroupFrame": live.GroupFrameSchema()},
			})
		}
	}
	doc, err := Document(openapi.JSON, extras...)
	if err != nil {
		return apiDocument{}, fmt.Errorf("rest: openapi document: %w", err)
	}
	routes, err := newRouteIndex(doc)
	if err != nil {
		return apiDocument{}, err
	}
	return apiDocument{doc: doc, routes: routes}, nil
}

type handler struct {
	api      http.Handler // authenticated API
	video    http.Handler // authenticated video API
	pipeline http.Handler // authenticated pipeline API
	objects  http.Handler
	console  http.Handler
	metrics  http.Handler
	measured httpMetrics
	openapi  []byte
	ready    func() bool
	log      *slog.Logger
}

// NewHandler returns the gateway's HTTP handler.
func NewHandler(ctx context.Context, opts Options) (http.Handler, error) {
	withLive := opts.Live != nil
	built, err := apiDocuments[[2]bool{withLive, withLive && opts.Live.Groups()}]()
	if err != nil {
		return nil, err
	}
	doc, routes := built.doc, built.routes
	mux, err := newAPIMux(ctx, opts.Upstream, opts.QuotaUpstream, opts.ConsumersUpstream, routes, opts.Logger)
	if err != nil {
		return nil, err
	}
	if opts.Live != nil {
		if err := opts.Live.Register(mux, liveTaskRoutes, live.TaskView); err != nil {
			return nil, fmt.Errorf("rest: %w", err)
		}
		if opts.Live.Groups() {
			if err := opts.Live.RegisterGroups(mux, liveGroupRoutes); err != nil {
				return nil, fmt.Errorf("rest: %w", err)
			}
		}
	}
	if opts.Admin != nil {
		if err := adminv1.RegisterAdminServiceHandlerServer(ctx, mux, opts.Admin); err != nil {
			return nil, fmt.Errorf("rest: register admin service: %w", err)
		}
	}
	if opts.Agents != nil {
		if err := adminv1.RegisterAgentServiceHandlerServer(ctx, mux, opts.Agents); err != nil {
			return nil, fmt.Errorf("rest: register agent service: %w", err)
		}
	}
	if opts.DeadLetters != nil {
		if err := deadletterv1.RegisterDeadLetterServiceHandlerServer(ctx, mux, opts.DeadLetters); err != nil {
			return nil, fmt.Errorf("rest: register dead-letter service: %w", err)
		}
	}
	if err := registerHotRoutes(ctx, mux, opts.Upstream); err != nil {
		return nil, err
	}
	video, err := newVideoMux(ctx, opts.Upstream, routes, opts.Logger)
	if err != nil {
		return nil, err
	}
	if opts.Live != nil {
		if err := opts.Live.RegisterVideo(video, liveVideoRoutes, videov1.NewVideoServiceClient(opts.Upstream)); err != nil {
			return nil, fmt.Errorf("rest: %w", err)
		}
	}
	pipeline, err := newPipelineMux(ctx, opts.Upstream, routes, opts.Logger)
	if err != nil {
		return nil, err
	}
	if opts.Live != nil {
		if err := opts.Live.RegisterJobs(pipeline, liveJobRoutes); err != nil {
			return nil, fmt.Errorf("rest: %w", err)
		}
	}
	maxUpload := opts.MaxUploadBytes
	if maxUpload <= 0 {
		maxUpload = DefaultMaxUploadBytes
	}
	// Bad input is refused after the rate limits have charged the request
	// (garbage costs like anything else) and before any service sees it.
	// Uploads are multipart and streamed: only their declared size is
	// checked at the edge.
	var api, videoAPI, pipelineAPI http.Handler = edge.Middleware(edge.Options{MaxBody: maxBodyBytes}, csvFormat(unwrapFileForms(partialUpdates(kueueSpecs(readDateBounds(mux)))))),
		edge.Middleware(edge.Options{MaxBody: maxVideoBodyBytes}, video),
		edge.Middleware(edge.Options{MaxBody: maxBodyBytes, RawMaxBody: maxUpload,
			RawBody: func(r *http.Request) bool { return r.URL.Path == uploadRoute }}, bodyLimit{next: pipeline, maxUpload: maxUpload})
	if opts.Throttle != nil {
		api, videoAPI, pipelineAPI = opts.Throttle(api), opts.Throttle(videoAPI), opts.Throttle(pipelineAPI)
	}
	return &handler{
		api: &authenticator{next: api, auth: opts.Auth, trusted: opts.TrustedProxies, log: opts.Logger, routes: routes},
		video: &authenticator{next: videoAPI, auth: opts.Auth, trusted: opts.TrustedProxies, log: opts.Logger,
			maxBody: maxVideoBodyBytes, routes: routes},
		// bodyLimit bounds each route's body; the authenticator's bound is
		// the largest of them.
		pipeline: &authenticator{next: pipelineAPI, auth: opts.Auth, trusted: opts.TrustedProxies, log: opts.Logger,
			maxBody: maxUpload, routes: routes},
		objects:  opts.Objects,
		console:  opts.Console,
		metrics:  opts.Metrics,
		measured: newHTTPMetrics(),
		openapi:  doc,
		ready:    opts.Ready,
		log:      opts.Logger,
	}, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := requestid.Ensure(r.Header.Get(requestid.Header))
	w.Header().Set(requestid.Header, id)
	ctx := requestid.NewContext(r.Context(), id)
	ctx = outbound.ExtractTrace(ctx, r.Header.Get("Traceparent"), r.Header.Get("Tracestate"))
	h.measured.measure(ctx, w, r, h.route(r.URL.Path), h.serve)
}

// route is the metrics' route label of path before a mux refines it.
func (h *handler) route(path string) string {
	switch {
	case path == "/healthz":
		return routeHealth
	case path == "/openapi.json":
		return routeOpenAPI
	case h.metrics != nil && path == "/metrics":
		return routeMetrics
	case h.objects != nil && strings.HasPrefix(path, "/objects/"):
		return routeObjects
	case httperr.IsVideoPath(path):
		return routeVideo
	case httperr.IsPipelinePath(path):
		return routePipeline
	case h.console != nil && (path == "/ui" || strings.HasPrefix(path, "/ui/")):
		return routeConsole
	case strings.HasPrefix(path, "/api/"):
		return routeAPI
	}
	return routeUnmatched
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request) {
	defer h.recover(w, r)
	switch h.route(r.URL.Path) {
	case routeHealth:
		h.health(w, r)
	case routeOpenAPI:
		h.serveOpenAPI(w, r)
	case routeMetrics:
		if onlyGet(w, r) {
			h.metrics.ServeHTTP(w, r)
		}
	case routeObjects:
		h.objects.ServeHTTP(w, r)
	case routeVideo:
		h.video.ServeHTTP(w, r)
	case routePipeline:
		h.pipeline.ServeHTTP(w, r)
	case routeConsole:
		h.console.ServeHTTP(w, r)
	case routeAPI:
		h.api.ServeHTTP(w, r)
	default:
		httperr.WriteFor(w, r, httperr.New(http.StatusNotFound, httperr.CodeNoRoute, "no route for "+r.Method+" "+r.URL.Path))
	}
}

// recover answers a panic with the envelope instead of a dropped
// connection, and logs it.
func (h *handler) recover(w http.ResponseWriter, r *http.Request) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v)
	}
	h.log.Error("panic serving http", "panic", v, "method", r.Method, "path", r.URL.Path,
		"request_id", requestid.FromContext(r.Context()))
	httperr.WriteFor(w, r, httperr.New(http.StatusInternalServerError, httperr.CodeInternal, "internal error"))
}

// onlyGet answers 405 for other methods and reports whether to go on.
func onlyGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	httperr.WriteFor(w, r, httperr.New(http.StatusMethodNotAllowed, httperr.CodeMethodNotAllowed, r.Method+" not allowed on "+r.URL.Path))
	return false
}

func (h *handler) health(w http.ResponseWriter, r *http.Request) {
	if !onlyGet(w, r) {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if !h.ready() {
		httperr.WriteFor(w, r, httperr.New(http.StatusServiceUnavailable, httperr.CodeInternal, "scheduler connection not ready"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

func (h *handler) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	if !onlyGet(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(h.openapi)
}
