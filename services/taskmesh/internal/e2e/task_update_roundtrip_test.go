package e2e

import (
	"testing"
)

// A client may update a task by sending back the task it read with the
// fields it changed: what only the server sets (status, retry_count, the
// timestamps, the checkpoint's state, …) is left out of the update, the
// rest is the spec. A misspelt key is still refused and changes nothing.
func TestUpdateTakesTheTaskAsItWasRead(t *testing.T) {
	t.Parallel()
	w := newWorld(t) // no agent: the task stays pending
	key := w.s.DemoAPIKey
	id := w.submit(key, map[string]any{"name": "round trip", "type": "shell", "command": "echo", "args": []string{"a"},
		"machine_id": "machine-001", "priority": 5, "timeout": 600})
	read := w.task(key, id)
	read["priority"], read["args"] = 2, []string{"b"}
	code, updated, _ := w.call("PUT", "/api/v1/tasks/"+id, key, read)
	if code != 200 || updated["id"] != id || updated["priority"] != float64(2) || updated["status"] != "pending" ||
		updated["timeout"] != float64(600) || updated["machine_id"] != "machine-001" {
		t.Fatalf("PUT of the task as read = %d %v", code, updated)
	}
	if args, _ := updated["args"].([]any); len(args) != 1 || args[0] != "b" {
		t.Fatalf("args after the update = %v", updated["args"])
	}
	// The server's own fields cannot be set this way: they are left out.
	if code, resp, _ := w.call("PUT", "/api/v1/tasks/"+id, key, map[string]any{"status": "completed", "retry_count": 3}); code != 200 ||
		resp["status"] != "pending" || resp["retry_count"] != float64(0) {
		t.Fatalf("PUT of status and retry_count = %d %v", code, resp)
	}
	read = w.task(key, id)
	read["priorty"] = 1
	if code, resp, _ := w.call("PUT", "/api/v1/tasks/"+id, key, read); code != 400 || resp["code"] != float64(30005) {
		t.Fatalf("PUT with a misspelt key = %d %v, want 400/30005", code, resp)
	}
	if got := w.task(key, id); got["priority"] != float64(2) {
		t.Fatalf("task after the refused update = %v", got)
	}
}
