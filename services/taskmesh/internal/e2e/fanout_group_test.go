package e2e

import (
	"testing"
	"time"
)

// A fan-out's group_id reads as a task group (docs/api/task-groups.md,
// "Fan-outs as groups"): GET /api/v1/task-groups/{group_id} shows its
// tasks as a parallel group whose status follows them; to another tenant
// it is 404, and the group routes that change a group do not take it.
func TestFanOutGroupIDReadsAsAGroup(t *testing.T) {
	w := newWorld(t)
	key := w.s.DemoAPIKey
	code, first, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"task": map[string]any{
		"name": "stability-test", "type": "shell", "command": "true",
		"targets": map[string]any{"machine_ids": []string{"machine-001", "machine-002"}, "ips": []string{}}}})
	groupID, _ := first["group_id"].(string)
	if code != 200 || groupID == "" {
		t.Fatalf("create = %d %v", code, first)
	}
	code, g, _ := w.call("GET", "/api/v1/task-groups/"+groupID, key, nil)
	members, _ := g["tasks"].([]any)
	if code != 200 || g["id"] != groupID || g["mode"] != "parallel" || g["status"] != "running" || len(members) != 2 {
		t.Fatalf("GET the fan-out's group = %d %v", code, g)
	}
	if m := members[0].(map[string]any); m["id"] != first["id"] || m["task_id"] != first["id"] || m["machine_id"] != "machine-001" {
		t.Fatalf("first member = %v, want the create's task", m)
	}
	if code, resp, _ := w.call("GET", "/api/v1/task-groups/"+groupID, w.tenantKey("other"), nil); code != 404 || resp["code"] != float64(30004) {
		t.Fatalf("another tenant's GET = %d %v", code, resp)
	}
	if code, resp, _ := w.call("POST", "/api/v1/task-groups/"+groupID+"/cancel", key, map[string]any{}); code != 404 {
		t.Fatalf("cancel of the fan-out's group = %d %v, want 404: its tasks are cancelled one by one", code, resp)
	}
	// A live stream follows it to its end.
	streamed := make(chan []sseFrame, 1)
	go func() { streamed <- w.follow(key, "/api/v1/task-groups/"+groupID+"/events", 30*time.Second) }()
	time.Sleep(300 * time.Millisecond)
	for _, raw := range members {
		id := raw.(map[string]any)["task_id"].(string)
		if code, resp, _ := w.call("POST", "/api/v1/tasks/"+id+"/cancel", key, map[string]any{}); code != 200 {
			t.Fatalf("cancel %s = %d %v", id, code, resp)
		}
	}
	w.waitGroup(key, groupID, 10*time.Second, "the fan-out's group to read cancelled", settledAs("cancelled"))
	frames := <-streamed
	if len(frames) < 2 {
		t.Fatalf("the live stream sent %d frames: %v", len(frames), frames)
	}
	if last := frames[len(frames)-1].data; last["final"] != true || last["status"] != "cancelled" {
		t.Fatalf("the live stream's last frame = %v", last)
	}
}
