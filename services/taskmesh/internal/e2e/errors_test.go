package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

func countEvents(t *testing.T, w *world) int {
	t.Helper()
	pool, err := pg.Open(context.Background(), pg.Config{URL: w.s.Postgres, Schema: scheduler.Schema})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Bad input gets 400 with code 30005 and changes nothing.
func TestBadInputIsRefusedAndStoresNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	bigEnv := map[string]string{}
	for i := 0; i < 100; i++ {
		bigEnv["VAR_"+strings.Repeat("X", i%5)+string(rune('A'+i%26))+string(rune('A'+i/26))] = strings.Repeat("v", 1000)
	}
	cases := map[string]any{
		"missing command":  map[string]any{"name": "x", "type": "shell"},
		"missing name":     map[string]any{"command": "true"},
		"priority 0":       map[string]any{"name": "x", "command": "true", "priority": 0},
		"priority 11":      map[string]any{"name": "x", "command": "true", "priority": 11},
		"unknown field":    map[string]any{"name": "x", "command": "true", "colour": "blue"},
		"oversized env":    map[string]any{"name": "x", "command": "true", "env": bigEnv},
		"bad env name":     map[string]any{"name": "x", "command": "true", "env": map[string]string{"1BAD": "x"}},
		"malformed JSON":   `{"name": "x", "command": "true"`,
		"data after JSON":  `{"name": "x", "command": "true"} xyz`,
		"two objects":      `{"name": "x", "command": "true"}{"name": "y", "command": "true"}`,
		"wrong type":       map[string]any{"name": "x", "command": "true", "timeout": "soon"},
		"number as string": map[string]any{"name": "x", "command": "true", "priority": "3"},
		"unknown type":     map[string]any{"name": "x", "command": "true", "type": "docker"},
		"bad distribution": map[string]any{"name": "x", "command": "true", "distribution": map[string]any{"mode": "everywhere"}},
		"unknown dep":      map[string]any{"name": "x", "command": "true", "depends_on": []string{"no-such-task"}},
	}
	for name, body := range cases {
		code, resp, _ := w.call("POST", "/api/v1/tasks", key, body)
		if code != 400 || resp["code"] != float64(30005) || resp["message"] == "" || resp["data"] != nil {
			t.Errorf("%s: %d %v", name, code, resp)
		}
	}
	if n := countEvents(t, w); n != 0 {
		t.Fatalf("%d events stored after refused requests", n)
	}
	_, list, _ := w.call("GET", "/api/v1/tasks", key, nil)
	if tasks, _ := list["tasks"].([]any); len(tasks) != 0 {
		t.Fatalf("tasks listed: %v", list)
	}
}

