package rest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
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
