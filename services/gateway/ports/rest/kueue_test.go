package rest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSpellQuantities(t *testing.T) {
	tests := []struct {
		name, body string
		want       string // "" = sent as it is
	}{
		{"a Kueue spec's numbers", `{"resourceGroups":[{"coveredResources":["nvidia.com/gpu"],"flavors":[{"name":"default-flavor","resources":[{"name":"nvidia.com/gpu","nominalQuota":8,"borrowingLimit":2,"lendingLimit":0}]}]}]}`,
			`{"resourceGroups":[{"coveredResources":["nvidia.com/gpu"],"flavors":[{"name":"default-flavor","resources":[{"borrowingLimit":"2","lendingLimit":"0","name":"nvidia.com/gpu","nominalQuota":"8"}]}]}]}`},
		{"proto names, a fraction", `{"cohort":"c","resource_groups":[{"flavors":[{"resources":[{"name":"cpu","nominal_quota":1.5}]}]}]}`,
			`{"cohort":"c","resource_groups":[{"flavors":[{"resources":[{"name":"cpu","nominal_quota":"1.5"}]}]}]}`},
		{"strings already", `{"resource_groups":[{"flavors":[{"resources":[{"name":"cpu","nominal_quota":"2"}]}]}]}`, ""},
		{"a number elsewhere is left for the route to refuse", `{"resource_groups":[{"flavors":[{"name":3,"resources":[{"name":"cpu","nominal_quota":"2"}]}]}]}`, ""},
		{"malformed", `{"resource_groups":[`, ""},
		{"trailing data", `{"resource_groups":[{"flavors":[{"resources":[{"nominal_quota":1}]}]}]} {}`, ""},
		{"not an object", `[1]`, ""},
	}
	for _, tt := range tests {
		got, ok := spellQuantities([]byte(tt.body))
		if tt.want == "" {
			if ok {
				t.Errorf("%s: rewritten to %s, want it sent as it is", tt.name, got)
			}
			continue
		}
		var a, b any
		if !ok || json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(tt.want), &b) != nil {
			t.Fatalf("%s: %s, %v", tt.name, got, ok)
		}
		ga, _ := json.Marshal(a)
		gb, _ := json.Marshal(b)
		if string(ga) != string(gb) {
			t.Errorf("%s: %s, want %s", tt.name, ga, gb)
		}
	}
	for path, want := range map[string]string{"/api/v1/cluster-queues/q1": "ClusterQueue", "/api/v1/cohorts/c1": "Cohort",
		"/api/v1/local-queues/q1": "LocalQueue", "/api/v1/cluster-queues/": "", "/api/v1/cluster-queues/q1/x": "", "/api/v1/quotas/q1": ""} {
		if _, kind, _ := kueueRoute(path); kind != want {
			t.Errorf("kueueRoute(%s) = %q, want %q", path, kind, want)
		}
	}
}

