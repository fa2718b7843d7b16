package rest

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// httpMetrics count requests by route template (never the raw path: task
// ids would make a series per task), method and status code, and time
// them by route and method (docs/operations.md).
type httpMetrics struct {
	requests metric.Int64Counter
	duration metric.Float64Histogram
}

func newHTTPMetrics() httpMetrics {
	meter := gotel.Meter("github.com/taskmesh/taskmesh/services/gateway/ports/rest")
	var m httpMetrics
	// Instrument errors concern invalid names only; these are constant.
	m.requests, _ = meter.Int64Counter("taskmesh.http.requests",
		metric.WithDescription("HTTP requests answered, by route template, method and status code"), metric.WithUnit("{request}"))
	m.duration, _ = meter.Float64Histogram("taskmesh.http.request.duration",
		metric.WithDescription("time to answer an HTTP request (a live stream: its whole life), by route template and method"),
		metric.WithUnit("s"))
	return m
}

// Route labels of the requests no mux route template names.
const (
	routeUnmatched = "unmatched" // no route (404) or refused before routing
	routeHealth    = "/healthz"
	routeOpenAPI   = "/openapi.json"
	routeMetrics   = "/metrics"
	routeObjects   = "/objects/*"
	routeConsole   = "/ui/*"
	// The prefixes of the authenticated APIs: a request refused before
	// its mux routed it (401, 429) keeps these.
	routeAPI      = "/api/*"
	routeVideo    = "/v1/video/*"
	routePipeline = "/jobs/*"
)

// routeLabel is where the mux middleware leaves the matched route's
// template for the metrics wrapper that outlives it.
type routeLabel struct{ route string }

type routeLabelKey struct{}

// recordRoute is the muxes' middleware: it names the request's route
// template for the metrics. The mux has matched the route's pattern
// (runtime.HTTPPattern) by then; its String spells variables as
// {name=*}, shortened here to the documented {name}.
//
// The mux wraps each route's handler in its own call of recordRoute, so
// the closure serves one pattern: its template is worked out on the
// route's first request and kept (String formats the pattern anew on
// every call, and a Pattern, holding slices, cannot key a map).
func recordRoute(next runtime.HandlerFunc) runtime.HandlerFunc {
	var template atomic.Pointer[string]
	return func(w http.ResponseWriter, r *http.Request, p map[string]string) {
		if l, ok := r.Context().Value(routeLabelKey{}).(*routeLabel); ok {
			t := template.Load()
			if t == nil {
				if pattern, ok := runtime.HTTPPattern(r.Context()); ok {
					s := routeTemplate(pattern.String())
					template.Store(&s)
					t = &s
				}
			}
			if t != nil {
				l.route = *t
			}
		}
		next(w, r, p)
	}
}

// patternVar is a variable of a route pattern's String: {task_id=*}.
var patternVar = regexp.MustCompile(`\{([^=}]+)=[^}]*\}`)

// routeTemplates holds the template of every pattern seen: the muxes have
// a fixed set of routes, and a regexp per request showed in profiles.
var routeTemplates sync.Map // pattern String → template

func routeTemplate(pattern string) string {
	if t, ok := routeTemplates.Load(pattern); ok {
		return t.(string)
	}
	t := patternVar.ReplaceAllString(pattern, "{$1}")
	routeTemplates.Store(pattern, t)
	return t
}

// measure serves r, with ctx as its context, through serve and records it
// under the route serve leaves in the label (initially route). Taking the
// caller's context saves the request a copy (WithContext copies it).
func (m httpMetrics) measure(ctx context.Context, w http.ResponseWriter, r *http.Request, route string, serve func(http.ResponseWriter, *http.Request)) {
	start := time.Now()
	r, label := withRouteLabel(ctx, r, route)
	rec := &statusRecorder{ResponseWriter: w}
	ctx = r.Context()
	defer func() {
		// Recorded on panics too (recover answers 500 further up).
		code := rec.status
		if code == 0 {
			code = http.StatusOK
		}
		if p := recover(); p != nil {
			code = http.StatusInternalServerError
			defer panic(p)
		}
		code = answeredCode(code, ctx.Err())
		labels := requestLabelsFor(label.route, methodLabel(r.Method), code)
		m.requests.Add(ctx, 1, labels.requests)
		m.duration.Record(ctx, time.Since(start).Seconds(), labels.duration)
	}()
	serve(rec, r)
}

// statusClientClosedRequest is the code recorded for a request whose
// client went away before its answer (nginx's 499): no status reached it.
const statusClientClosedRequest = 499

// answeredCode is the code a request is counted under: the one written,
// except that a 5xx written once the client had gone (the request's
// context cancelled while it was served: a long-poll claim or a live
// stream the client closed, an upload it aborted) is 499. The server did
// nothing wrong, and counting it as 5xx would fire the error-rate alert
// on every agent that stops mid-poll (docs/operations.md).
func answeredCode(written int, ctxErr error) int {
	if written >= 500 && errors.Is(ctxErr, context.Canceled) {
		return statusClientClosedRequest
	}
	return written
}

// requestLabels are the attribute sets of one route, method and status
// code, built once: building them per request allocated more than the
// rest of the measurement.
type requestLabels struct {
	requests metric.AddOption
	duration metric.RecordOption
}

type requestLabelsKey struct {
	route, method string
	code          int
}

var requestLabelSets sync.Map // requestLabelsKey → requestLabels

// requestLabelsFor stays bounded: routes are the muxes' templates or the
// fixed names above, methods are methodLabel's, codes are what the
// handlers write.
func requestLabelsFor(route, method string, code int) requestLabels {
	key := requestLabelsKey{route, method, code}
	if l, ok := requestLabelSets.Load(key); ok {
		return l.(requestLabels)
	}
	l := requestLabels{
		requests: metric.WithAttributeSet(attribute.NewSet(attribute.String("route", route),
			attribute.String("method", method), attribute.String("code", strconv.Itoa(code)))),
		duration: metric.WithAttributeSet(attribute.NewSet(attribute.String("route", route), attribute.String("method", method))),
	}
	requestLabelSets.Store(key, l)
	return l
}

// withRouteLabel gives r a route label for recordRoute to refine.
func withRouteLabel(ctx context.Context, r *http.Request, route string) (*http.Request, *routeLabel) {
	label := &routeLabel{route: route}
	return r.WithContext(context.WithValue(ctx, routeLabelKey{}, label)), label
}

// methodLabel keeps the method label bounded: any method outside the
// standard ones is "other".
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// statusRecorder remembers the status code. It passes Flush (SSE) and
// Hijack (WebSocket) through, and Unwrap for http.ResponseController.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("rest: the response writer cannot be hijacked")
	}
	conn, rw, err := h.Hijack()
	if err == nil && s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
