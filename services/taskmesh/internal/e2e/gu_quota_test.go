package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// GPU work under a GU quota (docs/api/quota.md#the-submit-time-gu-check),
// through the real quota service: refused while the tenant has no such quota
// (GU_QUOTA_NOT_EXISTS) and while its WorkGroup is being created
// (GU_QUOTA_CREATING), storing nothing; once an operator has produced it
// through the gateway, the task is admitted into the WorkGroup's queue and
// runs.
func TestGPUWorkRunsInItsGUQuotasWorkGroup(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)
	if err := w.s.Quota.RegisterTenant(context.Background(), "acme", "Acme"); err != nil {
		t.Fatal(err)
	}
	acme := w.tenantKey("acme")
	b, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	operator := strings.TrimSpace(string(b))
	task := map[string]any{"name": "render", "type": "shell", "command": "echo", "args": []string{"rendered"},
		"quota": "gu1", "resources": map[string]string{"nvidia.com/gpu": "2"}}
	refused := func(wantHTTP int, wantCode float64, reason string) {
		t.Helper()
		code, body, _ := w.call("POST", "/api/v1/tasks", acme, task)
		if code != wantHTTP || body["code"] != wantCode || !strings.Contains(fmt.Sprint(body["message"]), reason) {
			t.Fatalf("submit = %d %v, want %d/%v (%s)", code, body, wantHTTP, wantCode, reason)
		}
	}
	refused(400, 30010, "GU Quota Not Exists: tenant")

	// The operator produces the quota through the gateway with an operator
	// key; a tenant's key may not.
	quota := map[string]any{"tenant_id": "acme", "cluster": w.s.QuotaCluster, "kind": "GU",
		"spec": map[string]any{"name": "gu1", "min_units": 2, "max_units": 2, "machine_type": "A100"}}
	if code, body, _ := w.call("POST", "/api/v1/quotas", acme, quota); code != 403 {
		t.Fatalf("a tenant producing a quota: %d %v", code, body)
	}
	// 403 whatever the body holds: the right to call comes before the
	// request's validity.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/quotas", `{}`},
		{"PUT", "/api/v1/clusters/x/inventory/A100", `{"total_gpus":-1}`},
		{"PUT", "/api/v1/cluster-queues/q", `{}`},
	} {
		if code, body, _ := w.call(c.method, c.path, acme, c.body); code != 403 {
			t.Fatalf("a tenant's %s %s %s: %d %v, want 403", c.method, c.path, c.body, code, body)
		}
	}
	code, created, _ := w.call("POST", "/api/v1/quotas", operator, quota)
	if code != 200 || created["status"] != "Provisioning" {
		t.Fatalf("produce = %d %v", code, created)
	}
	// The in-process operator takes seconds to run the WorkGroup.
	refused(409, 30011, "GU Quota创建中 (the GU quota is being created): the WorkGroup")
	if n := countEvents(t, w); n != 0 {
		t.Fatalf("%d events stored after refused submissions", n)
	}
	// Through the API too: once a task submitted after the refusals is
	// listed, acme's list holds that task alone.
	marker := w.submit(acme, map[string]any{"name": "after", "type": "shell", "command": "true"})
	if tasks := w.waitListed(acme, marker); len(tasks) != 1 {
		t.Fatalf("refused submissions stored tasks: %v", tasks)
	}

	var id string
	waitFor(t, 60*time.Second, "the WorkGroup's queue to admit GU quota work", func() bool {
		code, body, _ := w.call("POST", "/api/v1/tasks", acme, task)
		if code == 200 {
			id = body["id"].(string)
		}
		return code == 200
	})
	done := w.waitStatus(acme, id, 30*time.Second, "completed")
	if done["stdout"] != "rendered\n" || !strings.HasPrefix(fmt.Sprint(done["cluster_queue"]), "gu-acme-gu1") {
		t.Fatalf("task = %v", done)
	}
	queue := fmt.Sprint(done["cluster_queue"])
	for _, key := range []string{operator, acme} {
		if code, q, _ := w.call("GET", "/api/v1/cluster-queues/"+queue, key, nil); code != 200 {
			t.Fatalf("the WorkGroup's cluster queue: %d %v", code, q)
		}
	}
	// Another tenant neither lists nor reads acme's WorkGroup queue: it
	// is answered as a queue nobody defined.
	globex := w.tenantKey("globex")
	code, list, _ := w.call("GET", "/api/v1/cluster-queues", globex, nil)
	if code != 200 || strings.Contains(fmt.Sprint(list), queue) || !strings.Contains(fmt.Sprint(list), "tenant-high-priority-queue") {
		t.Fatalf("globex's list of cluster queues = %d %v; want the shared queues without %s", code, list, queue)
	}
	code, got, _ := w.call("GET", "/api/v1/cluster-queues/"+queue, globex, nil)
	_, unknown, _ := w.call("GET", "/api/v1/cluster-queues/gu-nobody-none", globex, nil)
	if code != 404 || got["code"] != unknown["code"] ||
		strings.ReplaceAll(fmt.Sprint(got["message"]), queue, "gu-nobody-none") != fmt.Sprint(unknown["message"]) {
		t.Fatalf("globex's read of %s = %d %v; want an unknown queue's %v", queue, code, got, unknown)
	}
}
