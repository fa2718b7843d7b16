package rest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// The route label is the matched route's template with its variables as
// the documented {name}, never the raw path; a request no route matches
// keeps the prefix's label.
func TestRecordRouteNamesTheTemplate(t *testing.T) {
	mux := runtime.NewServeMux(runtime.WithMiddlewares(recordRoute))
	for _, route := range []string{"/api/v1/tasks/{task_id}/events", "/api/v1/tasks"} {
		if err := mux.HandlePath(http.MethodGet, route, func(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
			w.WriteHeader(http.StatusNoContent)
		}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		path, want string
		code       int
	}{
		{"/api/v1/tasks/0196f0c2-aaaa/events", "/api/v1/tasks/{task_id}/events", http.StatusNoContent},
		{"/api/v1/tasks", "/api/v1/tasks", http.StatusNoContent},
		{"/api/v1/nothing", routeAPI, http.StatusNotFound},
	}
	// Twice: the second round labels each request from the template its
	// route kept on the first.
	for round := 1; round <= 2; round++ {
		for _, tt := range tests {
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			req, label := withRouteLabel(req.Context(), req, routeAPI)
			rec := &statusRecorder{ResponseWriter: httptest.NewRecorder()}
			mux.ServeHTTP(rec, req)
			if label.route != tt.want || rec.status != tt.code {
				t.Errorf("round %d, %s: route %q status %d, want %q %d", round, tt.path, label.route, rec.status, tt.want, tt.code)
			}
		}
	}
}

// recordingCounter keeps the code label of every request counted.
type recordingCounter struct {
	noop.Int64Counter
	mu    sync.Mutex
	codes []string
}

func (c *recordingCounter) Add(_ context.Context, _ int64, opts ...metric.AddOption) {
	attrs := metric.NewAddConfig(opts).Attributes()
	code, _ := attrs.Value("code")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.codes = append(c.codes, code.AsString())
}

func (c *recordingCounter) recorded() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.codes)
}

// A request whose client goes away before the answer — a long-poll claim
// cancelled, an upload aborted — is counted as 499, not as the 5xx the
// handler writes once its call was cancelled with it; a 5xx written to a
// client still there stays a 5xx.
func TestARequestItsClientLeftIsCountedAs499(t *testing.T) {
	counter := &recordingCounter{}
	m := httpMetrics{requests: counter, duration: noop.Float64Histogram{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.measure(r.Context(), w, r, "/api/v1/agent/tasks/claim", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("poll") {
				<-r.Context().Done() // the long poll, until the client leaves
			}
			w.WriteHeader(http.StatusInternalServerError)
		})
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"?poll", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("the cancelled poll was answered")
	}
	resp, err := http.Post(srv.URL, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(counter.recorded()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	got := counter.recorded()
	slices.Sort(got)
	if want := []string{"499", "500"}; !slices.Equal(got, want) {
		t.Fatalf("codes counted = %v, want %v", got, want)
	}
}