// Each business code (docs/api/tasks.md#business-codes) from a real request,
// with its HTTP status and the documented envelope.
//
// Not parallel: it stops the package's one Postgres server, which every
// other test's world uses; Go runs the parallel tests only after the
// sequential ones.
func TestEveryErrorCodeThroughREST(t *testing.T) {
	// No sweeps: an expired lease stays expired (30003) instead of being
	// taken back.
	w := newWorld(t, func(tm *scheduler.Timing) { tm.SweepInterval = time.Hour })
	key := w.s.DemoAPIKey
	tok := w.agentToken("agent-1")
	id := w.submit(key, map[string]any{"name": "x", "command": "true", "lease_ttl_sec": 5, "renew_interval_sec": 1})
	code, claim, hdr := w.call("POST", "/api/v1/agent/tasks/claim", tok, map[string]any{"agent_id": "agent-1", "machine_id": "m1", "limit": 1})
	tasks, _ := claim["tasks"].([]any)
	if code != 200 || len(tasks) != 1 || hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("claim = %d %v %v", code, claim, hdr)
	}
	att := tasks[0].(map[string]any)["attempt_id"]
	expect := func(what string, code int, body map[string]any, status int, business float64) {
		t.Helper()
		if code != status || body["code"] != business || body["data"] != nil {
			t.Errorf("%s: %d %v, want %d/%v", what, code, body, status, business)
		}
	}
	c, b, _ := w.call("POST", "/api/v1/agent/tasks/"+id+"/start", tok, map[string]any{"agent_id": "agent-1", "attempt_id": "attempt-of-someone-else"})
	expect("start with another attempt", c, b, 409, 30001)
	// Preempted outside Taskmesh is fenced like every outcome: reported for
	// an attempt that is not the current one it is 30001 and changes
	// nothing; a preempted_by past 128 characters is 30005.
	c, b, _ = w.call("POST", "/api/v1/agent/tasks/"+id+"/complete", tok, map[string]any{"agent_id": "agent-1",
		"attempt_id": "attempt-of-someone-else", "preempted_by": "slurm", "error": "slurm: job 7 PREEMPTED"})
	expect("preempted for another attempt", c, b, 409, 30001)
	c, b, _ = w.call("POST", "/api/v1/agent/tasks/"+id+"/complete", tok, map[string]any{"agent_id": "agent-1",
		"attempt_id": att, "preempted_by": strings.Repeat("s", 129)})
	expect("preempted_by too long", c, b, 400, 30005)
	if c, b, _ = w.call("GET", "/api/v1/tasks/"+id, key, nil); c != 200 || b["status"] != "assigned" || b["attempt_id"] != att {
		t.Fatalf("after refused preempted reports the task is %d %v, want assigned to %v", c, b, att)
	}
	c, b, _ = w.call("GET", "/api/v1/tasks/not-a-task", key, nil)
	expect("unknown task", c, b, 404, 30004)
	c, b, _ = w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "x"})
	expect("missing command", c, b, 400, 30005)
	time.Sleep(6 * time.Second)
	c, b, _ = w.call("POST", "/api/v1/agent/tasks/"+id+"/lease/renew", tok, map[string]any{"agent_id": "agent-1", "attempt_id": att})
	expect("renew an expired lease", c, b, 410, 30003)
	c, b, _ = w.call("POST", "/api/v1/agent/tasks/"+id+"/complete", tok, map[string]any{"agent_id": "agent-1", "attempt_id": att, "exit_code": 0})
	if c != 200 || b["status"] != "completed" {
		t.Fatalf("complete = %d %v", c, b)
	}
	c, b, _ = w.call("POST", "/api/v1/agent/tasks/"+id+"/complete", tok, map[string]any{"agent_id": "agent-1", "attempt_id": att, "exit_code": 0})
	if c != 200 || b["status"] != "completed" {
		t.Errorf("repeated complete (idempotent) = %d %v", c, b)
	}
	c, b, _ = w.call("POST", "/api/v1/agent/tasks/"+id+"/lease/renew", tok, map[string]any{"agent_id": "agent-1", "attempt_id": att})
	expect("renew a completed task", c, b, 409, 30002)
	c, b, _ = w.call("PUT", "/api/v1/tasks/"+id, key, map[string]any{"priority": 1})
	expect("update a completed task", c, b, 409, 30002)

	// 30099: the database goes away under a request.
	server := pgtest.Server(t)
	if err := server.Kill(); err != nil {
		t.Fatal(err)
	}
	c, b, _ = w.call("GET", "/api/v1/tasks/"+id, key, nil)
	if (c != 500 && c != 503) || b["code"] != float64(30099) {
		t.Errorf("database down: %d %v", c, b)
	}
	if err := server.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the service to recover", func() bool {
		c, _, _ := w.call("GET", "/api/v1/tasks/"+id, key, nil)
		return c == 200
	})
}

// Another tenant's task ids answer 404/30004 and its tasks never appear.
func TestTenantIsolationThroughREST(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, b := w.s.DemoAPIKey, w.tenantKey("tenant-b")
	id := w.submit(a, map[string]any{"name": "private", "command": "true"})
	for _, req := range []struct{ method, path string }{
		{"GET", "/api/v1/tasks/" + id}, {"GET", "/api/v1/tasks/" + id + "/result"}, {"PUT", "/api/v1/tasks/" + id},
		{"DELETE", "/api/v1/tasks/" + id}, {"POST", "/api/v1/tasks/" + id + "/cancel"}, {"POST", "/api/v1/tasks/" + id + "/retry"},
	} {
		var body any
		if req.method != "GET" && req.method != "DELETE" {
			body = map[string]any{}
		}
		if req.method == "PUT" {
			body = map[string]any{"name": "mine now"}
		}
		c, resp, _ := w.call(req.method, req.path, b, body)
		if c != 404 || resp["code"] != float64(30004) {
			t.Errorf("%s %s as another tenant: %d %v", req.method, req.path, c, resp)
		}
	}
	if got := w.task(a, id); got["status"] != "pending" || got["name"] != "private" || got["version"] != float64(1) {
		t.Fatalf("owner's task changed: %v", got)
	}
	// Once the owner's list shows the task, the same projected row would
	// show in tenant b's list if lists leaked.
	w.waitListed(a, id)
	if tasks := w.list(b); len(tasks) != 0 {
		t.Fatalf("tenant b lists %v", tasks)
	}
	// A user key cannot use the agent protocol, nor an agent token the task API.
	c, resp, _ := w.call("POST", "/api/v1/agent/tasks/claim", a, map[string]any{"agent_id": "x"})
	if c != 403 {
		t.Errorf("user key on claim: %d %v", c, resp)
	}
	c, resp, _ = w.call("GET", "/api/v1/tasks", w.agentToken("agent-z"), nil)
	if c != 403 {
		t.Errorf("agent token on the task API: %d %v", c, resp)
	}
	c, resp, _ = w.call("GET", "/api/v1/tasks", "tm_wrong_key", nil)
	if c != 401 {
		t.Errorf("wrong key: %d %v", c, resp)
	}
}
