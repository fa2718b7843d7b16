package e2e

import "testing"

// A task whose attempt ended without output has its result in the
// database like any small one: storage_type "db" with empty output, not
// the empty storage_type of a task that has no outcome yet.
func TestResultOfATaskWithoutOutput(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	tok := w.agentToken("quiet-1")

	id := w.submit(key, map[string]any{"name": "quiet", "command": "true"})
	code, res, _ := w.call("GET", "/api/v1/tasks/"+id+"/result", key, nil)
	if code != 200 || res["storage_type"] != "" || res["status"] != "pending" || res["exit_code"] != nil {
		t.Fatalf("result before any attempt = %d %v, want status pending and an empty storage_type", code, res)
	}

	att := w.claimREST(tok, "quiet-1", id)
	for _, step := range []struct {
		path string
		body map[string]any
	}{
		{"/start", map[string]any{"agent_id": "quiet-1", "attempt_id": att}},
		{"/complete", map[string]any{"agent_id": "quiet-1", "attempt_id": att, "exit_code": 0}},
	} {
		if code, resp, _ := w.call("POST", "/api/v1/agent/tasks/"+id+step.path, tok, step.body); code != 200 {
			t.Fatalf("%s: %d %v", step.path, code, resp)
		}
	}
	code, res, _ = w.call("GET", "/api/v1/tasks/"+id+"/result", key, nil)
	if code != 200 || res["storage_type"] != "db" || res["status"] != "completed" || res["exit_code"] != float64(0) ||
		res["stdout"] != "" || res["presigned_url"] != "" {
		t.Fatalf("result of a completed task without output = %d %v, want storage_type db", code, res)
	}
}
