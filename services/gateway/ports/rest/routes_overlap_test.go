package rest

import (
	"net/http"
	"sort"
	"strings"
	"testing"
)

// TestServicesRoutesDoNotOverlap keeps registerHotRoutes' order free of
// meaning. grpc-gateway's mux tries a method's routes in an order fixed by
// registration, and the first that matches serves the request. When no
// path can match routes of two services, the order of the services on the
// mux only changes how soon a route is found. The routes are those of the
// document the gateway serves, live stream routes included.
func TestServicesRoutesDoNotOverlap(t *testing.T) {
	handler := docsTestHandler(t)
	routes := openAPIRoutes(t, "/openapi.json", get(t, handler, http.MethodGet, "/openapi.json").Body.Bytes())
	var all []route
	for r := range routes {
		all = append(all, r)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].String() < all[j].String() })
	services := map[string]bool{}
	for i, a := range all {
		services[serviceOf(routes[a])] = true
		for _, b := range all[i+1:] {
			if a.method != b.method || serviceOf(routes[a]) == serviceOf(routes[b]) {
				continue
			}
			if templatesOverlap(a.path, b.path) {
				t.Errorf("%s (%s) and %s (%s) can match one request: the order of their services on the mux decides between them",
					a, routes[a], b, routes[b])
			}
		}
	}
	if len(services) < 10 {
		t.Fatalf("%d services in the served document, want the gateway's (more than 10): %v", len(services), services)
	}
}

func TestTemplatesOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"/api/v1/tasks/{task_id}", "/api/v1/tasks/{id}", true},
		{"/api/v1/tasks/{task_id}", "/api/v1/tasks/summary", true},
		{"/api/v1/tasks/{task_id}", "/api/v1/quotas/{id}", false},
		{"/api/v1/tasks/{task_id}", "/api/v1/tasks/{task_id}/attempts", false},
		{"/api/v1/tasks/{task_id}:cancel", "/api/v1/tasks/{task_id}", false},
		{"/api/v1/tasks/{task_id}:cancel", "/api/v1/tasks/{id}:cancel", true},
		{"/api/v1/tasks:batch", "/api/v1/{resource}:batch", true},
	} {
		if got := templatesOverlap(c.a, c.b); got != c.want {
			t.Errorf("templatesOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// serviceOf is the service of an OpenAPI operation id (TaskService_GetTask).
func serviceOf(operationID string) string {
	service, _, _ := strings.Cut(operationID, "_")
	return service
}

// templatesOverlap reports whether some path matches both templates: as
// many segments, and in each either the same literal or a variable on one
// side, with the same custom verb (":cancel") on the last.
func templatesOverlap(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	if len(as) != len(bs) {
		return false
	}
	for i := range as {
		sa, va := splitVerb(as[i])
		sb, vb := splitVerb(bs[i])
		if va != vb {
			return false
		}
		if sa != sb && !isVariable(sa) && !isVariable(sb) {
			return false
		}
	}
	return true
}

// splitVerb splits a segment into its path part and its custom verb; the
// ':' of a verb follows the segment, not a variable's inside.
func splitVerb(segment string) (string, string) {
	i := strings.LastIndex(segment, ":")
	if i < 0 || i < strings.LastIndex(segment, "}") {
		return segment, ""
	}
	return segment[:i], segment[i+1:]
}

func isVariable(segment string) bool {
	return strings.HasPrefix(segment, "{") && strings.HasSuffix(segment, "}")
}
