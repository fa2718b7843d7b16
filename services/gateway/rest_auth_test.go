package gateway_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/gateway"
)

func TestRESTAuthentication(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	revoked, revokedSecret, err := e.creds.CreateAPIKey(ctx, "acme", "revoked", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.creds.RevokeAPIKey(ctx, "acme", revoked.ID, gateway.SystemActor); err != nil {
		t.Fatal(err)
	}
	expiry := e.clock.Now().Add(time.Minute)
	_, expiringSecret, err := e.creds.CreateAPIKey(ctx, "acme", "expiring", &expiry)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)

	tests := []struct {
		name, method, path, body string
		headers                  []string
		wantStatus, wantCode     int
		wantMessage              string
	}{
		{name: "no authorization", method: "GET", path: "/api/v1/tasks", wantStatus: 401, wantCode: 401, wantMessage: "missing bearer token"},
		{name: "basic scheme", method: "GET", path: "/api/v1/tasks", headers: []string{"Authorization", "Basic dXNlcjpwYXNz"}, wantStatus: 401, wantCode: 401, wantMessage: "missing bearer token"},
		{name: "garbage bearer", method: "GET", path: "/api/v1/tasks", headers: []string{"Authorization", "Bearer hunter2"}, wantStatus: 401, wantCode: 401, wantMessage: "malformed bearer token"},
		{name: "unknown key", method: "GET", path: "/api/v1/tasks", headers: []string{"Authorization", "Bearer tm_aaaaaaaa_" + strings.Repeat("A", 43)}, wantStatus: 401, wantCode: 401, wantMessage: "invalid api key"},
		{name: "revoked key", method: "GET", path: "/api/v1/tasks", headers: []string{"Authorization", "Bearer " + revokedSecret}, wantStatus: 401, wantCode: 401, wantMessage: "api key revoked"},
		{name: "expired key", method: "GET", path: "/api/v1/tasks", headers: []string{"Authorization", "Bearer " + expiringSecret}, wantStatus: 401, wantCode: 401, wantMessage: "api key expired"},
		{name: "user key on agent route", method: "POST", path: "/api/v1/agent/tasks/claim", body: `{"agent_id":"agent-001"}`, headers: []string{"Authorization", "Bearer " + e.userSecret}, wantStatus: 403, wantCode: 403},
		{name: "agent token on user route", method: "GET", path: "/api/v1/tasks/task-001", headers: []string{"Authorization", "Bearer " + e.agentSec}, wantStatus: 403, wantCode: 403},
		{name: "agent token on task creation", method: "POST", path: "/api/v1/tasks", body: `{"name":"x"}`, headers: []string{"Authorization", "Bearer " + e.agentSec}, wantStatus: 403, wantCode: 403},
		// Authentication comes before routing and decoding: an anonymous
		// caller learns nothing about either.
		{name: "anonymous malformed body", method: "POST", path: "/api/v1/agent/tasks/claim", body: `{`, wantStatus: 401, wantCode: 401},
		{name: "anonymous unknown route", method: "GET", path: "/api/v1/secret-admin", wantStatus: 401, wantCode: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(t, tt.method, tt.path, "", tt.body, tt.headers...)
			assertEnvelope(t, r, tt.wantStatus, tt.wantCode, tt.wantMessage)
			if tt.wantStatus == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler got %d calls, want none", len(calls))
	}
	// The good credentials work on their own routes.
	if r := e.do(t, "GET", "/api/v1/tasks", e.userSecret, ""); r.status != 200 {
		t.Errorf("user key: status %d: %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/api/v1/agent/tasks/claim", e.agentSec, `{"agent_id":"agent-001"}`); r.status != 200 {
		t.Errorf("agent token: status %d: %s", r.status, r.body)
	}
}

// serve sends a request through HTTPHandler with a chosen client address.
func (e *env) serve(t *testing.T, method, path, bearer, body, remoteAddr string, headers ...string) response {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = remoteAddr
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	e.gw.HTTPHandler().ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Result().Header, body: rec.Body.Bytes()}
}

const claimBody = `{"agent_id":"agent-001","machine_id":"m-1","limit":1,"request_id":"req-uuid-1"}`

func TestRESTAgentTokenBoundToFirstAddress(t *testing.T) {
	e := newEnv(t)
	if r := e.serve(t, "POST", "/api/v1/agent/tasks/claim", e.agentSec, claimBody, "198.51.100.7:40000"); r.status != 200 {
		t.Fatalf("first use: %d %s", r.status, r.body)
	}
	if r := e.serve(t, "POST", "/api/v1/agent/tasks/claim", e.agentSec, claimBody, "198.51.100.7:40001"); r.status != 200 {
		t.Fatalf("same address, other port: %d %s", r.status, r.body)
	}
	calls := len(e.fake.Calls())
	r := e.serve(t, "POST", "/api/v1/agent/tasks/claim", e.agentSec, claimBody, "203.0.113.99:40000")
	assertEnvelope(t, r, 403, 403, "agent token used from an unexpected address; it has been revoked")
	// Revoked for the legitimate address too: the secret has leaked.
	r = e.serve(t, "POST", "/api/v1/agent/tasks/claim", e.agentSec, claimBody, "198.51.100.7:40000")
	assertEnvelope(t, r, 401, 401, "agent token revoked")
	// The refused claims never reached the scheduler; the revocation
	// drained the agent there (a claim it had in flight leases nothing).
	more := e.fake.Calls()[calls:]
	if len(more) != 1 || more[0].Method != "SetAgentDrain" || !more[0].Request.(*taskv1.SetAgentDrainRequest).GetDrained() ||
		more[0].Request.(*taskv1.SetAgentDrainRequest).GetAgentId() != "agent-001" || more[0].Principal.Kind != authn.KindAdmin {
		t.Errorf("the scheduler got %+v after the leak, want one drain of agent-001", more)
	}
	tok, err := e.creds.GetAgentToken(context.Background(), e.agentTok.ID)
	if err != nil || tok.RevokedAt == nil {
		t.Errorf("token after foreign use: %+v, %v; want revoked", tok, err)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "agent token revoked") || !strings.Contains(logs, e.agentTok.ID) {
		t.Errorf("no log line names the revoked token:\n%s", logs)
	}
}

func TestRESTAgentTokenAllowedCIDRs(t *testing.T) {
	e := newEnv(t)
	_, secret, err := e.creds.CreateAgentToken(context.Background(), "agent-nat", "", []string{"10.20.0.0/16"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Heartbeats move the token within its range (a NAT's or an elastic
	// address changing).
	for _, addr := range []string{"10.20.1.1:1", "10.20.200.3:2", "10.20.1.1:3"} {
		if r := e.serve(t, "POST", "/api/v1/agent/heartbeat", secret, `{"agent_id":"agent-nat"}`, addr); r.status != 200 {
			t.Errorf("heartbeat from %s: %d %s", addr, r.status, r.body)
		}
	}
	c, _ := e.fake.LastCall()
	if c.Principal.RemoteIP != "10.20.1.1" || c.Principal.AgentID != "agent-nat" || c.Principal.TenantID != "" {
		t.Errorf("principal = %+v", c.Principal)
	}
	// Another call from a new address in the range waits for the heartbeat:
	// refused, not revoked.
	r := e.serve(t, "POST", "/api/v1/agent/tasks/claim", secret, `{"agent_id":"agent-nat"}`, "10.20.9.9:1")
	assertEnvelope(t, r, 403, 403, "agent address changed: send a heartbeat from the new address first")
	if r := e.serve(t, "POST", "/api/v1/agent/tasks/claim", secret, `{"agent_id":"agent-nat"}`, "10.20.1.1:1"); r.status != 200 {
		t.Errorf("claim from the bound address: %d %s", r.status, r.body)
	}
	// Outside the range, even a heartbeat revokes the token.
	r = e.serve(t, "POST", "/api/v1/agent/heartbeat", secret, `{"agent_id":"agent-nat"}`, "10.21.0.1:1")
	assertEnvelope(t, r, 403, 403, "agent token used from an unexpected address; it has been revoked")
	r = e.serve(t, "POST", "/api/v1/agent/heartbeat", secret, `{"agent_id":"agent-nat"}`, "10.20.1.1:1")
	assertEnvelope(t, r, 401, 401, "agent token revoked")
}

func TestRESTTrustedProxies(t *testing.T) {
	e := newEnv(t, withTrustedProxies("10.0.0.0/8"))
	// Through the trusted proxy the client address comes from
	// X-Forwarded-For; the spoofed leftmost entry is ignored.
	r := e.serve(t, "GET", "/api/v1/tasks", e.userSecret, "", "10.0.0.5:1234", "X-Forwarded-For", "6.6.6.6, 192.0.2.44")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if c, _ := e.fake.LastCall(); c.Principal.RemoteIP != "192.0.2.44" {
		t.Errorf("remote ip via trusted proxy = %q, want 192.0.2.44", c.Principal.RemoteIP)
	}
	// From anywhere else the header is ignored.
	e.serve(t, "GET", "/api/v1/tasks", e.userSecret, "", "192.0.2.1:1234", "X-Forwarded-For", "6.6.6.6")
	if c, _ := e.fake.LastCall(); c.Principal.RemoteIP != "192.0.2.1" {
		t.Errorf("remote ip from an untrusted peer = %q, want 192.0.2.1", c.Principal.RemoteIP)
	}
	// Over the real listener (127.0.0.1, not trusted) likewise.
	e.do(t, "GET", "/api/v1/tasks", e.userSecret, "", "X-Forwarded-For", "6.6.6.6")
	if c, _ := e.fake.LastCall(); c.Principal.RemoteIP != "127.0.0.1" {
		t.Errorf("remote ip over TCP = %q, want 127.0.0.1", c.Principal.RemoteIP)
	}
}

func TestRESTAgentTokenRotation(t *testing.T) {
	e := newEnv(t)
	if r := e.do(t, "POST", "/api/v1/agent/tasks/claim", e.agentSec, claimBody); r.status != 200 {
		t.Fatalf("before rotation: %d %s", r.status, r.body)
	}
	_, newSecret, err := e.creds.RotateAgentToken(context.Background(), e.agentTok.ID)
	if err != nil {
		t.Fatal(err)
	}
	assertEnvelope(t, e.do(t, "POST", "/api/v1/agent/tasks/claim", e.agentSec, claimBody), 401, 401, "invalid agent token")
	if r := e.do(t, "POST", "/api/v1/agent/tasks/claim", newSecret, claimBody); r.status != 200 {
		t.Errorf("new secret: %d %s", r.status, r.body)
	}
	// Expired agent tokens are refused like revoked ones.
	expiry := e.clock.Now().Add(time.Hour)
	_, expSecret, err := e.creds.CreateAgentToken(context.Background(), "agent-exp", "acme", nil, &expiry)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Hour)
	assertEnvelope(t, e.do(t, "POST", "/api/v1/agent/heartbeat", expSecret, `{"agent_id":"agent-exp"}`), 401, 401, "agent token expired")
}

func TestRESTPrincipalForwarded(t *testing.T) {
	e := newEnv(t)
	// Headers a client might use to speak for someone else.
	spoof := []string{
		"X-Taskmesh-Tenant", "globex",
		"X-Taskmesh-Principal-Kind", "admin",
		"Grpc-Metadata-X-Taskmesh-Tenant", "globex",
		"Grpc-Metadata-X-Taskmesh-Internal-Token", "guess",
		"X-Taskmesh-Internal-Token", "guess",
		"X-Custom", "1",
		"Grpc-Metadata-Custom", "1",
	}
	tests := []struct {
		name, method, path, bearer, body string
		want                             authn.Principal
	}{
		{
			name: "user", method: "GET", path: "/api/v1/tasks/task-001", bearer: e.userSecret,
			want: authn.Principal{Kind: authn.KindUser, TenantID: "acme", Subject: e.userKey.ID, RemoteIP: "127.0.0.1", Tier: "premium"},
		},
		{
			name: "agent", method: "POST", path: "/api/v1/agent/tasks/claim", bearer: e.agentSec, body: claimBody,
			want: authn.Principal{Kind: authn.KindAgent, TenantID: "acme", Subject: "agent-001", AgentID: "agent-001", RemoteIP: "127.0.0.1", Tier: "premium"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := e.do(t, tt.method, tt.path, tt.bearer, tt.body, spoof...); r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			c, ok := e.fake.LastCall()
			if !ok {
				t.Fatal("no call reached the scheduler")
			}
			if c.Principal != tt.want {
				t.Errorf("principal = %+v, want %+v", c.Principal, tt.want)
			}
			assertScrubbed(t, c.MD, tt.bearer)
		})
	}
}

// allowedMetadata is everything the scheduler may receive: the principal,
// the internal token, request id and trace context, and what grpc-go itself
// adds.
var allowedMetadata = map[string]bool{
	authn.MDKind: true, authn.MDTenant: true, authn.MDSubject: true, authn.MDAgent: true,
	authn.MDRemoteIP: true, authn.MDTier: true, authn.MDInternalToken: true,
	"x-request-id": true, "traceparent": true, "tracestate": true,
	":authority": true, "content-type": true, "user-agent": true, "grpc-accept-encoding": true,
}

// assertScrubbed checks that md holds nothing but allowedMetadata, one
// value each, and that no value contains the caller's secret.
func assertScrubbed(t *testing.T, md map[string][]string, secret string) {
	t.Helper()
	for k, vs := range md {
		if !allowedMetadata[k] {
			t.Errorf("metadata %q = %q reached the scheduler", k, vs)
		}
		if len(vs) != 1 {
			t.Errorf("metadata %q has %d values %q, want 1", k, len(vs), vs)
		}
		for _, v := range vs {
			if secret != "" && strings.Contains(v, secret[len(secret)-43:]) {
				t.Errorf("metadata %q carries the caller's secret", k)
			}
		}
	}
	if got := md[authn.MDInternalToken]; len(got) != 1 || got[0] != internalToken {
		t.Errorf("internal token = %q", got)
	}
}
