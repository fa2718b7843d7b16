package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// quotaAdmin is an operator's client of the quota service (operator
// actions are not open to tenants' API keys at the gateway).
func (w *world) quotaAdmin() (quotav1.QuotaServiceClient, context.Context) {
	w.t.Helper()
	conn, err := grpc.NewClient(w.s.QuotaAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { conn.Close() })
	ctx := authn.Outgoing(context.Background(), authn.Principal{Kind: authn.KindAdmin, Subject: "e2e-operator"}, w.s.InternalToken)
	return quotav1.NewQuotaServiceClient(conn), ctx
}

// The quota API through the gateway's REST facade: a tenant reads its own
// quotas and WorkGroups, cannot produce quotas, does not see another
// tenant's; malformed input is 400/30005 and stores nothing.
func TestQuotasThroughREST(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	acme, beta := w.tenantKey("acme"), w.tenantKey("beta")
	for _, id := range []string{"acme", "beta"} {
		if err := w.s.Quota.RegisterTenant(context.Background(), id, id); err != nil {
			t.Fatal(err)
		}
	}
	admin, ctx := w.quotaAdmin()
	created, err := admin.CreateQuota(ctx, &quotav1.CreateQuotaRequest{TenantId: "acme", Cluster: w.s.QuotaCluster, Kind: "GU",
		Spec: &quotav1.QuotaSpec{Name: "gu1", MinUnits: 2, MaxUnits: 4, MachineType: "A100"}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetQuota().GetId()

	var q map[string]any
	waitFor(t, 30*time.Second, "the quota to be produced", func() bool {
		code, body, _ := w.call("GET", "/api/v1/quotas/"+id, acme, nil)
		q = body
		return code == 200 && body["status"] == "Active"
	})
	if q["tenant_id"] != "acme" || q["kind"] != "GU" || q["min_units"] != float64(2) || len(q["children"].([]any)) != 2 {
		t.Fatalf("quota = %v", q)
	}
	var child string
	for _, c := range q["children"].([]any) {
		if c.(map[string]any)["background"] == false {
			child = c.(map[string]any)["id"].(string)
		}
	}
	code, wg, _ := w.call("GET", "/api/v1/quotas/"+child+"/workgroup", acme, nil)
	if code != 200 || wg["status"] != "Running" || wg["gpus"] != float64(2) || wg["machine_type"] != "A100" {
		t.Fatalf("workgroup: %d %v", code, wg)
	}
	code, inv, _ := w.call("GET", "/api/v1/clusters/"+w.s.QuotaCluster+"/inventory", acme, nil)
	if code != 200 || inv["inventory"].([]any)[0].(map[string]any)["allocated_gpus"] != float64(2) {
		t.Fatalf("inventory: %d %v", code, inv)
	}
	code, list, _ := w.call("GET", "/api/v1/quotas", acme, nil)
	if code != 200 || len(list["quotas"].([]any)) != 3 {
		t.Fatalf("list: %d %v", code, list)
	}

	raw, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	operator := strings.TrimSpace(string(raw))
	cases := []struct {
		name, method, path, key string
		body                    any
		status                  int
		code                    float64
	}{
		{"another tenant's quota", "GET", "/api/v1/quotas/" + id, beta, nil, 404, 31004},
		{"another tenant's workgroup", "GET", "/api/v1/quotas/" + child + "/workgroup", beta, nil, 404, 31004},
		{"tenant produces", "POST", "/api/v1/quotas", acme, map[string]any{"tenant_id": "acme", "cluster": w.s.QuotaCluster, "kind": "GU",
			"spec": map[string]any{"name": "x", "min_units": 1, "max_units": 1, "machine_type": "A100"}}, 403, 403},
		{"tenant unsubscribes", "DELETE", "/api/v1/quotas/" + id, acme, nil, 403, 403},
		{"min above max", "POST", "/api/v1/quotas", operator, map[string]any{"tenant_id": "acme", "cluster": w.s.QuotaCluster, "kind": "GU",
			"spec": map[string]any{"name": "x", "min_units": 3, "max_units": 1, "machine_type": "A100"}}, 400, 30005},
		{"bad kind", "POST", "/api/v1/quotas", operator, map[string]any{"kind": "XPU", "spec": map[string]any{"name": "x", "max_units": 1}}, 400, 30005},
		// A tenant's key learns that it may not call before whether its
		// values were valid.
		{"tenant's bad kind", "POST", "/api/v1/quotas", acme, map[string]any{"kind": "XPU", "spec": map[string]any{"name": "x", "max_units": 1}}, 403, 403},
		{"tenant's inventory without its count", "PUT", "/api/v1/clusters/" + w.s.QuotaCluster + "/inventory/A100", acme, map[string]any{}, 403, 403},
		{"tenant's inventory", "PUT", "/api/v1/clusters/" + w.s.QuotaCluster + "/inventory/A100", acme, map[string]any{"total_gpus": 0}, 403, 403},
		{"unknown field", "PATCH", "/api/v1/quotas/" + id, acme, map[string]any{"min_units": 1, "max_units": 2, "nope": 1}, 400, 30005},
		{"no credential", "GET", "/api/v1/quotas/" + id, "", nil, 401, 401},
	}
	for _, c := range cases {
		status, body, _ := w.call(c.method, c.path, c.key, c.body)
		if status != c.status || body["code"] != c.code || body["message"] == "" {
			t.Errorf("%s: %d %v, want %d code %v", c.name, status, body, c.status, c.code)
		}
	}
	all, err := admin.ListQuotas(ctx, &quotav1.ListQuotasRequest{})
	if err != nil || len(all.GetQuotas()) != 3 {
		t.Fatalf("refused requests changed the quotas: %v, %v", all, err)
	}
	code, other, _ := w.call("GET", "/api/v1/tenants/acme/quotas", beta, nil)
	if code != 200 || len(other["quotas"].([]any)) != 0 {
		t.Fatalf("beta listed acme's quotas: %d %v", code, other)
	}

	// The gRPC front door forwards QuotaService to the quota service too.
	front, err := grpc.NewClient(w.s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	qc := quotav1.NewQuotaServiceClient(front)
	asKey := func(key string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	}
	check, err := qc.CheckGUQuota(asKey(acme), &quotav1.CheckGUQuotaRequest{TenantId: "acme", Quota: "gu1"})
	if err != nil || check.GetWorkGroup().GetStatus() != "Running" {
		t.Fatalf("check through the front door = %v, %v", check, err)
	}
	if _, err := qc.GetQuota(asKey(beta), &quotav1.GetQuotaRequest{QuotaId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("beta through the front door: %v", err)
	}
	if _, err := qc.DeleteQuota(asKey(acme), &quotav1.DeleteQuotaRequest{QuotaId: id}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("acme unsubscribed through the front door: %v", err)
	}

	// A PATCH of one limit keeps the other: max_units alone leaves the
	// WorkGroup quota's min_units, and so its WorkGroup's GPUs, as they were.
	op := operator
	code, patched, _ := w.call("PATCH", "/api/v1/quotas/"+child, op, map[string]any{"max_units": 3})
	if code != 200 || patched["min_units"] != float64(2) || patched["max_units"] != float64(3) ||
		patched["work_group"].(map[string]any)["gpus"] != float64(2) {
		t.Fatalf("PATCH max_units alone: %d %v", code, patched)
	}
	code, patched, _ = w.call("PATCH", "/api/v1/quotas/"+child, op, map[string]any{})
	if code != 200 || patched["min_units"] != float64(2) || patched["max_units"] != float64(3) {
		t.Fatalf("PATCH of nothing: %d %v", code, patched)
	}
}
