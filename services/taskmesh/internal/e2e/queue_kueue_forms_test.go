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
	t.Parallel()
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

// A manifest a Kueue user has in hand carries what Kueue writes or
// defaults: a status, metadata Kueue keeps, namespaceSelector: {},
// borrowWithinCohort Never, stopPolicy None, flavorFungibility's defaults.
// Those describe what Taskmesh does and are accepted, as a manifest or a
// bare spec, camelCase or snake_case; a value asking for what Taskmesh
// does not do is 30005 naming the field, and nothing is recorded
// (docs/api/quota.md#kueues-own-fields).
func TestQueuesTakeKueueDefaults(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	raw, err := os.ReadFile(w.s.AdminKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	op := strings.TrimSpace(string(raw))
	code, body, _ := w.call("PUT", "/api/v1/cohorts/team-a", op, `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"Cohort",
		"metadata":{"name":"team-a","uid":"c0ffee"},"spec":{"fairSharing":{}},"status":{}}`)
	if code != 200 {
		t.Fatalf("PUT the cohort manifest = %d %v", code, body)
	}
	code, body, _ = w.call("PUT", "/api/v1/cohorts/team-a-child", op, `{"parentName":"team-a"}`)
	if code != 200 {
		t.Fatalf("PUT a cohort with parentName = %d %v", code, body)
	}
	// Kueue's documented ClusterQueue, as `kubectl get -o json` prints it.
	manifest := `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue",
		"metadata":{"name":"cluster-queue","labels":{"team":"a"},"annotations":{"owner":"ml"},"uid":"7d3c","resourceVersion":"4711",
			"generation":1,"creationTimestamp":"2024-05-01T10:00:00Z"},
		"spec":{"namespaceSelector":{},"cohort":"team-a","queueingStrategy":"BestEffortFIFO","stopPolicy":"None",
			"flavorFungibility":{"whenCanBorrow":"Borrow","whenCanPreempt":"TryNextFlavor"},
			"preemption":{"reclaimWithinCohort":"Any","borrowWithinCohort":{"policy":"Never"},"withinClusterQueue":"LowerPriority"},
			"resourceGroups":[{"coveredResources":["cpu","memory","nvidia.com/gpu"],"flavors":[{"name":"default-flavor","resources":[
				{"name":"cpu","nominalQuota":9},{"name":"memory","nominalQuota":"36Gi"},{"name":"nvidia.com/gpu","nominalQuota":4}]}]}]},
		"status":{"pendingWorkloads":0,"admittedWorkloads":0,"conditions":[{"type":"Active","status":"True","reason":"Ready"}]}}`
	code, body, _ = w.call("PUT", "/api/v1/cluster-queues/cluster-queue", op, manifest)
	if code != 200 || body["name"] != "cluster-queue" {
		t.Fatalf("PUT Kueue's ClusterQueue = %d %v", code, body)
	}
	code, body, _ = w.call("GET", "/api/v1/cluster-queues/cluster-queue", op, nil)
	spec, _ := body["spec"].(map[string]any)
	pre, _ := spec["preemption"].(map[string]any)
	groups, _ := spec["resource_groups"].([]any)
	if code != 200 || spec["cohort"] != "team-a" || spec["queueing_strategy"] != "BestEffortFIFO" || len(groups) != 1 ||
		pre["reclaim_within_cohort"] != "Any" || pre["within_cluster_queue"] != "LowerPriority" {
		t.Fatalf("GET Kueue's ClusterQueue = %d %v", code, body)
	}
	res := groups[0].(map[string]any)["flavors"].([]any)[0].(map[string]any)["resources"].([]any)
	if len(res) != 3 || res[0].(map[string]any)["nominal_quota"] != "9" || res[1].(map[string]any)["nominal_quota"] != "36Gi" ||
		res[2].(map[string]any)["nominal_quota"] != "4" {
		t.Errorf("stored resources = %v", res)
	}
	// The same defaults in a bare spec, snake_case.
	code, body, _ = w.call("PUT", "/api/v1/cluster-queues/snake-queue", op, `{"namespace_selector":{},"cohort":"team-a",
		"stop_policy":"None","flavor_fungibility":{"when_can_borrow":"MayStopSearch","when_can_preempt":"TryNextFlavor"},
		"admission_checks":[],"fair_sharing":{},"preemption":{"borrow_within_cohort":{"policy":"Never"}},
		"resource_groups":[{"covered_resources":["nvidia.com/gpu"],"flavors":[{"name":"default-flavor","resources":[
		{"name":"nvidia.com/gpu","nominal_quota":"2"}]}]}]}`)
	if code != 200 || body["name"] != "snake-queue" {
		t.Fatalf("PUT a snake_case spec with Kueue's defaults = %d %v", code, body)
	}
	// Kueue v1beta2 names a ClusterQueue's cohort cohortName.
	code, body, _ = w.call("PUT", "/api/v1/cluster-queues/v1beta2-queue", op, `{"apiVersion":"kueue.x-k8s.io/v1beta2",
		"kind":"ClusterQueue","metadata":{"name":"v1beta2-queue"},"spec":{"cohortName":"team-a",`+
		`"resourceGroups":[{"coveredResources":["nvidia.com/gpu"],"flavors":[{"name":"default-flavor","resources":[
		{"name":"nvidia.com/gpu","nominalQuota":1}]}]}]}}`)
	if code != 200 {
		t.Fatalf("PUT a v1beta2 ClusterQueue = %d %v", code, body)
	}
	code, body, _ = w.call("GET", "/api/v1/cluster-queues/v1beta2-queue", op, nil)
	if spec, _ := body["spec"].(map[string]any); code != 200 || spec["cohort"] != "team-a" {
		t.Fatalf("GET the v1beta2 ClusterQueue = %d %v", code, body)
	}
	code, body, _ = w.call("PUT", "/api/v1/local-queues/team-a-queue", op, `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"LocalQueue",
		"metadata":{"name":"team-a-queue","namespace":"team-a"},"spec":{"clusterQueue":"cluster-queue","stopPolicy":"None"},
		"status":{"pendingWorkloads":0}}`)
	if code != 200 || body["name"] != "team-a-queue" {
		t.Fatalf("PUT Kueue's LocalQueue = %d %v", code, body)
	}
	code, body, _ = w.call("GET", "/api/v1/cohorts", op, nil)
	parents := map[string]any{}
	for _, c := range body["cohorts"].([]any) {
		c := c.(map[string]any)
		if s, ok := c["spec"].(map[string]any); ok {
			parents[c["name"].(string)] = s["parent"]
		}
	}
	if code != 200 || parents["team-a-child"] != "team-a" {
		t.Errorf("cohorts = %d %v", code, body)
	}

	// What Taskmesh does not do is refused, naming the field.
	spec1 := `"resourceGroups":[{"coveredResources":["nvidia.com/gpu"],"flavors":[{"name":"default-flavor","resources":[
		{"name":"nvidia.com/gpu","nominalQuota":1}]}]}]`
	refused := []struct{ path, body, field string }{
		{"/api/v1/cluster-queues/ns-queue", `{"namespaceSelector":{"matchLabels":{"team":"a"}},` + spec1 + `}`, "namespaceSelector"},
		{"/api/v1/cluster-queues/bwc-queue", `{"cohort":"team-a","preemption":{"reclaimWithinCohort":"Any",
			"borrowWithinCohort":{"policy":"LowerPriority"}},` + spec1 + `}`, "preemption.borrowWithinCohort.policy"},
		{"/api/v1/cluster-queues/hold-queue", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue","metadata":{"name":"hold-queue"},
			"spec":{"stopPolicy":"Hold",` + spec1 + `}}`, "spec.stopPolicy"},
		{"/api/v1/cluster-queues/drain-queue", `{"stop_policy":"HoldAndDrain",` + spec1 + `}`, "stop_policy"},
		{"/api/v1/cluster-queues/check-queue", `{"admissionChecks":["prov-req"],` + spec1 + `}`, "admissionChecks"},
		{"/api/v1/cluster-queues/fair-queue", `{"fairSharing":{"weight":"2"},` + spec1 + `}`, "fairSharing.weight"},
		{"/api/v1/cluster-queues/borrow-queue", `{"flavorFungibility":{"whenCanBorrow":"TryNextFlavor"},` + spec1 + `}`,
			"flavorFungibility.whenCanBorrow"},
		{"/api/v1/cluster-queues/preempt-queue", `{"flavor_fungibility":{"when_can_preempt":"Preempt"},` + spec1 + `}`,
			"flavor_fungibility.when_can_preempt"},
		{"/api/v1/local-queues/held", `{"clusterQueue":"cluster-queue","stopPolicy":"Hold"}`, "stopPolicy"},
		{"/api/v1/cohorts/weighted", `{"fairSharing":{"weight":"1"}}`, "fairSharing.weight"},
	}
	for _, r := range refused {
		code, body, _ := w.call("PUT", r.path, op, r.body)
		if msg, _ := body["message"].(string); code != 400 || body["code"] != 30005.0 || !strings.Contains(msg, r.field+":") {
			t.Errorf("PUT %s = %d %v, want 30005 naming %s", r.path, code, body, r.field)
		}
	}
	for _, q := range []string{"ns-queue", "bwc-queue", "hold-queue", "drain-queue", "check-queue", "fair-queue", "borrow-queue", "preempt-queue"} {
		if code, _, _ := w.call("GET", "/api/v1/cluster-queues/"+q, op, nil); code != 404 {
			t.Errorf("the refused %s was recorded: GET = %d", q, code)
		}
	}
	_, body, _ = w.call("GET", "/api/v1/local-queues", op, nil)
	for _, lq := range body["local_queues"].([]any) {
		if lq.(map[string]any)["name"] == "held" {
			t.Errorf("the refused LocalQueue was recorded: %v", lq)
		}
	}
	_, body, _ = w.call("GET", "/api/v1/cohorts", op, nil)
	for _, c := range body["cohorts"].([]any) {
		if c.(map[string]any)["name"] == "weighted" {
			t.Errorf("the refused cohort was recorded: %v", c)
		}
	}
}
