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
	code, _, _ = w.call("POST", "/api/v1/admin/tenants", op, map[string]any{"tenant_id": "Bad Id", "name": "x", "tier": "standard"})
	if code != 400 {
		t.Fatalf("invalid tenant = %d", code)
	}
	code, body, _ = w.call("GET", "/api/v1/tenants", op, nil)
	if ts, _ := body["tenants"].([]any); code != 200 || len(ts) != 2 {
		t.Errorf("quota tenants = %d %v, want demo and studio", code, body)
	}
}
