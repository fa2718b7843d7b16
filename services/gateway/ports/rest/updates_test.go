package rest

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// An update may carry the task as an answer shows it: what only the
// server sets is left out, what a TaskSpec has stays, and a key neither
// knows stays for the route to refuse.
func TestTaskUpdateLeavesOutWhatOnlyTheServerSets(t *testing.T) {
	in := `{"id": "01a2", "name": "n", "priority": 2, "status": "pending", "retry_count": 0, "exit_code": null,
		"created_at": "2026-01-01T00:00:00Z", "attempt_id": "", "version": 1, "preemption": null,
		"checkpoint": {"enabled": false, "key": "", "size_bytes": "0", "saved_at": null},
		"distribution": {"mode": "single", "machine_id": "m", "labels": [], "count": 0},
		"retryCount": 3, "prio": 1}`
	var got map[string]json.RawMessage
	if err := json.Unmarshal(withoutTaskReadOnly([]byte(in)), &got); err != nil {
		t.Fatal(err)
	}
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, []string{"checkpoint", "distribution", "id", "name", "prio", "priority"}) {
		t.Errorf("keys = %v", keys)
	}
	var cp, dist map[string]any
	_ = json.Unmarshal(got["checkpoint"], &cp)
	_ = json.Unmarshal(got["distribution"], &dist)
	if len(cp) != 1 || cp["enabled"] != false || len(dist) != 4 {
		t.Errorf("checkpoint = %v, distribution = %v", cp, dist)
	}
	for _, body := range []string{`{"name": "n", "priority": 2}`, `[1]`, `{"name": `, ``} {
		if out := withoutTaskReadOnly([]byte(body)); string(out) != body {
			t.Errorf("%q became %q", body, out)
		}
	}
}

// A task update's lists and maps given as [] or {}, and its clearable
// strings given as "", are named in update_mask, beside what the client
// put there; nothing else is.
func TestTaskUpdateNamesTheListsItEmpties(t *testing.T) {
	for _, tt := range []struct{ query, body, want string }{
		{"", `{"args": [], "env": {}, "dependsOn": [], "artifacts": [], "resources": {}, "distribution": {"labels": []}}`,
			"args,artifacts,depends_on,distribution.labels,env,resources"},
		{"", `{"depends_on": [], "args": ["a"], "env": {"A": "1"}, "priority": 2, "name": "x", "webhook": {}}`, "depends_on"},
		{"", `{"name": "", "command": "", "workdir": "", "webhook": "", "machine_id": "", "type": ""}`, "command,name,webhook,workdir"},
		{"", `{"workdir": "/tmp", "webhook": null}`, ""},
		{"update_mask=env", `{"artifacts": []}`, "artifacts,env"},
		{"update_mask=env", `{"priority": 2}`, "env"},
		{"update_mask=", `{"priority": 2}`, ""},
		{"update_mask=,env,&updateMask=", `{"priority": 2}`, "env"},
		{"", `{"args": null, "distribution": {"mode": "single"}}`, ""},
		{"", `[]`, ""},
		{"", `{"args": `, ""},
	} {
		r := httptest.NewRequest(http.MethodPut, "/api/v1/tasks/t1?"+tt.query, nil)
		u, ok := updateRouteOf(r)
		if !ok {
			t.Fatal("PUT /api/v1/tasks/t1 is no update route")
		}
		fillUpdateMask(r, u, []byte(tt.body))
		if q := r.URL.Query(); q.Get("update_mask") != tt.want || (tt.want == "" && (q.Has("update_mask") || q.Has("updateMask"))) {
			got := r.URL.RawQuery
			t.Errorf("%s with %s: query %q, want update_mask %q", tt.query, tt.body, got, tt.want)
		}
	}
}

// Every key the facade maps to a mask path is a field of TaskSpec, by
// the proto or JSON name protojson reads it under.
func TestClearableKeysAreTaskSpecFields(t *testing.T) {
	fields := (&taskv1.TaskSpec{}).ProtoReflect().Descriptor().Fields()
	for key, path := range clearableKeys {
		f := fields.ByName(protoreflect.Name(path))
		if f == nil || (key != path && f.JSONName() != key) || !(f.IsList() || f.IsMap()) {
			t.Errorf("%q → %q is no list or map of TaskSpec under that name", key, path)
		}
	}
}

// A template update names in update_mask every TaskTemplate field its body
// gives, by either name protojson reads and empty values included, and id,
// which the path gives; null is left out, as is a key of no field, and
// paths the client put in the query stay.
func TestTemplateUpdateNamesWhatTheBodyGives(t *testing.T) {
	for _, tt := range []struct{ query, body, want string }{
		{"", `{"description": "updated"}`, "description,id"},
		{"", `{}`, "id"},
		{"", `{"name": "", "args": [], "env": {}, "variables": [], "timeout": 0, "checkpoint": {"enabled": false}}`,
			"args,checkpoint,env,id,name,timeout,variables"},
		{"", `{"createdBy": "x", "created_at": "2026-01-01T00:00:00Z", "id": "t1"}`, "created_at,created_by,id"},
		{"", `{"workdir": null, "tags": ["a"], "nope": 1}`, "id,tags"},
		{"update_mask=category", `{"priority": 2}`, "category,id,priority"},
		{"update_mask=", `{"description": "x"}`, "description,id"},
		{"updateMask=,category", `{}`, "category,id"},
		{"", `[]`, ""},
		{"", `null`, ""},
		{"", `{"name": `, ""},
	} {
		r := httptest.NewRequest(http.MethodPut, "/api/v1/templates/t1?"+tt.query, nil)
		u, ok := updateRouteOf(r)
		if !ok {
			t.Fatal("PUT /api/v1/templates/t1 is no update route")
		}
		fillUpdateMask(r, u, []byte(tt.body))
		if q := r.URL.Query(); q.Get("update_mask") != tt.want || (tt.want == "" && (q.Has("update_mask") || q.Has("updateMask"))) {
			got := r.URL.RawQuery
			t.Errorf("%s with %s: query %q, want update_mask %q", tt.query, tt.body, got, tt.want)
		}
	}
}

// Only a PUT of one task or one template is an update route.
func TestUpdateRoutes(t *testing.T) {
	for _, tt := range []struct {
		method, path string
		want         bool
	}{
		{http.MethodPut, "/api/v1/tasks/t1", true},
		{http.MethodPut, "/api/v1/templates/t1", true},
		{http.MethodPost, "/api/v1/templates/t1/run", false},
		{http.MethodPut, "/api/v1/templates/", false},
		{http.MethodPut, "/api/v1/templates/t1/run", false},
		{http.MethodPost, "/api/v1/templates", false},
		{http.MethodPut, "/api/v1/tasks/", false},
		{http.MethodPut, "/api/v1/tasks/t1/result", false},
		{http.MethodPost, "/api/v1/tasks/t1", false},
		{http.MethodPut, "/api/v1/cohorts/c1", false},
	} {
		if _, got := updateRouteOf(httptest.NewRequest(tt.method, tt.path, nil)); got != tt.want {
			t.Errorf("%s %s: update route %v, want %v", tt.method, tt.path, got, tt.want)
		}
	}
}
