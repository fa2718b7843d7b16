package e2e

import (
	"strings"
	"testing"
)

// Env keys starting TASKMESH_ are set by the agent: every route that
// takes a task spec (a task, its update, a template and its update, a
// group's member, a repeat's template) refuses one with 30005 naming the
// key, and changes nothing.
func TestTaskSpecsRefuseTheAgentsEnvKeys(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	spoof := map[string]string{"TASKMESH_X": "mine", "TASKMESH_TASK_ID": "spoof"}
	refused := func(what string, code int, resp map[string]any) {
		t.Helper()
		// The first of the keys in name order is the one named.
		msg, _ := resp["message"].(string)
		if code != 400 || resp["code"] != float64(30005) || !strings.Contains(msg, `env: key "TASKMESH_TASK_ID" is not allowed`) {
			t.Errorf("%s = %d %v, want 400/30005 naming the key TASKMESH_TASK_ID", what, code, resp)
		}
	}
	code, resp, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "spoof", "command": "true", "env": spoof})
	refused("task", code, resp)
	code, resp, _ = w.call("POST", "/api/v1/task-groups", key, map[string]any{"name": "g", "mode": "serial",
		"tasks": []map[string]any{{"name": "m", "command": "true", "env": spoof}}})
	refused("group member", code, resp)
	code, resp, _ = w.call("POST", "/api/v1/task-groups", key, map[string]any{"repeat": map[string]any{"count": 2,
		"template": map[string]any{"name": "r", "command": "true", "env": spoof}}})
	refused("repeat template", code, resp)
	code, resp, _ = w.call("POST", "/api/v1/templates", key, map[string]any{"id": "spoof", "name": "spoof", "command": "true", "env": spoof})
	refused("template", code, resp)

	// Updates: refused, and the task and the template keep their env.
	id := w.submit(key, map[string]any{"name": "kept", "command": "true", "env": map[string]string{"X": "1"}})
	code, resp, _ = w.call("PUT", "/api/v1/tasks/"+id, key, map[string]any{"env": spoof})
	refused("task update", code, resp)
	if got := w.task(key, id); len(got["env"].(map[string]any)) != 1 || got["env"].(map[string]any)["X"] != "1" {
		t.Errorf("task after the refused update: env %v", got["env"])
	}
	if code, resp, _ = w.call("POST", "/api/v1/templates", key, map[string]any{"id": "kept", "name": "kept", "command": "true",
		"env": map[string]string{"X": "1"}}); code != 200 {
		t.Fatalf("template = %d %v", code, resp)
	}
	code, resp, _ = w.call("PUT", "/api/v1/templates/kept", key, map[string]any{"env": spoof})
	refused("template update", code, resp)
	if code, resp, _ = w.call("GET", "/api/v1/templates/kept", key, nil); code != 200 || len(resp["env"].(map[string]any)) != 1 {
		t.Errorf("template after the refused update = %d %v", code, resp)
	}

	w.waitListed(key, id)
	if tasks := w.list(key); len(tasks) != 1 {
		t.Errorf("%d tasks listed, want only the one accepted", len(tasks))
	}
	if code, resp, _ = w.call("GET", "/api/v1/task-groups", key, nil); code != 200 || len(resp["groups"].([]any)) != 0 {
		t.Errorf("groups = %d %v, want none", code, resp)
	}
	if code, resp, _ = w.call("GET", "/api/v1/templates", key, nil); code != 200 || len(resp["templates"].([]any)) != 1 {
		t.Errorf("templates = %d %v, want only the one accepted", code, resp)
	}
}
