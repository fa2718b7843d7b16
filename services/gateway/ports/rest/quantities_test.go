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
	for path, want := range map[string]bool{"/api/v1/cluster-queues/q1": true, "/api/v1/cohorts/c1": true,
		"/api/v1/cluster-queues/": false, "/api/v1/cluster-queues/q1/x": false, "/api/v1/local-queues/q1": false} {
		if isQuantityRoute(path) != want {
			t.Errorf("isQuantityRoute(%s) = %v", path, !want)
		}
	}
}
