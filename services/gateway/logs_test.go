package gateway_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/gateway"
)

// TestSecretsNeverLogged drives every path that logs — successes, each
// kind of refusal, a revocation for a foreign address, a rotation,
// internal errors — and then looks for every secret in the captured logs.
func TestSecretsNeverLogged(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	conn := e.dial(t)
	secrets := []string{e.userSecret, e.agentSec, internalToken}

	revoked, revokedSecret, err := e.creds.CreateAPIKey(ctx, "acme", "to-revoke", nil)
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, revokedSecret)
	if err := e.creds.RevokeAPIKey(ctx, "acme", revoked.ID, gateway.SystemActor); err != nil {
		t.Fatal(err)
	}
	roaming, roamingSecret, err := e.creds.CreateAgentToken(ctx, "agent-roam", "acme", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, rotatedSecret, err := e.creds.RotateAgentToken(ctx, roaming.ID)
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, roamingSecret, rotatedSecret)

	// The fleet admin API: a registration and a rotation show their
	// tokens once in the answer, never in the logs; the registered token
	// used from outside its CIDR is revoked.
	admin := e.adminSecret(t)
	secrets = append(secrets, admin)
	reg := decode(t, e.do(t, "POST", "/api/v1/admin/agents", admin, `{"agent_id":"gpu-logs","allowed_cidrs":["10.1.0.0/16"]}`))
	registered, _ := reg["token"].(string)
	rot := decode(t, e.do(t, "POST", "/api/v1/admin/agents/gpu-logs/rotate", admin, `{}`))
	adminRotated, _ := rot["token"].(string)
	if registered == "" || adminRotated == "" {
		t.Fatalf("register %v, rotate %v: no tokens", reg, rot)
	}
	secrets = append(secrets, registered, adminRotated)
	e.serve(t, "POST", "/api/v1/agent/heartbeat", registered, `{"agent_id":"gpu-logs"}`, "10.1.0.1:1")
	e.serve(t, "POST", "/api/v1/agent/heartbeat", adminRotated, `{"agent_id":"gpu-logs"}`, "10.1.0.1:1")
	if r := e.serve(t, "POST", "/api/v1/agent/heartbeat", adminRotated, `{"agent_id":"gpu-logs"}`, "192.0.2.9:1"); r.status != 403 {
		t.Errorf("the token from outside its CIDR: %d %s, want 403", r.status, r.body)
	}
	if a := decode(t, e.do(t, "GET", "/api/v1/admin/agents/gpu-logs", admin, "")); a["status"] != "revoked" {
		t.Errorf("agent after the foreign heartbeat = %v", a)
	}
	e.do(t, "GET", "/api/v1/admin/agents", admin+"x", "")

	e.fake.Fail("GetTask", status.Error(codes.Internal, "boom"))
	e.do(t, "GET", "/api/v1/tasks/t1", e.userSecret, "")
	e.do(t, "GET", "/api/v1/tasks", revokedSecret, "")
	e.do(t, "GET", "/api/v1/tasks", e.agentSec, "")
	e.do(t, "POST", "/api/v1/agent/tasks/claim", e.userSecret, claimBody)
	e.do(t, "POST", "/api/v1/agent/tasks/claim", roamingSecret, claimBody)
	e.serve(t, "POST", "/api/v1/agent/heartbeat", rotatedSecret, `{"agent_id":"agent-roam"}`, "192.0.2.1:1")
	e.serve(t, "POST", "/api/v1/agent/heartbeat", rotatedSecret, `{"agent_id":"agent-roam"}`, "192.0.2.2:1")
	// The secret in a malformed header, a wrong scheme, a grpc call.
	e.do(t, "GET", "/api/v1/tasks", "", "", "Authorization", "Token "+e.userSecret)
	e.do(t, "GET", "/api/v1/tasks", "", "", "Authorization", "Bearer "+e.userSecret+"x")
	for _, bearer := range []string{e.agentSec, e.userSecret, revokedSecret} {
		gctx, cancel := outgoing(bearer)
		taskv1.NewTaskServiceClient(conn).GetTask(gctx, &taskv1.GetTaskRequest{Id: "t"})
		cancel()
	}

	logs := e.logs.String()
	for _, want := range []string{"internal service error", "http request refused", "grpc call refused", "agent token revoked", "agent token rotated"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q; the test did not exercise every path:\n%s", want, logs)
		}
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("a secret (%d chars) appears in the logs", len(s))
		}
		if len(s) > 43 && strings.Contains(logs, s[len(s)-43:]) {
			t.Errorf("the random part of a secret appears in the logs")
		}
	}
}
