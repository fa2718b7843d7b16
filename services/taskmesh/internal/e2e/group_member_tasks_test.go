package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A group's tasks are tasks (docs/api/task-groups.md, the group): each
// member shows, beside its place in the group, the task fields — what it
// will run before its release, its task as the task API shows it after.
func TestGroupMembersShowTheirTasks(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	id := w.createGroup(key, map[string]any{"mode": "dag", "start": false, "tasks": []map[string]any{
		{"id": "download", "name": "下载数据", "command": "echo downloaded", "priority": 3, "timeout": 600, "max_retries": 1},
		{"id": "merge", "name": "合并结果", "type": "python", "command": "python3", "args": []string{"-c", "print(1)"},
			"workdir": "", "env": map[string]string{"A": "1"}, "retry_delay": 5, "parent_id": "p-1", "depends_on": []string{"download"}},
	}})
	before := members(w.group(key, id))
	d, m := before["download"], before["merge"]
	if d["type"] != "shell" || d["command"] != "echo" || d["priority"] != float64(3) || d["timeout"] != float64(600) ||
		d["max_retries"] != float64(1) || d["retry_delay"] != float64(60) || d["group_id"] != id || d["task_id"] != "" ||
		d["exit_code"] != nil || d["created_at"] != nil || d["attempt_id"] != "" || d["retry_count"] != float64(0) {
		t.Fatalf("download before the start = %v", d)
	}
	// Null until there is an error, as a task's (decision 0104).
	if e, ok := d["error"]; !ok || e != nil {
		t.Fatalf("download's error before the start = %v (present %v), want null", e, ok)
	}
	if args, _ := d["args"].([]any); len(args) != 1 || args[0] != "downloaded" {
		t.Fatalf("download's args = %v", d["args"])
	}
	if env, _ := m["env"].(map[string]any); m["type"] != "python" || m["command"] != "python3" || env["A"] != "1" ||
		m["parent_id"] != "p-1" || m["retry_delay"] != float64(5) || m["priority"] != float64(5) {
		t.Fatalf("merge before the start = %v", m)
	}

	if code, resp, _ := w.call("POST", "/api/v1/task-groups/"+id+"/start", key, map[string]any{}); code != 200 {
		t.Fatalf("start: %d %v", code, resp)
	}
	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	g := w.waitGroup(key, id, 30*time.Second, "the group to complete", settledAs("completed"))
	for name, mm := range members(g) {
		taskID, _ := mm["task_id"].(string)
		task := w.task(key, taskID)
		for _, f := range []string{"type", "command", "timeout", "priority", "retry_count", "retry_delay", "max_retries",
			"exit_code", "error", "created_at", "assigned_at", "machine_id", "group_id", "parent_id", "assigned_agent_id", "attempt_id"} {
			if mm[f] != task[f] {
				t.Errorf("%s: %s = %v, its task's %v", name, f, mm[f], task[f])
			}
		}
		if mm["exit_code"] != float64(0) || mm["assigned_agent_id"] != "agent-1" || mm["group_id"] != id || mm["created_at"] == nil {
			t.Errorf("%s after the run = %v", name, mm)
		}
	}
}

// A member may be written as a whole task, as a task file has it
// (docs/api/task-groups.md): an empty group_id, repeat_count 1 and empty targets place nothing
// and are accepted; a value that would place the task otherwise is
// refused, naming the member's field, and nothing is stored.
func TestGroupMemberWrittenAsAWholeTask(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	whole := func(extra map[string]any) map[string]any {
		m := map[string]any{"id": "task-train-001", "name": "pytorch-train", "type": "python", "command": "python",
			"args": []string{"train.py", "--epochs=100"}, "workdir": "/workspace", "env": map[string]string{"CUDA_VISIBLE_DEVICES": "0"},
			"timeout": 86400, "priority": 3, "max_retries": 3, "retry_delay": 60, "machine_id": "machine-001",
			"group_id": "", "parent_id": "", "depends_on": []string{}, "repeat_count": 1,
			"targets":       map[string]any{"machine_ids": []string{}, "ips": []string{}},
			"lease_ttl_sec": 300, "renew_interval_sec": 60, "heartbeat_interval_sec": 30, "grace_period_sec": 30}
		for k, v := range extra {
			m[k] = v
		}
		return map[string]any{"mode": "serial", "start": false, "tasks": []map[string]any{m}}
	}
	code, g, _ := w.call("POST", "/api/v1/task-groups", key, whole(nil))
	if list, _ := g["tasks"].([]any); code != 200 || len(list) != 1 {
		t.Fatalf("a member written as a whole task = %d %v", code, g)
	}
	for field, v := range map[string]any{"group_id": "other", "repeat_count": 2,
		"targets": map[string]any{"machine_ids": []string{"machine-002"}}} {
		code, resp, _ := w.call("POST", "/api/v1/task-groups", key, whole(map[string]any{field: v}))
		if msg, _ := resp["message"].(string); code != 400 || resp["code"] != float64(30005) || !strings.Contains(msg, "tasks[0]."+field) {
			t.Errorf("a member with %s %v = %d %v, want 400/30005 naming tasks[0].%s", field, v, code, resp, field)
		}
	}
	code, list, _ := w.call("GET", "/api/v1/task-groups", key, nil)
	if groups, _ := list["groups"].([]any); code != 200 || len(groups) != 1 {
		t.Fatalf("groups after the refused creates = %d %v, want the first only", code, list)
	}
}

