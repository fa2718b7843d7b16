package ctl

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// ctl services against a real scheduler and gateway: create, list with
// the agent column, get, update, delete, and the refusals.
func TestIntegrationServices(t *testing.T) {
	s := newStack(t)
	out := ok(t, s.ctl(t, "services", "create", "--name", "gpu-monitor", "--command", "sleep", "--arg", "300",
		"--agent", "agent-7", "--env", "LEVEL=debug", "-o", "json")).stdout
	var created map[string]any
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("create printed %q: %v", out, err)
	}
	id, _ := created["service_id"].(string)
	if id == "" || created["restart_policy"] != "always" || created["current_state"] != "pending" {
		t.Fatalf("created %v", created)
	}
	list := lines(ok(t, s.ctl(t, "services", "list")).stdout)
	if len(list) != 2 || !strings.Contains(list[0], "AGENT") || !strings.Contains(list[1], "agent-7") ||
		!strings.Contains(list[1], "gpu-monitor") || !strings.Contains(list[1], "pending") {
		t.Fatalf("list = %q", list)
	}
	// No process yet: its pid is "-", as agents show theirs.
	if cols, head := strings.Fields(list[1]), strings.Fields(list[0]); slices.Index(head, "PID") < 0 || cols[slices.Index(head, "PID")] != "-" {
		t.Errorf("a service without a process shows pid %q", list[1])
	}
	// Mistakes in the command line are usage errors, and nothing is sent.
	for _, args := range [][]string{
		{"--agent", "agent-7", "--label", "gpu"},
		{"--agent", "agent-7", "--env", "NOEQUALS"},
	} {
		if r := s.ctl(t, append([]string{"services", "create", "--name", "y", "--command", "sleep"}, args...)...); r.code != ExitUsage {
			t.Errorf("create %v: exit %d, %s", args, r.code, r.stderr)
		}
	}
	if n := len(lines(ok(t, s.ctl(t, "services", "list")).stdout)); n != 2 {
		t.Errorf("%d lines listed after refused creates, want the header and one service", n)
	}
	if got := ok(t, s.ctl(t, "services", "update", id, "--desired-state", "stopped")).stdout; !strings.Contains(got, "stopped") {
		t.Fatalf("update printed %q", got)
	}
	// A new command line without a new version is refused.
	fails(t, s.ctl(t, "services", "update", id, "--arg", "400"), "(code 30005 invalid argument)")
	if got := ok(t, s.ctl(t, "services", "update", id, "--version", "2", "--arg", "400")).stdout; !strings.Contains(got, " 2 ") {
		t.Fatalf("roll printed %q", got)
	}
	if got := ok(t, s.ctl(t, "services", "get", id)).stdout; !strings.Contains(got, "gpu-monitor") {
		t.Fatalf("get printed %q", got)
	}
	fails(t, s.ctl(t, "services", "create", "--name", "x", "--command", "sleep"), "(code 30005 invalid argument)")
	if got := ok(t, s.ctl(t, "services", "delete", id)).stdout; got != id+" deleted\n" {
		t.Fatalf("delete printed %q", got)
	}
	fails(t, s.ctl(t, "services", "get", id), "(code 30004 not found)")
}
