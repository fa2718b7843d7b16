package e2e

import (
	"os"
	"strings"
	"testing"
)

// A ClusterQueue and a cohort may be defined with the quantities of a
// Kueue manifest, numbers (nominalQuota: 8), as well as with quantity
// strings (docs/api/quota.md#queue-admission); either way the API answers
// the quantity strings. A quantity that is no quantity is still refused,
// naming the field, and records nothing. The body may also be the whole
// Kueue object (apiVersion, kind, metadata, spec) of the path's name.
func TestQueuesTakeKueueForms(t *testing.T) {
	w := newWorld(t)
	raw, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	op := strings.TrimSpace(string(raw))
	code, body, _ := w.call("PUT", "/api/v1/cohorts/studios", op, `{"resourceGroups":[{"coveredResources":["nvidia.com/gpu"],
		"flavors":[{"name":"default-flavor","resources":[{"name":"nvidia.com/gpu","nominalQuota":4}]}]}]}`)
	if code != 200 {
		t.Fatalf("PUT cohort = %d %v", code, body)
	}
	// The document's tenant-high-priority-queue, as its manifest's spec.
	code, body, _ = w.call("PUT", "/api/v1/cluster-queues/studio-queue", op, `{"cohort":"studios","resourceGroups":[{
		"coveredResources":["nvidia.com/gpu"],"flavors":[{"name":"default-flavor","resources":[
		{"name":"nvidia.com/gpu","nominalQuota":8,"borrowingLimit":2}]}]}]}`)
	if code != 200 {
		t.Fatalf("PUT cluster queue = %d %v", code, body)
	}
	code, body, _ = w.call("GET", "/api/v1/cluster-queues/studio-queue", op, nil)
	spec, _ := body["spec"].(map[string]any)
	groups, _ := spec["resource_groups"].([]any)
	if code != 200 || len(groups) != 1 {
		t.Fatalf("GET cluster queue = %d %v", code, body)
	}
	res := groups[0].(map[string]any)["flavors"].([]any)[0].(map[string]any)["resources"].([]any)[0].(map[string]any)
	if res["nominal_quota"] != "8" || res["borrowing_limit"] != "2" || spec["cohort"] != "studios" {
		t.Errorf("stored resources = %v", res)
	}

	code, body, _ = w.call("PUT", "/api/v1/cluster-queues/bad-queue", op, `{"resource_groups":[{"covered_resources":["nvidia.com/gpu"],
		"flavors":[{"name":"default-flavor","resources":[{"name":"nvidia.com/gpu","nominal_quota":-1}]}]}]}`)
	if msg, _ := body["message"].(string); code != 400 || body["code"] != 30005.0 || !strings.Contains(msg, "nominal_quota") {
		t.Errorf("a negative quantity = %d %v", code, body)
	}
	if code, _, _ := w.call("GET", "/api/v1/cluster-queues/bad-queue", op, nil); code != 404 {
		t.Errorf("the refused queue was recorded: GET = %d", code)
	}

	// The whole Kueue object, as the document's manifest reads in JSON.
	manifest := `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue","metadata":{"name":"gold-queue"},
		"spec":{"resourceGroups":[{"coveredResources":["nvidia.com/gpu"],"flavors":[{"name":"default-flavor",
		"resources":[{"name":"nvidia.com/gpu","nominalQuota":8}]}]}]}}`
	code, body, _ = w.call("PUT", "/api/v1/cluster-queues/gold-queue", op, manifest)
	if code != 200 || body["name"] != "gold-queue" {
		t.Fatalf("PUT the manifest = %d %v", code, body)
	}
	// What the manifest leaves out is answered as the default in force, as
	// Kueue answers it.
	code, body, _ = w.call("GET", "/api/v1/cluster-queues/gold-queue", op, nil)
	spec, _ = body["spec"].(map[string]any)
	pre, _ := spec["preemption"].(map[string]any)
	if code != 200 || spec["queueing_strategy"] != "BestEffortFIFO" || pre["within_cluster_queue"] != "Never" ||
		pre["reclaim_within_cohort"] != "Never" || pre["min_priority_gap"] != 0.0 {
		t.Errorf("defaults of the manifest's queue = %d %v", code, spec)
	}
	code, body, _ = w.call("PUT", "/api/v1/local-queues/gold", op,
		`{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"LocalQueue","metadata":{"name":"gold"},"spec":{"clusterQueue":"gold-queue"}}`)
	if code != 200 || body["name"] != "gold" {
		t.Fatalf("PUT the LocalQueue manifest = %d %v", code, body)
	}
	// A manifest naming another queue than the path is refused.
	code, body, _ = w.call("PUT", "/api/v1/cluster-queues/silver-queue", op, manifest)
	if msg, _ := body["message"].(string); code != 400 || body["code"] != 30005.0 || !strings.Contains(msg, "metadata.name") {
		t.Errorf("a manifest of another name = %d %v", code, body)
	}
	if code, _, _ := w.call("GET", "/api/v1/cluster-queues/silver-queue", op, nil); code != 404 {
		t.Errorf("the refused manifest was recorded: GET = %d", code)
	}
}
