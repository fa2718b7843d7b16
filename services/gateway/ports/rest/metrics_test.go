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
	for _, tt := range tests {
		req, label := withRouteLabel(httptest.NewRequest(http.MethodGet, tt.path, nil), routeAPI)
		rec := &statusRecorder{ResponseWriter: httptest.NewRecorder()}
		mux.ServeHTTP(rec, req)
		if label.route != tt.want || rec.status != tt.code {
			t.Errorf("%s: route %q status %d, want %q %d", tt.path, label.route, rec.status, tt.want, tt.code)
		}
	}
}
