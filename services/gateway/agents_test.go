package gateway_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// decode reads a JSON answer.
func decode(t *testing.T, r response) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("answer %d is not JSON: %s", r.status, r.body)
	}
	return m
}

// listed indexes a list answer's agents by id.
func listed(t *testing.T, m map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	agents, _ := m["agents"].([]any)
	for _, a := range agents {
		am := a.(map[string]any)
		out[am["agent_id"].(string)] = am
	}
	return out
}

// The agent fleet through REST: register (secret shown once), list with
// the scheduler's view, drain, rotate, revoke, the audit trail.
func TestRESTAdminAgents(t *testing.T) {
	e := newEnv(t)
	admin := e.adminSecret(t)
	// The scheduler knows gpu-1 from its heartbeats once it has run.
	seen := false
	e.fake.Handle("ListFleetAgents", func(ctx context.Context, req proto.Message) (proto.Message, error) {
		resp := &taskv1.ListFleetAgentsResponse{}
		for _, id := range req.(*taskv1.ListFleetAgentsRequest).GetAgentIds() {
			if id == "gpu-1" && seen {
				resp.Agents = append(resp.Agents, &taskv1.FleetAgent{AgentId: id, Seen: true, MachineId: "m-1", Ip: "10.0.0.7",
					Labels: []string{"gpu:a100"}, Slots: 8, FreeSlots: 6, Version: "1.4.0", Isolation: "cgroup-v1",
					LastHeartbeatAt: timestamppb.Now(), RunningTaskIds: []string{"t-1", "t-2"},
					Services: []*taskv1.FleetAgentService{{ServiceId: "svc-1", TenantId: "acme", Name: "dcgm-exporter",
						Version: "3.1", DesiredState: "running", CurrentState: "running", Pid: 4242, Restarts: 2,
						LastHeartbeat: timestamppb.New(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))}}})
			}
		}
		return resp, nil
	})
	r := e.do(t, "POST", "/api/v1/admin/agents", admin, `{"agent_id":"gpu-1","allowed_cidrs":["10.0.0.0/8"]}`)
	reg := decode(t, r)
	token, _ := reg["token"].(string)
	agent, _ := reg["agent"].(map[string]any)
	if r.status != 200 || !strings.HasPrefix(token, "tma_") || agent["status"] != "registered" || agent["token_prefix"] == "" {
		t.Fatalf("register = %d %s", r.status, r.body)
	}
	assertEnvelope(t, e.do(t, "POST", "/api/v1/admin/agents", admin, `{"agent_id":"gpu-1"}`), 409, 409, "")
	assertEnvelope(t, e.do(t, "POST", "/api/v1/admin/agents", admin, `{"agent_id":"bad id"}`), 400, 30005, "")
	assertEnvelope(t, e.do(t, "POST", "/api/v1/admin/agents", admin, `{"agent_id":"x","allowed_cidrs":["not-a-cidr"]}`), 400, 30005, "")

	seen = true
	r = e.do(t, "GET", "/api/v1/admin/agents", admin, "")
	a := listed(t, decode(t, r))["gpu-1"]
	if r.status != 200 || a == nil {
		t.Fatalf("list = %d %s", r.status, r.body)
	}
	if a["status"] != "online" || a["address"] != "10.0.0.7" || a["running_tasks"] != float64(2) || a["version"] != "1.4.0" ||
		a["slots"] != float64(8) || a["isolation"] != "cgroup-v1" || strings.Contains(string(r.body), token) {
		t.Errorf("listed agent = %v", a)
	}
	// The managed services on it, every tenant's, as the scheduler saw
	// them; in the list and in the agent alone.
	wantSvc := map[string]any{"service_id": "svc-1", "tenant_id": "acme", "name": "dcgm-exporter", "version": "3.1",
		"desired_state": "running", "current_state": "running", "pid": float64(4242), "restarts": float64(2),
		"last_heartbeat": "2026-11-25T12:00:00Z"}
	if svcs, _ := a["services"].([]any); len(svcs) != 1 || !reflect.DeepEqual(svcs[0], wantSvc) {
		t.Errorf("listed agent's services = %v, want [%v]", a["services"], wantSvc)
	}
	r = e.do(t, "GET", "/api/v1/admin/agents/gpu-1", admin, "")
	if svcs, _ := decode(t, r)["services"].([]any); r.status != 200 || len(svcs) != 1 || !reflect.DeepEqual(svcs[0], wantSvc) {
		t.Errorf("get agent = %d %s, want its services", r.status, r.body)
	}
	c, _ := e.fake.LastCall()
	if c.Principal.Kind != authn.KindAdmin {
		t.Errorf("the scheduler was asked as %+v, want the operator", c.Principal)
	}

	// Drain: the scheduler decides claims; the answer shows the drain.
	e.fake.Handle("SetAgentDrain", func(_ context.Context, req proto.Message) (proto.Message, error) {
		d := req.(*taskv1.SetAgentDrainRequest)
		return &taskv1.SetAgentDrainResponse{Agent: &taskv1.FleetAgent{AgentId: d.GetAgentId(), Seen: true, Drained: d.GetDrained(),
			DrainedAt: timestamppb.Now(), RunningTaskIds: []string{"t-1"}}}, nil
	})
	r = e.do(t, "POST", "/api/v1/admin/agents/gpu-1/drain", admin, `{}`)
	if m := decode(t, r); r.status != 200 || m["status"] != "draining" || m["drained"] != true {
		t.Errorf("drain = %d %s", r.status, r.body)
	}
	if c, _ := e.fake.LastCall(); c.Method != "SetAgentDrain" || !c.Request.(*taskv1.SetAgentDrainRequest).GetDrained() {
		t.Errorf("drain reached the scheduler as %+v", c)
	}
	assertEnvelope(t, e.do(t, "POST", "/api/v1/admin/agents/nobody/drain", admin, `{}`), 404, 404, "")
	if r := e.do(t, "POST", "/api/v1/admin/agents/gpu-1/undrain", admin, `{}`); r.status != 200 {
		t.Errorf("undrain = %d %s", r.status, r.body)
	}

	// Rotation: a new secret, the old one refused at once.
	if r := e.serve(t, "POST", "/api/v1/agent/heartbeat", token, `{"agent_id":"gpu-1"}`, "10.0.0.7:1"); r.status != 200 {
		t.Fatalf("heartbeat with the registered token = %d %s", r.status, r.body)
	}
	r = e.do(t, "POST", "/api/v1/admin/agents/gpu-1/rotate", admin, `{}`)
	rot := decode(t, r)
	newToken, _ := rot["token"].(string)
	if r.status != 200 || newToken == "" || newToken == token {
		t.Fatalf("rotate = %d %s", r.status, r.body)
	}
	assertEnvelope(t, e.serve(t, "POST", "/api/v1/agent/heartbeat", token, `{"agent_id":"gpu-1"}`, "10.0.0.7:1"), 401, 401, "")
	if r := e.serve(t, "POST", "/api/v1/agent/heartbeat", newToken, `{"agent_id":"gpu-1"}`, "10.0.0.7:1"); r.status != 200 {
		t.Errorf("heartbeat with the new token = %d %s", r.status, r.body)
	}

	// Revoke, then the trail shows everything, newest first.
	r = e.do(t, "POST", "/api/v1/admin/agents/gpu-1/revoke", admin, `{"reason":"machine retired"}`)
	if m := decode(t, r); r.status != 200 || m["status"] != "revoked" || m["revoked_reason"] != "machine retired" {
		t.Errorf("revoke = %d %s", r.status, r.body)
	}
	assertEnvelope(t, e.do(t, "POST", "/api/v1/admin/agents/gpu-1/rotate", admin, `{}`), 409, 409, "")
	r = e.do(t, "GET", "/api/v1/admin/agents/gpu-1/events", admin, "")
	evs, _ := decode(t, r)["events"].([]any)
	var actions []string
	for _, ev := range evs {
		m := ev.(map[string]any)
		actions = append(actions, m["action"].(string))
		if m["resource"] != "agent" || m["resource_id"] != "gpu-1" {
			t.Errorf("event = %v", m)
		}
	}
	want := "agent.revoked agent.token_rotated agent.undrained agent.drained agent.registered"
	if got := strings.Join(actions, " "); got != want {
		t.Errorf("trail = %s, want %s", got, want)
	}
	// Listing leaves revoked agents out unless asked.
	if m := listed(t, decode(t, e.do(t, "GET", "/api/v1/admin/agents", admin, ""))); m["gpu-1"] != nil || m["agent-001"] == nil {
		t.Errorf("list without revoked = %v", m)
	}
	if m := listed(t, decode(t, e.do(t, "GET", "/api/v1/admin/agents?include_revoked=true&page_size=1", admin, ""))); len(m) != 1 || m["agent-001"] == nil {
		t.Errorf("first page of one = %v", m)
	}
	if m := listed(t, decode(t, e.do(t, "GET", "/api/v1/admin/agents?include_revoked=true&page_token=agent-001", admin, ""))); len(m) != 1 || m["gpu-1"] == nil {
		t.Errorf("the page after agent-001 = %v", m)
	}
	// Tenants' keys and agents are refused.
	for _, bearer := range []string{e.userSecret, e.agentSec} {
		assertEnvelope(t, e.do(t, "GET", "/api/v1/admin/agents", bearer, ""), 403, 403, "")
	}
}