func TestKueueManifest(t *testing.T) {
	tests := []struct {
		name, body string
		wantSpec   string // "" = not a manifest
		wantErr    bool
	}{
		{"the document's ClusterQueue", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue","metadata":{"name":"q1"},"spec":{"cohort":"c"}}`,
			`{"cohort":"c"}`, false},
		{"without metadata", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue","spec":{}}`, `{}`, false},
		{"another name", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue","metadata":{"name":"q2"},"spec":{}}`, "", true},
		{"another kind", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"LocalQueue","spec":{}}`, "", false},
		{"another group", `{"apiVersion":"batch/v1","kind":"ClusterQueue","spec":{}}`, "", false},
		{"a status beside", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue","spec":{},"status":{}}`, `{}`, false},
		{"another key beside", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue","spec":{},"extra":{}}`, "", false},
		{"a plain spec", `{"cohort":"c"}`, "", false},
		{"malformed", `{"apiVersion":`, "", false},
	}
	for _, tt := range tests {
		spec, ok, err := kueueManifest([]byte(tt.body), "ClusterQueue", "q1")
		switch {
		case (err != nil) != tt.wantErr:
			t.Errorf("%s: error %v, want error %v", tt.name, err, tt.wantErr)
		case ok != (tt.wantSpec != "") || (ok && string(spec) != tt.wantSpec):
			t.Errorf("%s: spec %s (%v), want %q", tt.name, spec, ok, tt.wantSpec)
		}
	}
}

// kueueDocQueue is a ClusterQueue as Kueue's documentation writes it, with
// what `kubectl get -o json` adds: the defaults Kueue writes, metadata it
// keeps and a status.
const kueueDocQueue = `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue",
	"metadata":{"name":"q1","namespace":"","labels":{"team":"a"},"annotations":{"note":"x"},"uid":"0b5e-11","resourceVersion":"4711",
		"generation":2,"creationTimestamp":"2024-05-01T10:00:00Z","finalizers":["kueue.x-k8s.io/resource-in-use"]},
	"spec":{"namespaceSelector":{},"cohort":"team-a","queueingStrategy":"BestEffortFIFO","stopPolicy":"None",
		"flavorFungibility":{"whenCanBorrow":"Borrow","whenCanPreempt":"TryNextFlavor"},
		"preemption":{"reclaimWithinCohort":"Any","borrowWithinCohort":{"policy":"Never"},"withinClusterQueue":"LowerPriority"},
		"resourceGroups":[{"coveredResources":["cpu","nvidia.com/gpu"],"flavors":[{"name":"default-flavor","resources":[
			{"name":"cpu","nominalQuota":9},{"name":"nvidia.com/gpu","nominalQuota":8}]}]}]},
	"status":{"admittedWorkloads":0,"pendingWorkloads":0,"reservingWorkloads":0,
		"conditions":[{"type":"Active","status":"True","reason":"Ready","message":"Can admit new workloads"}]}}`

func TestKueueBodyAcceptsKueueDefaults(t *testing.T) {
	tests := []struct {
		name, kind, body string
		want             string // the spec sent on
	}{
		{"Kueue's documented ClusterQueue with its status", "ClusterQueue", kueueDocQueue,
			`{"cohort":"team-a","queueingStrategy":"BestEffortFIFO","preemption":{"reclaimWithinCohort":"Any","withinClusterQueue":"LowerPriority"},
			"resourceGroups":[{"coveredResources":["cpu","nvidia.com/gpu"],"flavors":[{"name":"default-flavor","resources":[
			{"name":"cpu","nominalQuota":"9"},{"name":"nvidia.com/gpu","nominalQuota":"8"}]}]}]}`},
		{"a bare spec, snake_case", "ClusterQueue", `{"namespace_selector":{"match_labels":{},"match_expressions":[]},"stop_policy":"None",
			"flavor_fungibility":{"when_can_borrow":"MayStopSearch","when_can_preempt":"TryNextFlavor"},"admission_checks":[],
			"admission_checks_strategy":{"admission_checks":[]},"fair_sharing":{},
			"preemption":{"within_cluster_queue":"Never","borrow_within_cohort":{"policy":"Never"}},"resource_groups":[]}`,
			`{"preemption":{"within_cluster_queue":"Never"},"resource_groups":[]}`},
		{"nulls", "ClusterQueue", `{"namespaceSelector":null,"stopPolicy":null,"flavorFungibility":{},"fairSharing":{"weight":null},
			"preemption":{"borrowWithinCohort":{}},"admissionChecks":null}`, `{"preemption":{}}`},
		{"a LocalQueue manifest in its namespace", "LocalQueue", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"LocalQueue",
			"metadata":{"name":"q1","namespace":"team-a"},"spec":{"clusterQueue":"cq","stopPolicy":"None"},"status":{"pendingWorkloads":1}}`,
			`{"clusterQueue":"cq"}`},
		{"a Cohort's parentName", "Cohort", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"Cohort","metadata":{"name":"q1"},
			"spec":{"parentName":"root","fairSharing":{}}}`, `{"parent":"root"}`},
		{"parentName and the same parent", "Cohort", `{"parent":"root","parent_name":"root"}`, `{"parent":"root"}`},
		{"a v1beta2 ClusterQueue's cohortName", "ClusterQueue", `{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"ClusterQueue",
			"metadata":{"name":"q1"},"spec":{"cohortName":"team-a","resourceGroups":[]}}`, `{"cohort":"team-a","resourceGroups":[]}`},
		{"cohort_name and the same cohort", "ClusterQueue", `{"cohort":"team-a","cohort_name":"team-a"}`, `{"cohort":"team-a"}`},
	}
	for _, tt := range tests {
		got, err := kueueBody([]byte(tt.body), tt.kind, "q1")
		if err != nil || got == nil {
			t.Errorf("%s: %s, %v", tt.name, got, err)
			continue
		}
		var a, b any
		if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(tt.want), &b) != nil {
			t.Fatalf("%s: %s", tt.name, got)
		}
		ga, _ := json.Marshal(a)
		gb, _ := json.Marshal(b)
		if string(ga) != string(gb) {
			t.Errorf("%s: %s, want %s", tt.name, ga, gb)
		}
	}
	// Without anything to drop or spell, a bare body goes on as sent.
	if got, err := kueueBody([]byte(`{"cohort":"c","namespaceSelectorX":1}`), "ClusterQueue", "q1"); got != nil || err != nil {
		t.Errorf("an ordinary body = %s, %v", got, err)
	}
	// Fields of another kind are left for the route to refuse as unknown.
	if got, err := kueueBody([]byte(`{"clusterQueue":"cq","namespaceSelector":{}}`), "LocalQueue", "q1"); got != nil || err != nil {
		t.Errorf("a LocalQueue's namespaceSelector = %s, %v", got, err)
	}
}

