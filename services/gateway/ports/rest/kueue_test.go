package rest

import (
	"encoding/json"
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
		{"a status beside", `{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"ClusterQueue","spec":{},"status":{}}`, "", false},
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
