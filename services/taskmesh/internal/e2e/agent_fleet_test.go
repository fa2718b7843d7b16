package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/taskmesh/internal/ctl"
)

// ctl runs `taskmesh ctl args…` with the operator key against the world,
// as an operator at a shell would, and returns its output.
func (w *world) ctlAdmin(args ...string) string {
	w.t.Helper()
	key, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		w.t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	all := append([]string{"--server", w.s.GRPCAddr, "--admin-key", strings.TrimSpace(string(key))}, args...)
	if code := ctl.Main(context.Background(), all, strings.NewReader(""), &out, &errOut); code != 0 {
		w.t.Fatalf("ctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	}
	return out.String()
}

// agentJSON is `ctl agents get ID -o json`.
func (w *world) agentJSON(id string) map[string]any {
	w.t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(w.ctlAdmin("agents", "get", id, "-o", "json")), &m); err != nil {
		w.t.Fatal(err)
	}
	return m
}

// fromAddress is an HTTP client whose connections leave from ip.
func fromAddress(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// The fleet acceptance: an agent registered with ctl runs from 127.0.0.2
// with its token file; a rotation written to that file keeps it running;
// a drain stops its claims until undrained; its token used from 127.0.0.3
// is refused, revoked, and the revocation is in its audit trail.
func TestRegisteredAgentRunsRotatesDrainsAndIsRevokedWhenItsTokenLeaks(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	tokenFile := filepath.Join(w.dir, "agent-token")
	out := w.ctlAdmin("agents", "register", "gpu-e2e", "--token-file", tokenFile)
	if !strings.Contains(out, "registered") {
		t.Fatalf("register:\n%s", out)
	}
	w.startAgentSpec(agentSpec{AgentID: "gpu-e2e", TokenFile: tokenFile, SourceAddr: "127.0.0.2", Slots: 2})
	// The world runs no agent of its own; the tasks name the agent's
	// machine all the same.
	run := func(name string) string {
		return w.submit(key, map[string]any{"name": name, "type": "shell", "command": "echo", "args": []string{name},
			"machine_id": "machine-gpu-e2e"})
	}
	first := run("first")
	w.waitStatus(key, first, 30*time.Second, "completed")
	a := w.agentJSON("gpu-e2e")
	if a["status"] != "online" || a["bound_ip"] != "127.0.0.2" || a["address"] != "127.0.0.2" || a["version"] == "" {
		t.Fatalf("agent after its first task = %v", a)
	}
	if list := w.ctlAdmin("agents", "list"); !regexp.MustCompile(`gpu-e2e\s+online\s+\S+\s+127\.0\.0\.2`).MatchString(list) {
		t.Errorf("agents list:\n%s", list)
	}

	// Rotation: the new secret goes into the agent's token file; the
	// agent carries on with it.
	before, _ := os.ReadFile(tokenFile)
	w.ctlAdmin("agents", "rotate", "gpu-e2e", "--token-file", tokenFile)
	after, _ := os.ReadFile(tokenFile)
	if bytes.Equal(before, after) {
		t.Fatal("rotate did not write a new token")
	}
	second := run("second")
	w.waitStatus(key, second, 30*time.Second, "completed")

	// Drain: a task for the agent stays pending while the agent keeps
	// heartbeating through whole claim cycles; undrained, it runs.
	w.ctlAdmin("agents", "drain", "gpu-e2e")
	third := run("third")
	submitted := time.Now().UTC()
	waitFor(t, 20*time.Second, "heartbeats past two claim waits after the submission", func() bool {
		last, _ := time.Parse(time.RFC3339Nano, w.agentJSON("gpu-e2e")["last_heartbeat_at"].(string))
		return last.After(submitted.Add(5 * time.Second))
	})
	if got := w.task(key, third); got["status"] != "pending" {
		t.Fatalf("a task for a drained agent is %v", got["status"])
	}
	if a := w.agentJSON("gpu-e2e"); a["status"] != "drained" || a["drained"] != true {
		t.Errorf("drained agent = %v", a)
	}
	w.ctlAdmin("agents", "undrain", "gpu-e2e")
	w.waitStatus(key, third, 30*time.Second, "completed")

	// The token leaks: used from 127.0.0.3 it is refused and revoked.
	body := `{"agent_id":"gpu-e2e","limit":1}`
	req, _ := http.NewRequest("POST", w.s.HTTPURL+"/api/v1/agent/tasks/claim", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(after)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := fromAddress("127.0.0.3").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the token from 127.0.0.3: %d, want 403", resp.StatusCode)
	}
	a = w.agentJSON("gpu-e2e")
	if a["status"] != "revoked" || !strings.Contains(a["revoked_reason"].(string), "127.0.0.3") {
		t.Errorf("agent after the leak = %v", a)
	}
	var events map[string]any
	if err := json.Unmarshal([]byte(w.ctlAdmin("agents", "events", "gpu-e2e", "-o", "json")), &events); err != nil {
		t.Fatal(err)
	}
	latest := events["events"].([]any)[0].(map[string]any)
	if latest["action"] != "agent.revoked" || latest["ip"] != "127.0.0.3" || latest["user_id"] != "gateway" {
		t.Errorf("latest audit entry = %v", latest)
	}
	// And the revoked agent can no longer claim: a task for it waits.
	fourth := run("fourth")
	waitFor(t, 20*time.Second, "the revoked agent to go quiet", func() bool {
		last, _ := time.Parse(time.RFC3339Nano, w.agentJSON("gpu-e2e")["last_heartbeat_at"].(string))
		return time.Since(last) > 2*time.Second
	})
	if got := w.task(key, fourth); got["status"] != "pending" {
		t.Errorf("a task for the revoked agent is %v", got["status"])
	}
}

// Agents that speak only the design's REST pull protocol (claims, no
// heartbeat) make their machines live by polling: a broadcast made while
// they poll gives each of them its task (docs/api/tasks.md, "Leases,
// attempts and heartbeats").
func TestPollingAgentsReceiveBroadcasts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	key := w.s.DemoAPIKey
	tokens := map[string]string{"poller-1": w.agentToken("poller-1"), "poller-2": w.agentToken("poller-2")}
	claim := func(agent, machine string) []any {
		code, resp, _ := w.call("POST", "/api/v1/agent/tasks/claim", tokens[agent],
			map[string]any{"agent_id": agent, "machine_id": machine, "limit": 5})
		if code != 200 {
			t.Fatalf("claim by %s: %d %v", agent, code, resp)
		}
		tasks, _ := resp["tasks"].([]any)
		return tasks
	}
	// Idle polls: nothing to run yet.
	for _, a := range [][2]string{{"poller-1", "m-poll-1"}, {"poller-2", "m-poll-2"}} {
		if got := claim(a[0], a[1]); len(got) != 0 {
			t.Fatalf("%s got %v before anything was submitted", a[0], got)
		}
	}
	id := w.submit(key, map[string]any{"name": "everywhere", "command": "true", "distribution": map[string]any{"mode": "broadcast"}})
	group := fmt.Sprint(w.task(key, id)["group_id"])
	var machines []string
	waitFor(t, 10*time.Second, "the broadcast's tasks to be listed", func() bool {
		code, body, _ := w.call("GET", "/api/v1/tasks?group_id="+group, key, nil)
		tasks, _ := body["tasks"].([]any)
		machines = machines[:0]
		for _, x := range tasks {
			machines = append(machines, fmt.Sprint(x.(map[string]any)["machine_id"]))
		}
		slices.Sort(machines)
		return code == 200 && len(machines) == 2
	})
	if !slices.Equal(machines, []string{"m-poll-1", "m-poll-2"}) {
		t.Fatalf("the broadcast went to %v, want both polling machines", machines)
	}
	for _, a := range [][2]string{{"poller-1", "m-poll-1"}, {"poller-2", "m-poll-2"}} {
		got := claim(a[0], a[1])
		if len(got) != 1 || got[0].(map[string]any)["machine_id"] != a[1] {
			t.Errorf("%s claimed %v, want its machine's task", a[0], got)
		}
	}
}
