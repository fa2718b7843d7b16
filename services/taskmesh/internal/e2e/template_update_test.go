package e2e

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// A template update changes what its body gives and keeps the rest
// (docs/api/templates.md#updating-a-template): the description alone, a
// variables list replaced whole, an empty list clearing, the template as
// read sent back. A refused update (an empty name, another id, a relative
// workdir, a misspelt key, a mask path of no field) answers its code in
// the envelope and changes nothing; an unknown template is 404. An update
// of nothing is an update, recorded as one, as a task's is.
func TestTemplateUpdateChangesWhatTheBodyGives(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	pool := w.schedulerDB()
	updates := func() int {
		return count(t, pool, `SELECT count(*) FROM events WHERE event_type = 'TemplateUpdated' AND aggregate_id LIKE 'template/%/put-me'`)
	}
	code, created, _ := w.call("POST", "/api/v1/templates", key, map[string]any{"id": "put-me", "name": "train", "description": "first",
		"command": "python", "args": []string{"train.py", "--model", "{{model}}"}, "workdir": "/workspace",
		"env": map[string]string{"SEED": "1"}, "tags": []string{"ml"}, "category": "training", "timeout": 600, "priority": 3,
		"variables": []any{map[string]any{"name": "model", "type": "select", "options": []string{"a", "b"}, "default": "a"}}})
	if code != 200 {
		t.Fatalf("create: %d %v", code, created)
	}
	get := func() map[string]any {
		t.Helper()
		code, got, _ := w.call("GET", "/api/v1/templates/put-me", key, nil)
		if code != 200 {
			t.Fatalf("get: %d %v", code, got)
		}
		return got
	}
	// same reports the fields of a and b that differ but those named.
	same := func(what string, a, b map[string]any, except ...string) {
		t.Helper()
		for k := range a {
			if !slices.Contains(except, k) && !reflect.DeepEqual(a[k], b[k]) {
				t.Errorf("%s: %s is %v, was %v", what, k, b[k], a[k])
			}
		}
	}

	code, resp, _ := w.call("PUT", "/api/v1/templates/put-me", key, `{"description":"updated"}`)
	if code != 200 || resp["description"] != "updated" {
		t.Fatalf("PUT of the description: %d %v", code, resp)
	}
	after := get()
	if after["description"] != "updated" {
		t.Fatalf("description after the PUT: %v", after["description"])
	}
	same("after the PUT of the description", created, after, "description")
	if n := updates(); n != 1 {
		t.Fatalf("%d TemplateUpdated events, want 1", n)
	}

	// Refused, each in the route's envelope, and nothing changes.
	for _, tt := range []struct {
		name, path, body string
		status           int
		code             float64
		says             string
	}{
		{"an empty name", "/api/v1/templates/put-me", `{"name": ""}`, 400, 30005, "invalid name:"},
		{"another id", "/api/v1/templates/put-me", `{"id": "other", "description": "x"}`, 400, 30005, "invalid id:"},
		{"a relative workdir", "/api/v1/templates/put-me", `{"workdir": "relative/dir"}`, 400, 30005, "invalid workdir:"},
		{"a variable still used dropped", "/api/v1/templates/put-me", `{"variables": []}`, 400, 30005, "{{model}}"},
		{"a misspelt key", "/api/v1/templates/put-me", `{"descripton": "x"}`, 400, 30005, "descripton"},
		{"a mask path of no field", "/api/v1/templates/put-me?update_mask=nope", `{"description": "x"}`, 400, 30005, "invalid update_mask:"},
		{"an unknown template", "/api/v1/templates/no-such", `{"description": "x"}`, 404, 30004, "template not found"},
	} {
		code, resp, _ := w.call("PUT", tt.path, key, tt.body)
		if msg, _ := resp["message"].(string); code != tt.status || resp["code"] != tt.code || !strings.Contains(msg, tt.says) {
			t.Errorf("%s: %d %v, want %d/%v saying %q", tt.name, code, resp, tt.status, tt.code, tt.says)
		}
	}
	same("after the refused updates", after, get())
	if n := updates(); n != 1 {
		t.Fatalf("%d TemplateUpdated events after the refused updates, want 1", n)
	}

	// A variables list given replaces the template's whole; one given
	// empty clears; "" clears a string that may be empty.
	code, resp, _ = w.call("PUT", "/api/v1/templates/put-me", key, map[string]any{"args": []string{"train.py", "--lr", "{{lr}}"},
		"variables": []any{map[string]any{"name": "lr", "type": "string", "default": "0.1"}}, "tags": []string{}, "category": ""})
	if code != 200 {
		t.Fatalf("PUT of args, variables, tags and category: %d %v", code, resp)
	}
	got := get()
	vars, _ := got["variables"].([]any)
	if v, _ := vars[0].(map[string]any); len(vars) != 1 || v["name"] != "lr" || len(got["tags"].([]any)) != 0 || got["category"] != "" {
		t.Fatalf("after the PUT of args, variables, tags and category: %v", got)
	}
	same("after the PUT of args, variables, tags and category", after, got, "args", "variables", "tags", "category")

	// The template as read, changed and sent back, replaces it as before.
	read := get()
	read["name"], read["priority"] = "train v2", float64(7)
	if code, resp, _ = w.call("PUT", "/api/v1/templates/put-me", key, read); code != 200 || resp["name"] != "train v2" {
		t.Fatalf("PUT of the template as read: %d %v", code, resp)
	}
	same("after the PUT of the template as read", read, get())

	// An update of nothing answers the template as it is, and is recorded.
	before := get()
	if code, resp, _ = w.call("PUT", "/api/v1/templates/put-me", key, `{}`); code != 200 {
		t.Fatalf("PUT {}: %d %v", code, resp)
	}
	same("after PUT {}", before, get())
	if n := updates(); n != 4 {
		t.Fatalf("%d TemplateUpdated events, want 4", n)
	}
	// No body at all gives no field either.
	if code, resp, _ = w.call("PUT", "/api/v1/templates/put-me", key, nil); code != 200 {
		t.Fatalf("PUT with no body: %d %v", code, resp)
	}
	same("after the PUT with no body", before, get())
	// The mask named in the query by its JSON name is the same mask.
	if code, resp, _ = w.call("PUT", "/api/v1/templates/put-me?updateMask=description", key, `{}`); code != 200 || resp["description"] != "" {
		t.Fatalf("PUT ?updateMask=description: %d %v", code, resp)
	}
	same("after the PUT ?updateMask=description", before, get(), "description")
	// An empty mask in the query names nothing: the body says what changes.
	before = get()
	for _, q := range []string{"update_mask=", "updateMask=", "update_mask=,"} {
		if code, resp, _ = w.call("PUT", "/api/v1/templates/put-me?"+q, key, `{"description": "from `+q+`"}`); code != 200 || resp["description"] != "from "+q {
			t.Fatalf("PUT ?%s: %d %v", q, code, resp)
		}
		same("after the PUT ?"+q, before, get(), "description")
	}
}