func TestGRPCAdminAgents(t *testing.T) {
	e := newEnv(t)
	client := adminv1.NewAgentServiceClient(e.dial(t))
	admin := e.adminSecret(t)
	ctx, cancel := outgoing(admin)
	defer cancel()
	reg, err := client.RegisterAgent(ctx, &adminv1.RegisterAgentRequest{AgentId: "gpu-9"})
	if err != nil || !strings.HasPrefix(reg.GetToken(), "tma_") {
		t.Fatalf("register = %v, %v", reg, err)
	}
	got, err := client.GetAgent(ctx, &adminv1.GetAgentRequest{AgentId: "gpu-9"})
	if err != nil || got.GetAgent().GetTokenId() != reg.GetAgent().GetTokenId() {
		t.Errorf("get = %v, %v", got, err)
	}
	if _, err := client.GetAgent(ctx, &adminv1.GetAgentRequest{AgentId: "nobody"}); status.Code(err) != codes.NotFound {
		t.Errorf("get unknown: %v", err)
	}
	// An unreachable scheduler fails the list rather than show a fleet
	// without heartbeats.
	e.fake.Fail("ListFleetAgents", status.Error(codes.Unavailable, "down"))
	if _, err := client.ListAgents(ctx, &adminv1.ListAgentsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("list with the scheduler down: %v", err)
	}
	uctx, ucancel := outgoing(e.userSecret)
	defer ucancel()
	if _, err := client.ListAgents(uctx, &adminv1.ListAgentsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a tenant's key: %v", err)
	}
	if _, err := client.ListAgentEvents(ctx, &adminv1.ListAgentEventsRequest{AgentId: "nobody"}); status.Code(err) != codes.NotFound {
		t.Errorf("events of an unknown agent: %v", err)
	}
	// The scheduler's fleet API is the gateway's own to call: the front
	// door forwards it to nobody, operators included.
	e.fake.Reset()
	fleet := taskv1.NewAgentFleetServiceClient(e.dial(t))
	for _, bearer := range []string{e.userSecret, e.agentSec, admin} {
		c, cancel := outgoing(bearer)
		_, err := fleet.SetAgentDrain(c, &taskv1.SetAgentDrainRequest{AgentId: "agent-001", Drained: true})
		cancel()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("AgentFleetService through the front door: %v, want PermissionDenied", err)
		}
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler got %v", calls)
	}
}

