package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A DAG member that failed is retried while its group runs (POST
// /api/v1/tasks/{id}/retry): the group follows it again, brings back the
// dependent its failure cancelled, and completes with every member
// completed. The dependent is not retried on its own while its dependency
// is failed, and a member of a group that has ended is not run again:
// both 409/30002, changing nothing.
func TestRetriedGroupMemberIsFollowedByItsGroup(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 3)
	dir := t.TempDir()
	aMayPass, xMayEnd := filepath.Join(dir, "a-may-pass"), filepath.Join(dir, "x-may-end")
	id := w.createGroup(key, map[string]any{"mode": "dag", "start": true, "tasks": []any{
		map[string]any{"id": "a", "name": "a", "command": "sh", "args": []string{"-c", `test -e "$1"`, "a", aMayPass}, "max_retries": 0},
		map[string]any{"id": "b", "name": "b", "command": "true", "depends_on": []string{"a"}},
		map[string]any{"id": "x", "name": "x", "command": "sh", "args": []string{"-c", `while [ ! -e "$1" ]; do sleep 0.05; done`, "x", xMayEnd}},
	}})
	g := w.waitGroup(key, id, 30*time.Second, "a to fail and b to be cancelled", func(g map[string]any) bool {
		m := members(g)
		return m["a"]["status"] == "failed" && m["b"]["status"] == "cancelled"
	})
	if g["status"] != "running" {
		t.Fatalf("the group with x still running is %v", g["status"])
	}
	m := members(g)
	a, b := m["a"]["task_id"].(string), m["b"]["task_id"].(string)

	code, body, _ := w.call("POST", "/api/v1/tasks/"+b+"/retry", key, map[string]any{})
	if code != 409 || body["code"] != float64(30002) || !strings.Contains(fmt.Sprint(body["message"]), "depends on member a") {
		t.Fatalf("retry of b while a is failed = %d %v", code, body)
	}
	if task := w.task(key, b); task["status"] != "cancelled" {
		t.Fatalf("the refused retry changed b: %v", task["status"])
	}

	if err := os.WriteFile(aMayPass, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, body, _ = w.call("POST", "/api/v1/tasks/"+a+"/retry", key, map[string]any{})
	if code != 200 || body["status"] != "pending" {
		t.Fatalf("retry of a = %d %v", code, body)
	}
	g = w.group(key, id)
	m = members(g)
	counts, _ := g["counts"].(map[string]any)
	// a may have run and completed already (it passes now); it is no
	// longer failed, and b is no longer cancelled.
	if s := m["a"]["status"]; s == "failed" || m["b"]["status"] == "cancelled" || counts["failed"] != float64(0) || counts["cancelled"] != float64(0) {
		t.Fatalf("after the retry the group shows a %v, b %v, counts %v", s, m["b"]["status"], counts)
	}
	w.waitGroup(key, id, 30*time.Second, "a and b to complete", func(g map[string]any) bool {
		m := members(g)
		return m["a"]["status"] == "completed" && m["b"]["status"] == "completed"
	})
	if err := os.WriteFile(xMayEnd, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	g = w.waitGroup(key, id, 30*time.Second, "the group to complete", settledAs("completed"))
	counts, _ = g["counts"].(map[string]any)
	if counts["completed"] != float64(3) || (g["error"] != nil && g["error"] != "") {
		t.Fatalf("completed group: counts %v, error %v", counts, g["error"])
	}
	for k, want := range map[string]string{"a": "completed", "b": "completed", "x": "completed"} {
		if got := w.task(key, members(g)[k]["task_id"].(string))["status"]; got != want || members(g)[k]["status"] != want {
			t.Errorf("%s: task %v, member %v, want %s", k, got, members(g)[k]["status"], want)
		}
	}

	// A member of a group that has ended, named by its member id as the
	// task routes allow.
	serial := w.createGroup(key, map[string]any{"mode": "serial", "start": true, "tasks": []any{
		map[string]any{"id": "s1", "name": "s1", "command": "false", "max_retries": 0},
		map[string]any{"id": "s2", "name": "s2", "command": "true"}}})
	ended := w.waitGroup(key, serial, 30*time.Second, "the serial group to fail", settledAs("failed"))
	code, body, _ = w.call("POST", "/api/v1/tasks/s1/retry", key, map[string]any{})
	if code != 409 || body["code"] != float64(30002) || !strings.Contains(fmt.Sprint(body["message"]), "group "+serial+" has ended (failed)") {
		t.Fatalf("retry of a member of an ended group = %d %v", code, body)
	}
	after := w.group(key, serial)
	if after["version"] != ended["version"] || members(after)["s1"]["status"] != "failed" ||
		w.task(key, members(after)["s1"]["task_id"].(string))["status"] != "failed" {
		t.Fatalf("the refused retry changed the group or its member: %v", after)
	}
}
