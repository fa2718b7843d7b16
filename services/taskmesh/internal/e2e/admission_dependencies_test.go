package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A task that depends on another in the same full queue must not take the
// quota its dependency needs. Here the standard queue (2 GPUs, borrowing
// up to 10 from its cohort) can hold one 6-GPU task at a time: a blocker
// runs, then a low-priority task and a high-priority task that depends
// on it wait. When the blocker ends, the dependency is admitted (the
// dependent is not yet in the queue, however high its priority), then the
// dependent. Admitted first, the dependent would have held 6 GPUs while
// waiting for a task that could never get them.
func TestDependentTaskDoesNotTakeTheQuotaOfItsDependency(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startAgent("agent-1", w.agentToken("agent-1"), 4)
	key := w.s.DemoAPIKey // tier standard
	gpus := map[string]string{"nvidia.com/gpu": "6"}

	blocker := w.submit(key, map[string]any{"name": "blocker", "type": "shell", "command": "sleep", "args": []string{"300"},
		"resources": gpus})
	w.waitStatus(key, blocker, 30*time.Second, "running")
	first := w.submit(key, map[string]any{"name": "first", "type": "shell", "command": "echo", "args": []string{"first"},
		"priority": 9, "resources": gpus})
	then := w.submit(key, map[string]any{"name": "then", "type": "shell", "command": "echo", "args": []string{"then"},
		"priority": 1, "resources": gpus, "depends_on": []string{first}})

	// While the blocker runs the dependency waits in the queue, and the
	// dependent is not even in it.
	waitFor(t, 30*time.Second, "the dependency to wait in the queue", func() bool {
		code, ex, _ := w.call("GET", "/api/v1/tasks/"+first+"/admission", key, nil)
		return code == 200 && ex["state"] == "pending"
	})
	if code, ex, _ := w.call("GET", "/api/v1/tasks/"+then+"/admission", key, nil); code != 404 ||
		!strings.Contains(fmt.Sprint(ex["message"]), "waits for its dependencies") {
		t.Fatalf("the dependent's admission while the blocker runs: %d %v", code, ex)
	}
	if held := w.task(key, then); held["held_for_dependencies"] != true || held["admitted"] != false {
		t.Fatalf("the dependent while the blocker runs: %v", held)
	}
	if code, body, _ := w.call("POST", "/api/v1/tasks/"+blocker+"/cancel", key, map[string]any{}); code != 200 {
		t.Fatalf("cancel the blocker: %d %v", code, body)
	}
	done := w.waitStatus(key, first, 30*time.Second, "completed")
	after := w.waitStatus(key, then, 30*time.Second, "completed")
	if done["stdout"] != "first\n" || after["stdout"] != "then\n" || after["held_for_dependencies"] != false {
		t.Fatalf("first = %v, then = %v", done, after)
	}
	if !timeAt(t, after, "started_at").After(timeAt(t, done, "ended_at")) {
		t.Errorf("the dependent started at %v, before its dependency ended at %v", after["started_at"], done["ended_at"])
	}
}

func timeAt(t *testing.T, task map[string]any, field string) time.Time {
	t.Helper()
	s, _ := task[field].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s = %v: %v", field, task[field], err)
	}
	return at
}
