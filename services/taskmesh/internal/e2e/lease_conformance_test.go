package e2e

import (
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// The lease rules through REST
// (docs/api/tasks.md, "Leases, attempts and heartbeats"): renew and
// progress by an attempt whose lease expired are 410/30003 before and
// after the sweeper requeued the task and after another attempt took it;
// start and complete by an attempt that is not the current one, and every
// call by an attempt never issued, are 409/30001; a task leased but never
// started whose agent is lost is requeued without using a retry.
func TestLeaseConformanceThroughREST(t *testing.T) {
	t.Parallel()
	clk := &clocktest.Offset{}
	// The sweeper runs often; agents are lost after a minute of silence,
	// so only lease expiry acts in the first part.
	w := newWorldWith(t, stack.Options{Now: clk.Now, Timing: scheduler.Timing{AgentLostAfter: time.Minute,
		SweepInterval: 100 * time.Millisecond, PreemptAfter: time.Hour}})
	key := w.s.DemoAPIKey
	tok1, tok2 := w.agentToken("lc-1"), w.agentToken("lc-2")

	id := w.submit(key, map[string]any{"name": "lc", "type": "shell", "command": "true", "lease_ttl_sec": 5,
		"renew_interval_sec": 1, "max_retries": 3})
	att1 := w.claimREST(tok1, "lc-1", id)
	type call struct{ name, path string }
	calls := []call{{"start", "/start"}, {"renew", "/lease/renew"}, {"progress", "/progress"}, {"complete", "/complete"}}
	send := func(c call, tok, agent, attempt string) (int, map[string]any) {
		body := map[string]any{"agent_id": agent, "attempt_id": attempt}
		if c.name == "progress" {
			body["progress"] = 10
		}
		code, resp, _ := w.call("POST", "/api/v1/agent/tasks/"+id+c.path, tok, body)
		return code, resp
	}
	want := func(what string, c call, code int, resp map[string]any, status, biz int) {
		t.Helper()
		if code != status || resp["code"] != float64(biz) || resp["data"] != nil {
			t.Errorf("%s: %s = %d %v, want %d/%d", what, c.name, code, resp, status, biz)
		}
		// The design's example body, word for word.
		if biz == 30001 && resp["message"] != "attempt mismatch" {
			t.Errorf("%s: %s message = %q, want \"attempt mismatch\"", what, c.name, resp["message"])
		}
	}
	if code, resp := send(calls[0], tok1, "lc-1", att1); code != 200 {
		t.Fatalf("start: %d %v", code, resp)
	}
	for _, c := range calls {
		code, resp := send(c, tok1, "lc-1", "attempt-never-issued")
		want("an attempt never issued", c, code, resp, 409, 30001)
	}

	// The lease runs out and the sweeper requeues the task.
	clk.Advance(6 * time.Second)
	w.waitStatus(key, id, 10*time.Second, "pending")
	expired := map[string][2]int{"start": {409, 30001}, "renew": {410, 30003}, "progress": {410, 30003}, "complete": {409, 30001}}
	for _, c := range calls {
		code, resp := send(c, tok1, "lc-1", att1)
		want("after the sweeper requeued the task", c, code, resp, expired[c.name][0], expired[c.name][1])
	}

	// Another attempt holds it now: still 410 for the old attempt's
	// renewals and progress, and the new attempt is untouched.
	att2 := w.claimREST(tok2, "lc-2", id)
	for _, c := range calls {
		code, resp := send(c, tok1, "lc-1", att1)
		want("after another attempt took the task", c, code, resp, expired[c.name][0], expired[c.name][1])
	}
	if code, resp := send(calls[1], tok2, "lc-2", att2); code != 200 {
		t.Fatalf("renew by the current attempt: %d %v", code, resp)
	}
	if got := w.task(key, id); got["attempt_id"] != att2 || got["status"] != "assigned" || got["retry_count"] != float64(1) {
		t.Fatalf("task after the old attempt's calls = %v", got)
	}

	// lc-2 leased it but never started it; it heartbeats (an agent that
	// never does is judged by its leases alone), then falls silent and is
	// lost: the task goes back without using a retry.
	if code, resp, _ := w.call("POST", "/api/v1/agent/heartbeat", tok2,
		map[string]any{"agent_id": "lc-2", "attempt_ids": []string{att2}}); code != 200 {
		t.Fatalf("heartbeat of lc-2: %d %v", code, resp)
	}
	clk.Advance(2 * time.Minute)
	got := w.waitStatus(key, id, 10*time.Second, "pending")
	if got["retry_count"] != float64(1) {
		t.Errorf("retry_count after the lost agent's never-started lease = %v, want 1 (unchanged)", got["retry_count"])
	}
	code, resp := send(calls[1], tok2, "lc-2", att2)
	want("renew after the agent was lost", calls[1], code, resp, 410, 30003)
}

// A task claimed but never started whose lease runs out goes back to
// pending (assigned → pending) without using a retry, even with none to
// use, and is claimed again.
func TestLeaseExpiryOfATaskNeverStartedRequeuesIt(t *testing.T) {
	t.Parallel()
	clk := &clocktest.Offset{}
	w := newWorldWith(t, stack.Options{Now: clk.Now, Timing: scheduler.Timing{AgentLostAfter: time.Hour,
		SweepInterval: 100 * time.Millisecond, PreemptAfter: time.Hour}})
	key := w.s.DemoAPIKey
	tok := w.agentToken("ns-1")
	id := w.submit(key, map[string]any{"name": "never-started", "type": "shell", "command": "true",
		"lease_ttl_sec": 5, "max_retries": 0})
	first := w.claimREST(tok, "ns-1", id)
	clk.Advance(6 * time.Second)
	got := w.waitStatus(key, id, 10*time.Second, "pending")
	if got["retry_count"] != float64(0) || got["attempt_id"] != "" || got["assigned_agent_id"] != "" {
		t.Fatalf("after the lease ran out: %v, want pending with retry_count 0 and no attempt", got)
	}
	if again := w.claimREST(tok, "ns-1", id); again == first {
		t.Fatalf("claimed again under the expired attempt %s", first)
	}
}

// claimREST claims task id for agent through REST and returns the
// attempt id.
func (w *world) claimREST(tok, agent, id string) string {
	w.t.Helper()
	code, resp, _ := w.call("POST", "/api/v1/agent/tasks/claim", tok, map[string]any{"agent_id": agent, "limit": 1, "wait": "5s"})
	if code != 200 {
		w.t.Fatalf("claim by %s: %d %v", agent, code, resp)
	}
	tasks, _ := resp["tasks"].([]any)
	for _, raw := range tasks {
		if t, _ := raw.(map[string]any); t["id"] == id {
			return t["attempt_id"].(string)
		}
	}
	w.t.Fatalf("claim by %s did not return %s: %v", agent, id, resp)
	return ""
}

// The agent protocol of docs/api/tasks.md has no heartbeat call of its
// own: the lease renewal is the heartbeat, every renew_interval_sec. An
// agent that claims, starts, and renews and reports progress less often
// than Taskmesh's own agents heartbeat — here every 4 s, past the 3 s of
// silence after which an agent that heartbeats is lost — keeps its
// attempt and completes it.
func TestRenewingAgentWithoutHeartbeatsKeepsItsLease(t *testing.T) {
	t.Parallel()
	w := newWorld(t) // agents that heartbeat are lost after 3 s of silence
	key := w.s.DemoAPIKey
	tok := w.agentToken("renewer")
	id := w.submit(key, map[string]any{"name": "renewed", "type": "shell", "command": "true", "machine_id": "renewer-m",
		"lease_ttl_sec": 60, "renew_interval_sec": 4})
	code, resp, _ := w.call("POST", "/api/v1/agent/tasks/claim", tok,
		map[string]any{"agent_id": "renewer", "machine_id": "renewer-m", "limit": 1, "request_id": "req-renewer", "wait": "5s"})
	tasks, _ := resp["tasks"].([]any)
	if code != 200 || len(tasks) != 1 {
		t.Fatalf("claim: %d %v", code, resp)
	}
	attempt, _ := tasks[0].(map[string]any)["attempt_id"].(string)
	send := func(path string, body map[string]any) (int, map[string]any) {
		t.Helper()
		body["agent_id"], body["attempt_id"] = "renewer", attempt
		code, resp, _ := w.call("POST", "/api/v1/agent/tasks/"+id+path, tok, body)
		return code, resp
	}
	if code, resp := send("/start", map[string]any{}); code != 200 {
		t.Fatalf("start: %d %v", code, resp)
	}
	for round := 1; round <= 2; round++ {
		time.Sleep(4 * time.Second)
		if code, resp := send("/lease/renew", map[string]any{}); code != 200 {
			t.Fatalf("renew %d: %d %v", round, code, resp)
		}
		if code, resp := send("/progress", map[string]any{"progress": 50 * round}); code != 200 {
			t.Fatalf("progress %d: %d %v", round, code, resp)
		}
	}
	if got := w.task(key, id); got["status"] != "running" || got["attempt_id"] != attempt || got["retry_count"] != float64(0) {
		t.Fatalf("task after 8 s of renewals = %v", got)
	}
	if code, resp := send("/complete", map[string]any{"exit_code": 0}); code != 200 || resp["status"] != "completed" {
		t.Fatalf("complete: %d %v", code, resp)
	}
}
