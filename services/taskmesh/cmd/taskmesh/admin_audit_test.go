package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/consumers"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// proxied calls the stack's REST API as a request forwarded by a trusted
// proxy for client, and decodes the JSON answer.
func proxied(t *testing.T, s *stack.Stack, method, path, key, client string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, s.HTTPURL+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", client)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// auditEntries lists the audit log as key sees it (every page).
func auditEntries(t *testing.T, s *stack.Stack, key string, query url.Values) []map[string]any {
	t.Helper()
	var out []map[string]any
	for {
		code, body := call(t, s, "GET", "/api/v1/audit-logs?"+query.Encode(), key, nil)
		if code != 200 {
			t.Fatalf("audit-logs?%s = %d %v", query.Encode(), code, body)
		}
		list, _ := body["audit_logs"].([]any)
		for _, e := range list {
			out = append(out, e.(map[string]any))
		}
		next, _ := body["next_page_token"].(string)
		if next == "" {
			return out
		}
		query.Set("page_token", next)
	}
}

// Every admin change made through the admin API — tenants, API keys,
// agents — reaches the audit log through the admin topic with the
// operator's key id and the client's address behind a trusted proxy;
// refused requests leave no entry; a tenant key sees its own tenant's
// admin entries and no other's, the operator all; no secret is anywhere
// in the audit table; and `taskmesh replay` finds the entries equal to
// their rebuild from the topic.
func TestAdminChangesInTheAuditLog(t *testing.T) {
	dir, err := os.MkdirTemp("", "tmadmin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	s, err := stack.Start(ctx, stack.Options{DataDir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DatabaseURL: pgtest.New(t).URL,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	raw, err := os.ReadFile(s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	op := strings.TrimSpace(string(raw))
	const client = "203.0.113.77"
	do := func(method, path string, body any, want int) map[string]any {
		t.Helper()
		code, out := proxied(t, s, method, path, op, client, body)
		if code != want {
			t.Fatalf("%s %s = %d %v, want %d", method, path, code, out, want)
		}
		return out
	}

	// Refused: a bad tenant id, a bad tier, a key for no tenant, a bad
	// CIDR, an unknown agent.
	do("POST", "/api/v1/admin/tenants", map[string]any{"tenant_id": "Bad Id", "name": "x", "tier": "standard"}, 400)
	do("POST", "/api/v1/admin/tenants", map[string]any{"tenant_id": "acme", "name": "Acme", "tier": "gold"}, 400)
	do("POST", "/api/v1/admin/tenants/nobody/api-keys", map[string]any{"name": "x"}, 404)
	do("POST", "/api/v1/admin/agents", map[string]any{"agent_id": "gpu-1", "allowed_cidrs": []string{"not-a-cidr"}}, 400)
	do("POST", "/api/v1/admin/agents/ghost/revoke", map[string]any{"reason": "x"}, 404)

	do("POST", "/api/v1/admin/tenants", map[string]any{"tenant_id": "acme", "name": "Acme", "tier": "standard"}, 200)
	do("PATCH", "/api/v1/admin/tenants/acme", map[string]any{"tier": "premium", "rpm_limit": 600}, 200)
	do("PATCH", "/api/v1/admin/tenants/acme", map[string]any{"tier": "gold"}, 400)
	do("POST", "/api/v1/admin/tenants", map[string]any{"tenant_id": "globex", "name": "Globex", "tier": "standard"}, 200)
	ci := do("POST", "/api/v1/admin/tenants/acme/api-keys", map[string]any{"name": "ci"}, 200)
	ciKey := ci["api_key"].(map[string]any)["id"].(string)
	do("POST", "/api/v1/admin/tenants/acme/api-keys/"+ciKey+"/revoke", map[string]any{}, 200)
	acmeKey := do("POST", "/api/v1/admin/tenants/acme/api-keys", map[string]any{"name": "reader"}, 200)["secret"].(string)
	globexKey := do("POST", "/api/v1/admin/tenants/globex/api-keys", map[string]any{"name": "reader"}, 200)["secret"].(string)
	token := do("POST", "/api/v1/admin/agents", map[string]any{"agent_id": "gpu-1", "tenant_id": "acme"}, 200)["token"].(string)
	rotated := do("POST", "/api/v1/admin/agents/gpu-1/rotate", map[string]any{}, 200)["token"].(string)
	do("POST", "/api/v1/admin/agents/gpu-1/drain", map[string]any{}, 200)
	do("POST", "/api/v1/admin/agents/gpu-1/undrain", map[string]any{}, 200)
	do("POST", "/api/v1/admin/agents/gpu-1/revoke", map[string]any{"reason": "retired"}, 200)
	// A tenant created through the admin API is registered with the quota
	// service too, on the operator's behalf (tenant.created).
	byOperator := []string{"tenant_account.created", "tenant.created", "tenant_account.updated", "tenant_account.created", "tenant.created", "api_key.created",
		"api_key.revoked", "api_key.created", "api_key.created", "agent.registered", "agent.token_rotated", "agent.drained",
		"agent.undrained", "agent.revoked"}

	// Every change the gateway recorded (the stack's own bootstrap
	// included) reaches the audit log, and nothing else does.
	gw, err := pg.Open(ctx, pg.Config{URL: s.Postgres, Schema: gateway.Schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	var recorded int
	if err := gw.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	adminRows := func() []map[string]any {
		var all []map[string]any
		for _, r := range []string{"tenant_account", "api_key", "admin_key", "agent"} {
			all = append(all, auditEntries(t, s, op, url.Values{"resource": {r}})...)
		}
		return all
	}
	var rows []map[string]any
	waitUntil(t, "every admin change in the audit log", func() bool {
		rows = adminRows()
		return len(rows) == recorded
	})

	// The operator key's id is the resource of its own creation (by the
	// gateway at start-up, from no client).
	boot := auditEntries(t, s, op, url.Values{"action": {"admin_key.created"}})
	if len(boot) != 1 || boot[0]["user_id"] != "gateway" || boot[0]["ip"] != "" || boot[0]["tenant_id"] != "" {
		t.Fatalf("admin_key.created = %v", boot)
	}
	opID := boot[0]["resource_id"].(string)
	mine := auditEntries(t, s, op, url.Values{"user_id": {opID}})
	counts := map[string]int{}
	for _, e := range mine {
		counts[e["action"].(string)]++
		if e["ip"] != client {
			t.Errorf("%s from %v, want %s (the client behind the trusted proxy)", e["action"], e["ip"], client)
		}
		if e["action"] == "agent.revoked" && !strings.Contains(e["details"].(string), `"reason":"retired"`) {
			t.Errorf("agent.revoked details = %v", e["details"])
		}
	}
	want := map[string]int{}
	for _, a := range byOperator {
		want[a]++
	}
	if len(mine) != len(byOperator) || len(counts) != len(want) {
		t.Errorf("the operator's entries = %v, want %v", counts, want)
	}
	for a, n := range want {
		if counts[a] != n {
			t.Errorf("%d × %s by the operator, want %d", counts[a], a, n)
		}
	}

	// Tenant scoping: each tenant's key sees its own admin entries.
	acme := auditEntries(t, s, acmeKey, url.Values{"resource": {"api_key"}})
	if len(acme) != 3 {
		t.Errorf("acme sees %d api_key entries, want 3 (two created, one revoked): %v", len(acme), acme)
	}
	for _, who := range []struct{ key, tenant string }{{acmeKey, "acme"}, {globexKey, "globex"}} {
		for _, r := range []string{"tenant_account", "api_key", "admin_key", "agent"} {
			for _, e := range auditEntries(t, s, who.key, url.Values{"resource": {r}}) {
				if e["tenant_id"] != who.tenant {
					t.Errorf("%s's key sees %v", who.tenant, e)
				}
			}
		}
	}
	if g := auditEntries(t, s, globexKey, url.Values{"resource": {"agent"}}); len(g) != 0 {
		t.Errorf("globex sees acme's agent: %v", g)
	}
	if a := auditEntries(t, s, acmeKey, url.Values{"resource": {"agent"}}); len(a) != 5 {
		t.Errorf("acme sees %d agent entries, want 5", len(a))
	}

	// No secret, whole or in part, anywhere in the audit table.
	cpool, err := pg.Open(ctx, pg.Config{URL: s.Postgres, Schema: consumers.Schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cpool.Close()
	var dump string
	if err := cpool.QueryRow(ctx, `SELECT coalesce(string_agg(row_to_json(a)::text, E'\n'), '') FROM audit_logs a`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{op, ci["secret"].(string), acmeKey, globexKey, token, rotated, s.DemoAPIKey} {
		// <scheme>_<prefix>_<secret>: the prefix is not secret (lists and
		// logs name it), the rest is.
		parts := strings.SplitN(secret, "_", 3)
		if len(parts) != 3 || len(parts[2]) < 32 {
			t.Fatalf("a secret of an unexpected shape (%d parts)", len(parts))
		}
		if strings.Contains(dump, secret) || strings.Contains(dump, parts[2]) {
			t.Errorf("the audit table holds a %s… secret", parts[0])
		}
	}

	var out bytes.Buffer
	if err := replay(ctx, &out, s.Postgres, kafka.Config{Brokers: s.Kafka}, false, false); err != nil {
		t.Fatalf("replay: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "audit_admin") {
		t.Errorf("the replay does not mention audit_admin:\n%s", out.String())
	}
}
