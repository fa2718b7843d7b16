package ctl

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func TestIntegrationAgents(t *testing.T) {
	s := newStack(t)
	_, adminKey, _, err := s.gw.Credentials().BootstrapAdminKey(context.Background(), "ctl tests")
	if err != nil {
		t.Fatal(err)
	}
	admin := func(args ...string) result {
		t.Helper()
		return testApp(EnvServer, s.gw.GRPCAddr(), EnvAdminKey, adminKey).run(t, "", args...)
	}
	out := ok(t, admin("agents", "register", "gpu-7", "--allow", "127.0.0.0/8,10.1.2.3", "--expires", "48h")).stdout
	token := regexp.MustCompile(`tma_[a-z0-9]+_[A-Za-z0-9_-]+`).FindString(out)
	if token == "" || !strings.Contains(out, "shown only now") || !strings.Contains(out, "registered") {
		t.Fatalf("register output:\n%s", out)
	}
	fails(t, admin("agents", "register", "gpu-7"), "already exists")
	if r := admin("agents", "register", "gpu-8", "--allow", "nowhere"); r.code != ExitUsage {
		t.Errorf("a bad --allow: exit %d, %s", r.code, r.stderr)
	}

	// The agent heartbeats with its token: the list shows what it said.
	lease := leaseClient(t, s.gw.GRPCAddr(), token)
	if _, err := lease.SendHeartbeat(context.Background(), &taskv1.SendHeartbeatRequest{AgentId: "gpu-7", MachineId: "m-7",
		Labels: []string{"gpu:a100"}, FreeSlots: 3, Slots: 4, Version: "9.9.9", Isolation: "rlimit",
		Warnings: []string{"no cgroup hierarchy: rlimits only"}}); err != nil {
		t.Fatal(err)
	}
	out = ok(t, admin("agents", "list")).stdout
	if !regexp.MustCompile(`gpu-7\s+online\s+\S+\s+127\.0\.0\.1\s+gpu:a100\s+3/4 free\s+0\s+9\.9\.9`).MatchString(out) {
		t.Errorf("agents list:\n%s", out)
	}
	// A tenant's service pinned to it, pending until the agent reports
	// it running: the operator sees it on the agent, with its tenant.
	var created map[string]any
	if err := json.Unmarshal([]byte(ok(t, s.ctl(t, "services", "create", "--name", "gpu-monitor", "--command", "sleep",
		"--agent", "gpu-7", "-o", "json")).stdout), &created); err != nil {
		t.Fatal(err)
	}
	svcID, _ := created["service_id"].(string)
	out = ok(t, admin("agents", "get", "gpu-7")).stdout
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(svcID) + `\s+tenant-a\s+gpu-monitor\s+1\s+running\s+pending\s+-\s+0\s+-$`).MatchString(out) {
		t.Errorf("agents get before the agent reports its service:\n%s", out)
	}
	sync := managedv1.NewServiceAgentServiceClient(agentConn(t, s.gw.GRPCAddr(), token))
	if _, err := sync.SyncServices(context.Background(), &managedv1.SyncServicesRequest{AgentId: "gpu-7",
		Reports: []*managedv1.ServiceReport{{ServiceId: svcID, Version: "1", CurrentState: "running", Pid: 4321, Restarts: 1}}}); err != nil {
		t.Fatal(err)
	}
	out = ok(t, admin("agents", "get", "gpu-7")).stdout
	for _, want := range []string{"Isolation:", "rlimit", "Warning:", "rlimits only", "agent.registered", "Bound to:", "127.0.0.1", "Services:"} {
		if !strings.Contains(out, want) {
			t.Errorf("agents get misses %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(svcID) + `\s+tenant-a\s+gpu-monitor\s+1\s+running\s+running\s+4321\s+1\s+\d{4}-\d\d-\d\dT`).MatchString(out) {
		t.Errorf("agents get after the agent reports its service:\n%s", out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(ok(t, admin("agents", "get", "gpu-7", "-o", "json")).stdout), &got); err != nil {
		t.Fatal(err)
	}
	svcs, _ := got["services"].([]any)
	if len(svcs) != 1 {
		t.Fatalf("agents get -o json services = %v", got["services"])
	}
	if sv := svcs[0].(map[string]any); sv["service_id"] != svcID || sv["tenant_id"] != "tenant-a" || sv["pid"] != float64(4321) ||
		sv["current_state"] != "running" || sv["last_heartbeat"] == nil {
		t.Errorf("agents get -o json service = %v", sv)
	}
	out = ok(t, admin("agents", "drain", "gpu-7")).stdout
	if !strings.Contains(out, "drained") {
		t.Errorf("drain output:\n%s", out)
	}
	hb, err := lease.SendHeartbeat(context.Background(), &taskv1.SendHeartbeatRequest{AgentId: "gpu-7"})
	if err != nil || !hb.GetDrained() {
		t.Errorf("heartbeat after the drain = %v, %v; want drained", hb, err)
	}
	ok(t, admin("agents", "undrain", "gpu-7"))

	// Rotation into a file, as for an agent's --token-file.
	file := filepath.Join(t.TempDir(), "agent-token")
	out = ok(t, admin("agents", "rotate", "gpu-7", "--token-file", file)).stdout
	written, err := os.ReadFile(file)
	newToken := strings.TrimSpace(string(written))
	if err != nil || !strings.HasPrefix(newToken, "tma_") || newToken == token || strings.Contains(out, newToken) {
		t.Fatalf("rotate --token-file: %q, %v\n%s", newToken, err, out)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v", fi.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".agent-token.*")); len(left) != 0 {
		t.Errorf("temporary token files left: %v", left)
	}
	// A token file that cannot be written is a usage error before any
	// token is issued: the agent is not registered, its token not rotated.
	nowhere := filepath.Join(t.TempDir(), "no", "such", "dir", "tok")
	if r := admin("agents", "register", "gpu-8", "--token-file", nowhere); r.code != ExitUsage ||
		!strings.Contains(r.stderr, "--token-file "+nowhere+" cannot be written: no such file or directory") || strings.Contains(r.stderr, ".partial") {
		t.Errorf("register to an unwritable token file: exit %d, %s", r.code, r.stderr)
	}
	fails(t, admin("agents", "get", "gpu-8"), "not found")
	if r := admin("agents", "rotate", "gpu-7", "--token-file", nowhere); r.code != ExitUsage {
		t.Errorf("rotate to an unwritable token file: exit %d, %s", r.code, r.stderr)
	}
	if again, _ := os.ReadFile(file); strings.TrimSpace(string(again)) != newToken {
		t.Error("a refused rotation changed the token file")
	}
	ok(t, admin("agents", "revoke", "gpu-7", "--reason", "decommissioned"))
	var events map[string]any
	if err := json.Unmarshal([]byte(ok(t, admin("agents", "events", "gpu-7", "-o", "json")).stdout), &events); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range events["events"].([]any) {
		actions = append(actions, e.(map[string]any)["action"].(string))
	}
	if got := strings.Join(actions, " "); got != "agent.revoked agent.token_rotated agent.undrained agent.drained agent.registered" {
		t.Errorf("events = %s", got)
	}
	fails(t, admin("agents", "get", "nobody"), "not found")
	fails(t, testApp(EnvServer, s.gw.GRPCAddr(), EnvAdminKey, s.apiKey).run(t, "", "agents", "list"), "permission denied")
}

// leaseClient is an agent's lease API at the front door with token.
func leaseClient(t *testing.T, addr, token string) taskv1.LeaseServiceClient {
	t.Helper()
	return taskv1.NewLeaseServiceClient(agentConn(t, addr, token))
}

// agentConn is an agent's connection to the front door with token.
func agentConn(t *testing.T, addr, token string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer{key: token}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// An agent's managed services print as a section of agents get: every
// tenant's, a dash for no process or no report yet.
func TestWriteAgentShowsItsServices(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	g := &adminv1.Agent{AgentId: "gpu-7", Status: "online", TokenId: "tok-1", TokenPrefix: "abc", CreatedAt: at,
		Services: []*adminv1.AgentManagedService{
			{ServiceId: "svc-1", TenantId: "acme", Name: "dcgm-exporter", Version: "3.1", DesiredState: "running",
				CurrentState: "running", Pid: 4242, Restarts: 2, LastHeartbeat: at},
			{ServiceId: "svc-2", TenantId: "globex", Name: "hb", Version: "1", DesiredState: "running", CurrentState: "pending"},
		}}
	var b strings.Builder
	if err := writeAgent(&b, g, nil); err != nil {
		t.Fatal(err)
	}
	want := `
Services:
ID     TENANT  NAME           VERSION  DESIRED  CURRENT  PID   RESTARTS  LAST HEARTBEAT
svc-1  acme    dcgm-exporter  3.1      running  running  4242  2         2026-11-25T12:00:00Z
svc-2  globex  hb             1        running  pending  -     0         -
`
	if out := b.String(); !strings.HasSuffix(out, want) {
		t.Errorf("agents get printed:\n%s\nwant it to end with:%s", out, want)
	}
	b.Reset()
	g.Services = nil
	if err := writeAgent(&b, g, nil); err != nil || strings.Contains(b.String(), "Services:") {
		t.Errorf("an agent without services printed a services section:\n%s", b.String())
	}
}
