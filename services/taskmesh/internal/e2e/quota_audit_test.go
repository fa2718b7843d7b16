package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/gateway"
)

// An operator's changes of tenants, clusters, inventory, quotas and queue
// definitions, made through the gateway, are in the audit log as the
// operator key's, with the address the gateway saw
// (docs/api/audit.md#quota-and-queue-changes).
func TestOperatorQuotaAndQueueChangesAreAuditedAsTheOperator(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	raw, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	op := strings.TrimSpace(string(raw))
	opID := operatorKeyID(t, w, op)

	must := func(method, path string, body any) map[string]any {
		t.Helper()
		code, out, _ := w.call(method, path, op, body)
		if code != 200 {
			t.Fatalf("%s %s = %d %v", method, path, code, out)
		}
		return out
	}
	must("PUT", "/api/v1/tenants/acme", map[string]any{"name": "Acme"})
	must("POST", "/api/v1/clusters", map[string]any{"name": "c9", "description": "audited"})
	must("PUT", "/api/v1/clusters/c9/inventory/A100", map[string]any{"total_gpus": 8})
	q := must("POST", "/api/v1/quotas", map[string]any{"tenant_id": "acme", "cluster": "c9", "kind": "GU",
		"spec": map[string]any{"name": "gu9", "min_units": 2, "max_units": 4, "machine_type": "A100"}})
	id := fmt.Sprint(q["id"])
	must("PATCH", "/api/v1/quotas/"+id, map[string]any{"max_units": 6})
	must("DELETE", "/api/v1/quotas/"+id, nil)
	must("PUT", "/api/v1/cohorts/co9", map[string]any{})
	must("PUT", "/api/v1/cluster-queues/cq9", `{"cohort":"co9","resourceGroups":[{"coveredResources":["nvidia.com/gpu"],
		"flavors":[{"name":"default-flavor","resources":[{"name":"nvidia.com/gpu","nominalQuota":2}]}]}]}`)
	must("PUT", "/api/v1/local-queues/lq9", map[string]any{"cluster_queue": "cq9"})
	must("DELETE", "/api/v1/local-queues/lq9", nil)
	must("DELETE", "/api/v1/cluster-queues/cq9", nil)
	must("DELETE", "/api/v1/cohorts/co9", nil)

	for _, e := range []struct{ resource, action, id string }{
		{"tenant", "tenant.created", "acme"},
		{"cluster", "cluster.created", "c9"},
		{"cluster", "cluster.inventory_set", "c9"},
		{"quota", "quota.created", id},
		{"quota", "quota.updated", id},
		{"quota", "quota.unsubscribed", id},
		{"cohort", "cohort.defined", "co9"},
		{"cohort", "cohort.deleted", "co9"},
		{"cluster_queue", "cluster_queue.defined", "cq9"},
		{"cluster_queue", "cluster_queue.deleted", "cq9"},
		{"local_queue", "local_queue.defined", "lq9"},
		{"local_queue", "local_queue.deleted", "lq9"},
	} {
		query := url.Values{"resource": {e.resource}, "action": {e.action}, "resource_id": {e.id}}.Encode()
		var entries []any
		waitFor(t, 30*time.Second, e.action+" of "+e.id+" in the audit log", func() bool {
			_, body, _ := w.call("GET", "/api/v1/audit-logs?"+query, op, nil)
			entries, _ = body["audit_logs"].([]any)
			return len(entries) > 0
		})
		if len(entries) != 1 {
			t.Errorf("%s of %s: %d entries, want 1: %v", e.action, e.id, len(entries), entries)
		}
		entry := entries[0].(map[string]any)
		if entry["user_id"] != opID || entry["ip"] != "127.0.0.1" {
			t.Errorf("%s of %s: user_id %v, ip %v; want %s from 127.0.0.1", e.action, e.id, entry["user_id"], entry["ip"], opID)
		}
	}
}

// operatorKeyID is the id of operator key secret (tmo_<prefix>_<secret>),
// found by its prefix.
func operatorKeyID(t *testing.T, w *world, secret string) string {
	t.Helper()
	parts := strings.SplitN(secret, "_", 3)
	if len(parts) != 3 || parts[0] != "tmo" {
		t.Fatalf("operator key %q is not tmo_<prefix>_<secret>", parts[0])
	}
	pool, err := pg.Open(context.Background(), pg.Config{URL: w.s.Postgres, Schema: gateway.Schema})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var id string
	if err := pool.QueryRow(context.Background(), `SELECT id FROM admin_keys WHERE prefix = $1`, parts[1]).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
