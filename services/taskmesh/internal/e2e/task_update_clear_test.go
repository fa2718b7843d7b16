package e2e

import (
	"strings"
	"testing"
	"time"
)

// An update clears a list or map it gives empty: a task whose
// dependencies are cleared runs at once, without the arguments and the
// environment that were cleared with them. A mask naming anything else
// is refused and changes nothing.
func TestUpdateClearsTheListsItEmpties(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-clear", w.agentToken("agent-clear"), 2)
	blocker := w.submit(key, map[string]any{"name": "blocker", "type": "shell", "command": "sleep", "args": []string{"60"}})
	w.waitStatus(key, blocker, 30*time.Second, "running")
	dependent := w.submit(key, map[string]any{"name": "dependent", "type": "shell", "command": "printenv",
		"args": []string{"X"}, "env": map[string]string{"X": "set"}, "depends_on": []string{blocker}})

	// A mask naming a field that is no list or map is refused.
	code, resp, _ := w.call("PUT", "/api/v1/tasks/"+dependent+"?update_mask=priority", key, `{"depends_on": []}`)
	if msg, _ := resp["message"].(string); code != 400 || resp["code"] != float64(30005) || !strings.Contains(msg, "update_mask") {
		t.Fatalf("PUT with update_mask=priority = %d %v, want 400/30005 naming update_mask", code, resp)
	}
	if got := w.task(key, dependent); got["status"] != "pending" || len(got["depends_on"].([]any)) != 1 {
		t.Fatalf("task after the refused update = %v", got)
	}

	// An empty name or command is refused as on create and changes
	// nothing; an empty workdir clears it.
	for _, body := range []string{`{"name": ""}`, `{"command": "", "priority": 2}`} {
		code, resp, _ = w.call("PUT", "/api/v1/tasks/"+dependent, key, body)
		if code != 400 || resp["code"] != float64(30005) {
			t.Fatalf("PUT %s = %d %v, want 400/30005", body, code, resp)
		}
	}
	if got := w.task(key, dependent); got["name"] != "dependent" || got["command"] != "printenv" || got["priority"] == float64(2) {
		t.Fatalf("task after the refused updates = %v", got)
	}
	if code, resp, _ = w.call("PUT", "/api/v1/tasks/"+dependent, key, `{"workdir": "/tmp"}`); code != 200 || resp["workdir"] != "/tmp" {
		t.Fatalf("PUT workdir /tmp = %d %v", code, resp)
	}
	if code, resp, _ = w.call("PUT", "/api/v1/tasks/"+dependent, key, `{"workdir": ""}`); code != 200 || resp["workdir"] != "" {
		t.Fatalf("PUT an empty workdir = %d %v", code, resp)
	}

	// Left out or given, the lists stay; given empty, they are cleared.
	code, updated, _ := w.call("PUT", "/api/v1/tasks/"+dependent, key, `{"priority": 4}`)
	if code != 200 || len(updated["depends_on"].([]any)) != 1 || len(updated["args"].([]any)) != 1 {
		t.Fatalf("update of the priority = %d %v", code, updated)
	}
	code, updated, _ = w.call("PUT", "/api/v1/tasks/"+dependent, key, `{"depends_on": [], "args": [], "env": {}}`)
	if code != 200 || len(updated["depends_on"].([]any)) != 0 || len(updated["args"].([]any)) != 0 ||
		len(updated["env"].(map[string]any)) != 0 || updated["priority"] != float64(4) {
		t.Fatalf("update clearing depends_on, args and env = %d %v", code, updated)
	}
	// With nothing to wait for, it runs while the blocker still does:
	// printenv with no argument prints the environment, without X.
	done := w.waitStatus(key, dependent, 30*time.Second, "completed", "failed")
	if out, _ := done["stdout"].(string); done["status"] != "completed" || strings.Contains(out, "X=set") ||
		!strings.Contains(out, "TASKMESH_TASK_ID="+dependent) {
		t.Fatalf("the dependent after the update = %v", done)
	}
	if b := w.task(key, blocker); b["status"] != "running" {
		t.Fatalf("the blocker is %v; the dependent should have run before it ended", b["status"])
	}
	if code, _, _ := w.call("POST", "/api/v1/tasks/"+blocker+"/cancel", key, nil); code != 200 {
		t.Fatalf("cancel the blocker: %d", code)
	}
}
