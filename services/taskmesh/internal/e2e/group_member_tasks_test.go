package e2e

import (
	"testing"
	"time"
)

// A group's tasks are tasks (the design's TaskGroup.tasks is []Task): each
// member shows, beside its place in the group, the task fields — what it
// will run before its release, its task as the task API shows it after.
func TestGroupMembersShowTheirTasks(t *testing.T) {
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
			"exit_code", "created_at", "assigned_at", "machine_id", "group_id", "parent_id", "assigned_agent_id", "attempt_id"} {
			if mm[f] != task[f] {
				t.Errorf("%s: %s = %v, its task's %v", name, f, mm[f], task[f])
			}
		}
		if mm["exit_code"] != float64(0) || mm["assigned_agent_id"] != "agent-1" || mm["group_id"] != id || mm["created_at"] == nil {
			t.Errorf("%s after the run = %v", name, mm)
		}
	}
}
