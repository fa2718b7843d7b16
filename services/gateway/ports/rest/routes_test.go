package rest

import (
	"testing"

	"github.com/taskmesh/taskmesh/gen/openapi"
)

// The index reads from the served document which routes' bodies are one
// field of their request.
func TestRouteIndexKnowsTheBodyFields(t *testing.T) {
	doc, err := Document(openapi.JSON)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := newRouteIndex(doc)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ method, template, want string }{
		{"POST", "/api/v1/tasks", "spec"},
		{"PUT", "/api/v1/tasks/{id}", "spec"},
		{"POST", "/api/v1/templates", "template"},
		{"PUT", "/api/v1/cluster-queues/{name}", "spec"},
		{"POST", "/api/v1/agent/tasks/claim", ""}, // the whole request
		{"GET", "/api/v1/tasks/{id}", ""},         // no body
		{"POST", "/api/v1/no-such-route", ""},
	}
	for _, c := range cases {
		if got := ix.bodyField(c.method, c.template); got != c.want {
			t.Errorf("bodyField(%s %s) = %q, want %q", c.method, c.template, got, c.want)
		}
	}
	if _, err := newRouteIndex([]byte("not json")); err == nil {
		t.Error("a document that is not JSON was read")
	}
}

func TestBodyFieldPaths(t *testing.T) {
	cases := []struct{ msg, field, want string }{
		{"spec.priority: must be <= 10", "spec", "priority: must be <= 10"},
		{"validation error: spec.name: value is required", "spec", "validation error: name: value is required"},
		{"validation error:\n - spec.a: x\n - spec.b: y", "spec", "validation error:\n - a: x\n - b: y"},
		{"validation error: spec.a: x; spec.b: y", "spec", "validation error: a: x; b: y"},
		{"env: value spec.json is not allowed", "spec", "env: value spec.json is not allowed"},
		{"validation error: spec.name: x", "", "validation error: spec.name: x"},
		{"validation error: template.name: x", "template", "validation error: name: x"},
	}
	for _, c := range cases {
		if got := bodyFieldPaths(c.msg, c.field); got != c.want {
			t.Errorf("bodyFieldPaths(%q, %q) = %q, want %q", c.msg, c.field, got, c.want)
		}
	}
}
