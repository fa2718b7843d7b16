package e2e

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// service reads a managed service through the API.
func (w *world) service(key, id string) map[string]any {
	w.t.Helper()
	code, body, _ := w.call("GET", "/api/v1/services/"+id, key, nil)
	if code != 200 {
		w.t.Fatalf("get service %s: %d %v", id, code, body)
	}
	return body
}

// waitService polls the service until cond holds.
func (w *world) waitService(key, id, what string, cond func(map[string]any) bool) map[string]any {
	w.t.Helper()
	var s map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for s = w.service(key, id); !cond(s); s = w.service(key, id) {
		if time.Now().After(deadline) {
			w.t.Fatalf("service %s: timed out waiting for %s: %v", id, what, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

func pidOf(s map[string]any) int {
	p, _ := s["pid"].(float64)
	return int(p)
}

func restartsOf(s map[string]any) int {
	r, _ := s["restarts"].(float64)
	return int(r)
}

// A managed service on a real agent: SIGKILLed it comes back with restarts
// incremented, a new version replaces its process, desired_state stopped
// stops it, and when its agent is lost it is unknown. It never shows up
// as a task, and another tenant cannot see it.
func TestManagedServiceOnARealAgent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, agentsLostFast)
	key, other := w.s.DemoAPIKey, w.tenantKey("other")
	kill := w.startAgent("agent-1", w.agentToken("agent-1"), 1)

	code, body, _ := w.call("POST", "/api/v1/services", key, map[string]any{"name": "gpu-monitor", "version": "1",
		"command": "sleep", "args": []string{"300"}, "restart_policy": "always", "desired_state": "running", "agent_id": "agent-1",
		"grace_period_sec": 2})
	if code != 200 || body["current_state"] != "pending" || body["created_by"] == "" {
		t.Fatalf("create = %d %v", code, body)
	}
	id := body["service_id"].(string)
	if code, body, _ := w.call("POST", "/api/v1/services", key, map[string]any{"name": "nowhere", "command": "sleep"}); code != 400 || body["code"] != float64(30005) {
		t.Fatalf("a service without a target = %d %v", code, body)
	}
	// Exactly one of agent_id and labels: both are refused, and nothing is declared.
	code, body, _ = w.call("POST", "/api/v1/services", key, map[string]any{"name": "both", "command": "sleep",
		"agent_id": "agent-1", "labels": []string{"gpu"}})
	if msg, _ := body["message"].(string); code != 400 || body["code"] != float64(30005) ||
		!strings.Contains(msg, "agent_id") || !strings.Contains(msg, "labels") {
		t.Fatalf("a service with agent_id and labels = %d %v", code, body)
	}
	if code, body, _ := w.call("GET", "/api/v1/services", key, nil); code != 200 || len(body["services"].([]any)) != 1 {
		t.Fatalf("services after the refused one = %d %v", code, body)
	}
	s := w.waitService(key, id, "running", func(s map[string]any) bool { return s["current_state"] == "running" && pidOf(s) > 0 })
	if s["last_heartbeat"] == nil || restartsOf(s) != 0 {
		t.Fatalf("running service = %v", s)
	}
	first := pidOf(s)
	if !alive(first) {
		t.Fatalf("pid %d is not a live process", first)
	}
	// The operator sees it on its agent, with its tenant and process.
	onAgent := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(id) + `\s+demo\s+gpu-monitor\s+1\s+running\s+running\s+` +
		strconv.Itoa(first) + `\s+0\s+\d{4}-\d\d-\d\dT`)
	if out := w.ctlAdmin("agents", "get", "agent-1"); !onAgent.MatchString(out) {
		t.Fatalf("ctl agents get agent-1 does not show the running service with pid %d:\n%s", first, out)
	}
	svcs, _ := w.agentJSON("agent-1")["services"].([]any)
	if len(svcs) != 1 || obj(svcs[0])["service_id"] != id || pidOf(obj(svcs[0])) != first || obj(svcs[0])["tenant_id"] != "demo" {
		t.Fatalf("ctl agents get agent-1 -o json services = %v", svcs)
	}

	// SIGKILL: restart policy always brings it back.
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s = w.waitService(key, id, "a restart", func(s map[string]any) bool {
		return s["current_state"] == "running" && pidOf(s) != first && restartsOf(s) == 1
	})
	second := pidOf(s)

	// A new version replaces the process.
	code, body, _ = w.call("PATCH", "/api/v1/services/"+id, key, map[string]any{"version": "2", "args": []string{"301"}})
	if code != 200 || body["version"] != "2" {
		t.Fatalf("update = %d %v", code, body)
	}
	s = w.waitService(key, id, "version 2", func(s map[string]any) bool {
		in, _ := s["instances"].([]any)
		return len(in) == 1 && obj(in[0])["version"] == "2" && s["current_state"] == "running" && pidOf(s) != second
	})
	if alive(second) {
		t.Fatalf("the old version's process %d still runs", second)
	}
	third := pidOf(s)

	// desired_state stopped stops it.
	if code, body, _ := w.call("PATCH", "/api/v1/services/"+id, key, map[string]any{"desired_state": "stopped"}); code != 200 || body["desired_state"] != "stopped" {
		t.Fatalf("stop = %d %v", code, body)
	}
	w.waitService(key, id, "stopped", func(s map[string]any) bool { return s["current_state"] == "stopped" })
	waitFor(t, 10*time.Second, "the stopped service's process to end", func() bool { return !alive(third) })

	// Never a task: the task list (positive control: a real task is in it)
	// does not show it.
	task := w.submit(key, map[string]any{"name": "probe", "type": "noop"})
	for _, tk := range w.waitListed(key, task) {
		if tk["name"] == "gpu-monitor" || tk["id"] == id {
			t.Fatalf("the service is listed as a task: %v", tk)
		}
	}
	// Another tenant neither sees nor changes it.
	if code, body, _ := w.call("GET", "/api/v1/services/"+id, other, nil); code != 404 || body["code"] != float64(30004) || body["message"] != "service not found" {
		t.Fatalf("another tenant's get = %d %v", code, body)
	}
	if code, _, _ := w.call("PATCH", "/api/v1/services/"+id, other, map[string]any{"desired_state": "running"}); code != 404 {
		t.Fatalf("another tenant's update = %d", code)
	}
	if _, list, _ := w.call("GET", "/api/v1/services", other, nil); len(list["services"].([]any)) != 0 {
		t.Fatalf("another tenant's list = %v", list)
	}

	// Running again, then its agent is lost: unknown.
	w.call("PATCH", "/api/v1/services/"+id, key, map[string]any{"desired_state": "running"})
	w.waitService(key, id, "running again", func(s map[string]any) bool { return s["current_state"] == "running" })
	kill()
	w.waitService(key, id, "unknown", func(s map[string]any) bool { return s["current_state"] == "unknown" })

	if code, _, _ := w.call("DELETE", "/api/v1/services/"+id, key, nil); code != 200 {
		t.Fatalf("delete = %d", code)
	}
	if code, _, _ := w.call("GET", "/api/v1/services/"+id, key, nil); code != 404 {
		t.Fatalf("get after delete = %d", code)
	}
	// The services row is rebuilt from the service's events alone.
	pool, err := pg.Open(context.Background(), pg.Config{URL: w.s.Postgres, Schema: scheduler.Schema})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rep, err := scheduler.RebuildInlineProjection(context.Background(), pool, false)
	if err != nil || rep.Services != 1 || len(rep.Differences) != 0 {
		t.Fatalf("rebuild = %+v, %v", rep, err)
	}
}