func TestKueueBodyRefusesWhatTaskmeshDoesNotDo(t *testing.T) {
	tests := []struct {
		name, kind, body string
		field, why       string // in the error
	}{
		{"a namespace selector", "ClusterQueue", `{"namespaceSelector":{"matchLabels":{"team":"a"}}}`, "namespaceSelector", "no namespaces"},
		{"a selector by expressions", "ClusterQueue", `{"namespace_selector":{"matchExpressions":[{"key":"team","operator":"In","values":["a"]}]}}`,
			"namespace_selector", "tenants and tiers"},
		{"a selector that is no object", "ClusterQueue", `{"namespaceSelector":"all"}`, "namespaceSelector", "no namespaces"},
		{"borrowWithinCohort LowerPriority", "ClusterQueue", `{"preemption":{"borrowWithinCohort":{"policy":"LowerPriority"}}}`,
			"preemption.borrowWithinCohort.policy", "only Never"},
		{"a priority threshold", "ClusterQueue", `{"preemption":{"borrow_within_cohort":{"policy":"Never","maxPriorityThreshold":100}}}`,
			"preemption.borrow_within_cohort.maxPriorityThreshold", "LowerPriority"},
		{"stopPolicy Hold", "ClusterQueue", `{"stopPolicy":"Hold"}`, "stopPolicy", "does not stop"},
		{"stopPolicy HoldAndDrain on a LocalQueue", "LocalQueue", `{"clusterQueue":"cq","stop_policy":"HoldAndDrain"}`, "stop_policy", "does not stop"},
		{"another stop policy", "ClusterQueue", `{"stopPolicy":"none"}`, "stopPolicy", "only None"},
		{"admission checks", "ClusterQueue", `{"admissionChecks":["prov"]}`, "admissionChecks", "no admission checks"},
		{"an admission check strategy", "ClusterQueue", `{"admissionChecksStrategy":{"admissionChecks":[{"name":"prov"}]}}`,
			"admissionChecksStrategy.admissionChecks", "no admission checks"},
		{"a fair-sharing weight", "ClusterQueue", `{"fairSharing":{"weight":"2"}}`, "fairSharing.weight", "no fair sharing"},
		{"a cohort's weight", "Cohort", `{"fair_sharing":{"weight":1}}`, "fair_sharing.weight", "no fair sharing"},
		{"a LocalQueue's weight", "LocalQueue", `{"clusterQueue":"cq","fairSharing":{"weight":"1"}}`, "fairSharing.weight", "no fair sharing"},
		{"whenCanBorrow TryNextFlavor", "ClusterQueue", `{"flavorFungibility":{"whenCanBorrow":"TryNextFlavor"}}`,
			"flavorFungibility.whenCanBorrow", "first flavor"},
		{"whenCanPreempt Preempt", "ClusterQueue", `{"flavor_fungibility":{"when_can_preempt":"Preempt"}}`,
			"flavor_fungibility.when_can_preempt", "no flavor fits without preempting"},
		{"whenCanPreempt MayStopSearch", "ClusterQueue", `{"flavorFungibility":{"whenCanPreempt":"MayStopSearch"}}`,
			"flavorFungibility.whenCanPreempt", "only TryNextFlavor"},
		{"a flavor preference", "ClusterQueue", `{"flavorFungibility":{"preference":"PreemptionOverBorrowing"}}`,
			"flavorFungibility.preference", "order"},
		{"in a manifest", "ClusterQueue", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue","metadata":{"name":"q1"},
			"spec":{"stopPolicy":"HoldAndDrain"},"status":{}}`, "spec.stopPolicy", "HoldAndDrain"},
		{"parentName beside another parent", "Cohort", `{"parent":"a","parentName":"b"}`, "parentName", `"a"`},
		{"cohortName beside another cohort", "ClusterQueue", `{"cohort":"a","cohortName":"b"}`, "cohortName", `the cohort is already "a"`},
	}
	for _, tt := range tests {
		got, err := kueueBody([]byte(tt.body), tt.kind, "q1")
		if err == nil {
			t.Errorf("%s: accepted as %s", tt.name, got)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "invalid "+tt.field+":") || !strings.Contains(msg, tt.why) {
			t.Errorf("%s: %q, want the field %s and %q", tt.name, msg, tt.field, tt.why)
		}
	}
}

// A refused body is answered 400 (30005) in the error envelope and never
// reaches the route; an accepted one reaches it as the spec.
func TestKueueSpecsAnswersRefusals(t *testing.T) {
	var reached []string
	h := kueueSpecs(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reached = append(reached, string(b))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/api/v1/cluster-queues/q1", strings.NewReader(`{"stopPolicy":"Hold"}`)))
	var env struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if rec.Code != http.StatusBadRequest || json.Unmarshal(rec.Body.Bytes(), &env) != nil || env.Code != 30005 ||
		!strings.Contains(env.Message, "stopPolicy") || len(reached) != 0 {
		t.Fatalf("a refused body = %d %s, reached %v", rec.Code, rec.Body, reached)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/api/v1/cluster-queues/q1", strings.NewReader(kueueDocQueue)))
	if rec.Code != http.StatusOK || len(reached) != 1 || strings.Contains(reached[0], "namespaceSelector") ||
		!strings.Contains(reached[0], `"nominalQuota":"8"`) {
		t.Fatalf("the documented queue = %d, reached %v", rec.Code, reached)
	}
}