// A member's task stays in its group (docs/api/tasks.md, UpdateTask): a
// PUT naming another group_id is 30005 naming group_id and changes
// nothing, while the task sent back with its own group_id is an update
// like any other.
func TestGroupMemberTaskStaysInItsGroup(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	id := w.createGroup(key, map[string]any{"mode": "serial", "tasks": []map[string]any{
		{"id": "first", "name": "first", "command": "true"},
		{"id": "second", "name": "second", "command": "true"},
	}})
	g := w.waitGroup(key, id, 30*time.Second, "the first member released", func(g map[string]any) bool {
		taskID, _ := members(g)["first"]["task_id"].(string)
		return taskID != ""
	})
	taskID := members(g)["first"]["task_id"].(string)
	code, resp, _ := w.call("PUT", "/api/v1/tasks/"+taskID, key, map[string]any{"group_id": "elsewhere", "priority": 9})
	if code != 400 || resp["code"] != float64(30005) || !strings.Contains(fmt.Sprint(resp["message"]), "group_id") {
		t.Fatalf("moving a member out of its group: %d %v", code, resp)
	}
	if task := w.task(key, taskID); task["group_id"] != id || task["priority"] != float64(5) {
		t.Fatalf("after the refused move: group_id %v, priority %v", task["group_id"], task["priority"])
	}
	code, resp, _ = w.call("PUT", "/api/v1/tasks/"+taskID, key, map[string]any{"group_id": id, "priority": 9})
	if code != 200 {
		t.Fatalf("the member sent back with its own group: %d %v", code, resp)
	}
	if task := w.task(key, taskID); task["group_id"] != id || task["priority"] != float64(9) {
		t.Errorf("after the update: group_id %v, priority %v", task["group_id"], task["priority"])
	}
}

// A member created without an id is known by its task's id, fixed when the
// group is created (docs/api/task-groups.md, the members): the group
// shows it before the task exists, the task API finds the task by it once
// released, and the next member of a serial group depends on it.
func TestUnnamedGroupMembersAreKnownByTheirTaskIDs(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	id := w.createGroup(key, map[string]any{"mode": "serial", "start": false, "tasks": []map[string]any{
		{"name": "下载数据", "command": "echo download"}, {"name": "处理数据", "command": "echo process"}}})
	before, _ := w.group(key, id)["tasks"].([]any)
	if len(before) != 2 {
		t.Fatalf("members = %v", before)
	}
	first, second := before[0].(map[string]any), before[1].(map[string]any)
	firstID, _ := first["id"].(string)
	if len(firstID) != 36 || first["task_id"] != "" || fmt.Sprint(second["depends_on"]) != fmt.Sprint([]any{firstID}) {
		t.Fatalf("before the start: %v, %v; want UUID ids and the second depending on the first", first, second)
	}
	if code, resp, _ := w.call("POST", "/api/v1/task-groups/"+id+"/start", key, map[string]any{}); code != 200 {
		t.Fatalf("start: %d %v", code, resp)
	}
	w.startAgent("agent-1", w.agentToken("agent-1"), 1)
	g := w.waitGroup(key, id, 30*time.Second, "the group to complete", settledAs("completed"))
	for _, raw := range g["tasks"].([]any) {
		m := raw.(map[string]any)
		if m["id"] != m["task_id"] {
			t.Errorf("member %v: id and task_id differ", m)
		}
		if task := w.task(key, m["id"].(string)); task["group_id"] != id || task["name"] != m["name"] || task["status"] != "completed" {
			t.Errorf("GET /api/v1/tasks/%s = %v", m["id"], task)
		}
	}
	if got := g["tasks"].([]any)[0].(map[string]any)["id"]; got != firstID {
		t.Errorf("the first member's id changed from %s to %v", firstID, got)
	}
}

// A DAG member's id names its task on the task routes once it is
// released (docs/api/tasks.md, "The client's id"): the member of the
// tenant's newest group with that id, and for the tenant only.
func TestNamedGroupMembersNameTheirTasks(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)
	dag := func() (string, map[string]map[string]any) {
		id := w.createGroup(key, map[string]any{"mode": "dag", "tasks": []map[string]any{
			{"id": "fetch", "name": "下载数据", "command": "echo fetched"},
			{"id": "merge", "name": "合并结果", "command": "echo merged", "depends_on": []string{"fetch"}},
		}})
		return id, members(w.waitGroup(key, id, 30*time.Second, "the group to complete", settledAs("completed")))
	}
	_, first := dag()
	for _, name := range []string{"fetch", "merge"} {
		code, got, _ := w.call("GET", "/api/v1/tasks/"+name, key, nil)
		if code != 200 || got["id"] != first[name]["task_id"] || got["status"] != "completed" {
			t.Fatalf("GET /api/v1/tasks/%s = %d %v, want task %v", name, code, got, first[name]["task_id"])
		}
	}
	if code, got, _ := w.call("GET", "/api/v1/tasks/merge/result", key, nil); code != 200 || got["task_id"] != first["merge"]["task_id"] {
		t.Fatalf("the result by the member's id = %d %v", code, got)
	}
	_, second := dag()
	if code, got, _ := w.call("GET", "/api/v1/tasks/fetch", key, nil); code != 200 || got["id"] != second["fetch"]["task_id"] {
		t.Fatalf("after a second group, GET /api/v1/tasks/fetch = %d %v, want the newer group's task %v", code, got, second["fetch"]["task_id"])
	}
	if code, got, _ := w.call("GET", "/api/v1/tasks/fetch", w.tenantKey("other"), nil); code != 404 || got["code"] != float64(30004) {
		t.Fatalf("another tenant's GET by the member's id = %d %v", code, got)
	}
}
