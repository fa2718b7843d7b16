package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// A task file with its own id (docs/api/tasks.md, "The client's id"),
// sent as the create body:
// the id is the client's own, the creation's idempotency key while its
// task has not ended, so sending the same body again returns the same
// task, and runs the task file again once it has; a request_id that says
// otherwise is refused and creates nothing.
func TestCreateTakesTheClientsID(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	example := map[string]any{
		"id": "task-train-001", "name": "pytorch-train", "type": "python", "command": "python",
		"args": []string{"train.py", "--epochs=100"}, "workdir": "/workspace", "env": map[string]string{"CUDA_VISIBLE_DEVICES": "0"},
		"timeout": 86400, "priority": 3, "max_retries": 3, "retry_delay": 60,
		"machine_id": "machine-001", "group_id": "", "parent_id": "", "depends_on": []string{},
		"lease_ttl_sec": 300, "renew_interval_sec": 60, "heartbeat_interval_sec": 30, "grace_period_sec": 30,
	}
	code, first, _ := w.call("POST", "/api/v1/tasks", key, example)
	id, _ := first["id"].(string)
	if code != 200 || id == "" || id == "task-train-001" || first["name"] != "pytorch-train" || first["status"] != "pending" {
		t.Fatalf("create = %d %v", code, first)
	}
	if code, again, _ := w.call("POST", "/api/v1/tasks", key, example); code != 200 || again["id"] != id {
		t.Fatalf("the same body again = %d %v, want task %s", code, again, id)
	}
	if code, same, _ := w.call("POST", "/api/v1/tasks?request_id=task-train-001", key, example); code != 200 || same["id"] != id {
		t.Fatalf("with the same request_id = %d %v, want task %s", code, same, id)
	}
	code, refused, _ := w.call("POST", "/api/v1/tasks?request_id=another", key, example)
	if msg, _ := refused["message"].(string); code != 400 || refused["code"] != float64(30005) || !strings.Contains(msg, "request_id") {
		t.Fatalf("a different request_id = %d %v", code, refused)
	}
	// A name must be one path segment of the routes that take it.
	for _, bad := range []string{"a/b", ".", ".."} {
		code, refused, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"id": bad, "name": "x", "type": "shell", "command": "true"})
		if msg, _ := refused["message"].(string); code != 400 || refused["code"] != float64(30005) || !strings.Contains(msg, "id") {
			t.Fatalf("a body id %q = %d %v, want 400/30005 naming id", bad, code, refused)
		}
	}
	// The scheduler's own record, not the list (a projection that may
	// lag): one creation, one task, and nothing from the refusal.
	if n := countEvents(t, w); n != 1 {
		t.Fatalf("%d task events after the creations, want the one TaskSubmitted", n)
	}
	if tasks := w.waitListed(key, id); len(tasks) != 1 {
		t.Fatalf("tasks listed = %v", tasks)
	}

	// The name reaches the task on the task routes, and depends_on takes
	// it; to another tenant it names nothing.
	if code, got, _ := w.call("GET", "/api/v1/tasks/task-train-001", key, nil); code != 200 || got["id"] != id {
		t.Fatalf("GET by the client's id = %d %v, want task %s", code, got, id)
	}
	if code, got, _ := w.call("GET", "/api/v1/tasks/task-train-001/result", key, nil); code != 200 || got["task_id"] != id {
		t.Fatalf("the result by the client's id = %d %v", code, got)
	}
	after := w.submit(key, map[string]any{"name": "after", "type": "shell", "command": "true", "depends_on": []string{"task-train-001"}})
	if got := w.task(key, after); !slices.Equal(got["depends_on"].([]any), []any{id}) {
		t.Fatalf("depends_on the client's id = %v, want [%s]", got["depends_on"], id)
	}
	other := w.tenantKey("other")
	if code, got, _ := w.call("GET", "/api/v1/tasks/task-train-001", other, nil); code != 404 || got["code"] != float64(30004) {
		t.Fatalf("another tenant's GET by the name = %d %v", code, got)
	}
	if code, got, _ := w.call("POST", "/api/v1/tasks/task-train-001/cancel", other, map[string]any{}); code != 404 || got["code"] != float64(30004) {
		t.Fatalf("another tenant's cancel by the name = %d %v", code, got)
	}
	code, refused, _ = w.call("POST", "/api/v1/tasks", other, map[string]any{"name": "x", "type": "shell", "command": "true", "depends_on": []string{"task-train-001"}})
	if code != 400 || refused["code"] != float64(30005) {
		t.Fatalf("another tenant's depends_on the name = %d %v", code, refused)
	}
	if code, got, _ := w.call("POST", "/api/v1/tasks/task-train-001/cancel", key, map[string]any{}); code != 200 || got["id"] != id || got["status"] != "cancelled" {
		t.Fatalf("cancel by the client's id = %d %v", code, got)
	}
	// Once its task ended, the task file runs again: a new task, which
	// the name now names; the ended one stays as it was.
	code, rerun, _ := w.call("POST", "/api/v1/tasks", key, example)
	rerunID, _ := rerun["id"].(string)
	if code != 200 || rerunID == "" || rerunID == id || rerun["status"] != "pending" || rerun["priority"] != float64(3) {
		t.Fatalf("the task file again after its task was cancelled = %d %v, want a new pending task", code, rerun)
	}
	if code, got, _ := w.call("GET", "/api/v1/tasks/task-train-001", key, nil); code != 200 || got["id"] != rerunID {
		t.Fatalf("GET by the client's id after the rerun = %d %v, want task %s", code, got, rerunID)
	}
	if code, got, _ := w.call("GET", "/api/v1/tasks/"+id, key, nil); code != 200 || got["status"] != "cancelled" {
		t.Fatalf("the ended task after the rerun = %d %v", code, got)
	}
	if code, got, _ := w.call("POST", "/api/v1/tasks", key, example); code != 200 || got["id"] != rerunID {
		t.Fatalf("the task file again while its rerun waits = %d %v, want task %s", code, got, rerunID)
	}
	// The answer names the task by its id, not by the name it was given.
	if code, got, _ := w.call("DELETE", "/api/v1/tasks/task-train-001", key, nil); code != 200 || got["id"] != rerunID {
		t.Fatalf("DELETE by the client's id = %d %v", code, got)
	}
	if code, got, _ := w.call("GET", "/api/v1/tasks/"+rerunID, key, nil); code != 404 {
		t.Fatalf("GET after the DELETE by the client's id = %d %v", code, got)
	}
	// A deleted task has ended too.
	code, third, _ := w.call("POST", "/api/v1/tasks", key, example)
	if thirdID, _ := third["id"].(string); code != 200 || thirdID == "" || thirdID == id || thirdID == rerunID {
		t.Fatalf("the task file again after its task was deleted = %d %v, want a new task", code, third)
	}
	// A request_id is a retry key, not a name: what became of its task
	// does not matter, the create is never made again.
	if code, got, _ := w.call("POST", "/api/v1/tasks?request_id=retry-1", key, map[string]any{"name": "r", "type": "shell", "command": "true"}); code != 200 {
		t.Fatalf("create with a request_id = %d %v", code, got)
	} else {
		retried, _ := got["id"].(string)
		if code, got, _ := w.call("POST", "/api/v1/tasks/"+retried+"/cancel", key, map[string]any{}); code != 200 {
			t.Fatalf("cancel = %d %v", code, got)
		}
		if code, got, _ := w.call("POST", "/api/v1/tasks?request_id=retry-1", key, map[string]any{"name": "r", "type": "shell", "command": "true"}); code != 200 || got["id"] != retried || got["status"] != "cancelled" {
			t.Fatalf("the request_id again after its task was cancelled = %d %v, want task %s as it is", code, got, retried)
		}
	}
}

