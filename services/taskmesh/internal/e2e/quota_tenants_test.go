package e2e

import (
	"os"
	"strings"
	"testing"
	"time"
)

// A tenant created through the admin API is a tenant of the quota service
// too (docs/api/admin.md, docs/api/quota.md): an operator can produce its
// GU quota right away, without registering it a second time, and a rename
// reaches the quota service.
func TestAdminTenantsAreQuotaTenants(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	raw, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	op := strings.TrimSpace(string(raw))
	code, body, _ := w.call("POST", "/api/v1/admin/tenants", op, map[string]any{"tenant_id": "studio", "name": "Studio", "tier": "premium"})
	if code != 200 || body["id"] != "studio" {
		t.Fatalf("create tenant = %d %v", code, body)
	}
	code, body, _ = w.call("GET", "/api/v1/tenants/studio", op, nil)
	if code != 200 || body["tenant_id"] != "studio" || body["name"] != "Studio" {
		t.Fatalf("the quota service's tenant = %d %v", code, body)
	}
	code, q, _ := w.call("POST", "/api/v1/quotas", op, map[string]any{"tenant_id": "studio", "cluster": w.s.QuotaCluster, "kind": "GU",
		"spec": map[string]any{"name": "gu1", "min_units": 2, "max_units": 4, "machine_type": "A100"}})
	if code != 200 || q["tenant_id"] != "studio" || q["name"] != "gu1" {
		t.Fatalf("GU quota of a tenant made through the admin API = %d %v", code, q)
	}
	waitFor(t, 30*time.Second, "the quota to be produced", func() bool {
		code, body, _ := w.call("GET", "/api/v1/quotas/"+q["id"].(string), op, nil)
		return code == 200 && body["status"] == "Active"
	})

	code, body, _ = w.call("PATCH", "/api/v1/admin/tenants/studio", op, map[string]any{"name": "Studio Two"})
	if code != 200 || body["name"] != "Studio Two" {
		t.Fatalf("rename = %d %v", code, body)
	}
	code, body, _ = w.call("GET", "/api/v1/tenants/studio", op, nil)
	if code != 200 || body["name"] != "Studio Two" {
		t.Errorf("after the rename the quota service says %d %v", code, body)
	}
	// A tenant the admin API refuses is registered nowhere.
	// Its message says what an id may be, not the field's pattern.
	code, body, _ = w.call("POST", "/api/v1/admin/tenants", op, map[string]any{"tenant_id": "Bad Id", "name": "x", "tier": "standard"})
	if msg, _ := body["message"].(string); code != 400 || !strings.Contains(msg, "tenant_id: must be 1 to 63 lower-case letters") ||
		strings.Contains(msg, "regex") {
		t.Fatalf("invalid tenant = %d %v", code, body)
	}
	code, body, _ = w.call("GET", "/api/v1/tenants", op, nil)
	if ts, _ := body["tenants"].([]any); code != 200 || len(ts) != 2 {
		t.Errorf("quota tenants = %d %v, want demo and studio", code, body)
	}
}

// Every GU quota a task may name has a WorkGroup to read (docs/api/
// quota.md): a root's is its WorkGroup child's, a third-level quota's its
// second-level ancestor's — the ones the submit-time check uses. The
// background quota has none (31004).
func TestEveryGUQuotaShowsTheWorkGroupServingIt(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	raw, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	op, demo := strings.TrimSpace(string(raw)), w.s.DemoAPIKey
	code, root, _ := w.call("POST", "/api/v1/quotas", op, map[string]any{"tenant_id": "demo", "cluster": w.s.QuotaCluster, "kind": "GU",
		"spec": map[string]any{"name": "gu1", "min_units": 4, "max_units": 8, "machine_type": "A100",
			"children": []any{
				map[string]any{"name": "gu1-team", "min_units": 4, "max_units": 8,
					"children": []any{map[string]any{"name": "gu1-team-a", "min_units": 2, "max_units": 4}}},
				map[string]any{"name": "gu1-spare", "min_units": 0, "max_units": 8, "background": true},
			}}})
	if code != 200 {
		t.Fatalf("create = %d %v", code, root)
	}
	ids := map[string]string{}
	var walk func(q map[string]any)
	walk = func(q map[string]any) {
		ids[q["name"].(string)] = q["id"].(string)
		for _, c := range q["children"].([]any) {
			walk(c.(map[string]any))
		}
	}
	walk(root)
	waitFor(t, 30*time.Second, "the quota to be produced", func() bool {
		code, body, _ := w.call("GET", "/api/v1/quotas/"+ids["gu1"], op, nil)
		return code == 200 && body["status"] == "Active"
	})
	for _, name := range []string{"gu1", "gu1-team", "gu1-team-a"} {
		code, wg, _ := w.call("GET", "/api/v1/quotas/"+ids[name]+"/workgroup", demo, nil)
		if code != 200 || wg["quota_id"] != ids["gu1-team"] || wg["status"] != "Running" || wg["gpus"] != 4.0 {
			t.Errorf("WorkGroup of %s = %d %v, want gu1-team's", name, code, wg)
		}
	}
	code, body, _ := w.call("GET", "/api/v1/quotas/"+ids["gu1-spare"]+"/workgroup", demo, nil)
	if code != 404 || body["code"] != 31004.0 {
		t.Errorf("WorkGroup of the background quota = %d %v", code, body)
	}
	code, body, _ = w.call("GET", "/api/v1/quotas/q-nope/workgroup", demo, nil)
	if code != 404 || body["code"] != 31004.0 {
		t.Errorf("WorkGroup of an unknown quota = %d %v", code, body)
	}
	// Another tenant does not see it, whichever quota it names.
	beta := w.tenantKey("beta")
	code, body, _ = w.call("GET", "/api/v1/quotas/"+ids["gu1"]+"/workgroup", beta, nil)
	if code != 404 || body["code"] != 31004.0 {
		t.Errorf("another tenant's = %d %v", code, body)
	}
}
