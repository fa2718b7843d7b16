package e2e

import (
	"slices"
	"testing"
	"time"
)

// A fan-out's group_id reads as a task group (docs/api/task-groups.md,
// "Fan-outs as groups"): GET /api/v1/task-groups/{group_id} shows its
// tasks as a parallel group whose status follows them; to another tenant
// it is 404, and the group routes that change a group do not take it.
func TestFanOutGroupIDReadsAsAGroup(t *testing.T) {
	t.Parallel()
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

// A machine or an address named twice in targets gets one task, on
// POST /api/v1/tasks and on a template's run alike, in the order the
// targets first appear.
func TestTargetsNamedTwiceMakeOneTaskEach(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	placements := func(first map[string]any) []string {
		t.Helper()
		g := w.group(key, first["group_id"].(string))
		var out []string
		for _, raw := range g["tasks"].([]any) {
			m := raw.(map[string]any)
			out = append(out, m["machine_id"].(string))
		}
		if g["total"] != float64(len(out)) {
			t.Fatalf("group total %v, %d tasks", g["total"], len(out))
		}
		return out
	}
	code, first, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "twice", "type": "shell", "command": "true",
		"targets": map[string]any{"machine_ids": []string{"qa-x9", "qa-x8", "qa-x9"}, "ips": []string{"10.0.0.9", "10.0.0.9"}}})
	if code != 200 {
		t.Fatalf("create = %d %v", code, first)
	}
	if got := placements(first); !slices.Equal(got, []string{"qa-x9", "qa-x8", ""}) {
		t.Fatalf("tasks on %q, want one on qa-x9, one on qa-x8 and one for 10.0.0.9", got)
	}
	if code, body, _ := w.call("POST", "/api/v1/templates", key, map[string]any{"id": "hello", "name": "hello", "command": "echo",
		"args": []string{"{{msg}}"}, "variables": []any{map[string]any{"name": "msg", "type": "string", "required": true}}}); code != 200 {
		t.Fatalf("create template: %d %v", code, body)
	}
	code, first, _ = w.call("POST", "/api/v1/templates/hello/run", key, map[string]any{"variables": map[string]any{"msg": "hi"},
		"targets": map[string]any{"machine_ids": []string{"qa-t1", "qa-t2", "qa-t1"}}})
	if code != 200 {
		t.Fatalf("run = %d %v", code, first)
	}
	if got := placements(first); !slices.Equal(got, []string{"qa-t1", "qa-t2"}) {
		t.Fatalf("the run's tasks are on %q, want one on qa-t1 and one on qa-t2", got)
	}
	// One machine named twice is one task, as though named once.
	for _, route := range []struct {
		path    string
		body    map[string]any
		machine string
	}{
		{"/api/v1/tasks", map[string]any{"name": "once", "type": "shell", "command": "true",
			"targets": map[string]any{"machine_ids": []string{"qa-x7", "qa-x7"}}}, "qa-x7"},
		{"/api/v1/templates/hello/run", map[string]any{"variables": map[string]any{"msg": "hi"},
			"targets": map[string]any{"machine_ids": []string{"qa-t3", "qa-t3"}}}, "qa-t3"},
	} {
		code, task, _ := w.call("POST", route.path, key, route.body)
		if code != 200 || task["machine_id"] != route.machine {
			t.Fatalf("POST %s = %d %v", route.path, code, task)
		}
		if code, ids, _, _ := w.listIDs(key, "machine_id="+route.machine); code != 200 || !slices.Equal(ids, []string{task["id"].(string)}) {
			t.Fatalf("tasks on %s: %d %v, want only %v", route.machine, code, ids, task["id"])
		}
	}
}

// A broadcast is a fan-out whatever it matches, and so is a scatter of
// one: a single task made by either carries a new group_id, which reads as
// a group of that task.
func TestBroadcastToOneMachineIsAGroup(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key, token := w.s.DemoAPIKey, w.agentToken("poller-1")
	// An idle poll makes the machine live: the only one the broadcast finds.
	if code, resp, _ := w.call("POST", "/api/v1/agent/tasks/claim", token,
		map[string]any{"agent_id": "poller-1", "machine_id": "m-poll-1", "limit": 1}); code != 200 {
		t.Fatalf("claim = %d %v", code, resp)
	}
	for _, distribution := range []map[string]any{{"mode": "broadcast"}, {"mode": "scatter", "count": 1}} {
		code, first, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "one", "command": "true",
			"distribution": distribution})
		groupID, _ := first["group_id"].(string)
		if code != 200 || groupID == "" {
			t.Fatalf("%v: create = %d %v, want a task with a new group_id", distribution, code, first)
		}
		w.waitListed(key, first["id"].(string))
		code, g, _ := w.call("GET", "/api/v1/task-groups/"+groupID, key, nil)
		members, _ := g["tasks"].([]any)
		if code != 200 || g["mode"] != "parallel" || len(members) != 1 || members[0].(map[string]any)["task_id"] != first["id"] {
			t.Fatalf("%v: GET the fan-out's group = %d %v", distribution, code, g)
		}
	}
}