// The admin services the gateway runs itself refuse invalid input as the
// protos' own rules do: InvalidArgument naming the field, with the 30005
// ErrorInfo and the field as a BadRequest violation; REST answers the
// same message in its envelope.
func TestAdminInvalidArgumentsNameTheField(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	admin := e.adminSecret(t)
	ctx, cancel := outgoing(admin)
	defer cancel()
	past := timestamppb.New(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	dropped := func(service string) func() error {
		return func() error {
			_, err := deadletterv1.NewDeadLetterServiceClient(conn).DropDeadLetter(ctx, &deadletterv1.DropDeadLetterRequest{Service: service, Id: 1})
			return err
		}
	}
	tests := []struct {
		name, field string
		call        func() error
	}{
		{"a bad CIDR", "allowed_cidrs[1]", func() error {
			_, err := adminv1.NewAgentServiceClient(conn).RegisterAgent(ctx, &adminv1.RegisterAgentRequest{AgentId: "gpu-1", AllowedCidrs: []string{"10.0.0.0/8", "not-a-cidr"}})
			return err
		}},
		{"an expiry in the past", "expires_at", func() error {
			_, err := adminv1.NewAgentServiceClient(conn).RegisterAgent(ctx, &adminv1.RegisterAgentRequest{AgentId: "gpu-2", ExpiresAt: past})
			return err
		}},
		{"an API key expiring in the past", "expires_at", func() error {
			_, err := adminv1.NewAdminServiceClient(conn).CreateApiKey(ctx, &adminv1.CreateApiKeyRequest{TenantId: "acme", Name: "k", ExpiresAt: past})
			return err
		}},
		{"an unknown dead-letter service", "service", dropped("billing")},
		{"a bad dead-letter page size", "page_size", func() error {
			_, err := deadletterv1.NewDeadLetterServiceClient(conn).ListDeadLetters(ctx, &deadletterv1.ListDeadLettersRequest{PageSize: 5000})
			return err
		}},
	}
	for _, tt := range tests {
		st := status.Convert(tt.call())
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.field+": ") {
			t.Errorf("%s: %v, want InvalidArgument naming %s", tt.name, st.Err(), tt.field)
			continue
		}
		var code string
		var fields []string
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				code = d.GetMetadata()["code"]
			case *errdetails.BadRequest:
				for _, v := range d.GetFieldViolations() {
					fields = append(fields, v.GetField())
				}
			}
		}
		if code != "30005" || len(fields) != 1 || fields[0] != tt.field {
			t.Errorf("%s: code %q, violations %v, want 30005 and [%s]", tt.name, code, fields, tt.field)
		}
	}

	r := e.do(t, "POST", "/api/v1/admin/agents", admin, `{"agent_id":"x","allowed_cidrs":["not-a-cidr"]}`)
	assertEnvelope(t, r, 400, 30005, `register agent "x": invalid argument: allowed_cidrs[0]: "not-a-cidr" is neither a CIDR nor an IP address`)
	r = e.do(t, "DELETE", "/api/v1/admin/dead-letters/billing/1", admin, "")
	assertEnvelope(t, r, 400, 30005, `service: must be scheduler, quota or consumers, not "billing"`)
}