// parent_id names one of the tenant's tasks, which the task then waits for
// (docs/api/tasks.md, parent_id); an unknown parent is refused.
func TestParentIDIsADependency(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	parent := w.submit(key, map[string]any{"name": "parent", "type": "shell", "command": "true", "machine_id": "no-such-machine"})
	child := w.submit(key, map[string]any{"name": "child", "type": "shell", "command": "true", "parent_id": parent})
	got := w.task(key, child)
	if got["parent_id"] != parent || !slices.Equal(got["depends_on"].([]any), []any{parent}) || got["status"] != "pending" {
		t.Fatalf("child = parent_id %v, depends_on %v, status %v", got["parent_id"], got["depends_on"], got["status"])
	}
	code, refused, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "orphan", "type": "shell", "command": "true", "parent_id": "no-such-task"})
	if msg, _ := refused["message"].(string); code != 400 || refused["code"] != float64(30005) || !strings.Contains(msg, "parent_id") {
		t.Fatalf("an unknown parent = %d %v", code, refused)
	}
	// The parent ending badly cancels the child, as a dependency's does.
	if code, resp, _ := w.call("POST", "/api/v1/tasks/"+parent+"/cancel", key, map[string]any{}); code != 200 {
		t.Fatalf("cancel the parent: %d %v", code, resp)
	}
	w.waitStatus(key, child, 30*time.Second, "cancelled")
}
