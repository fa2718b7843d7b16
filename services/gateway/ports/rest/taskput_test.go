package rest

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// An update may carry the task as an answer shows it: what only the
// server sets is left out, what a TaskSpec has stays, and a key neither
// knows stays for the route to refuse.
func TestTaskUpdateLeavesOutWhatOnlyTheServerSets(t *testing.T) {
	in := `{"id": "01a2", "name": "n", "priority": 2, "status": "pending", "retry_count": 0, "exit_code": null,
		"created_at": "2026-01-01T00:00:00Z", "attempt_id": "", "version": 1, "preemption": null,
		"checkpoint": {"enabled": false, "key": "", "size_bytes": "0", "saved_at": null},
		"distribution": {"mode": "single", "machine_id": "m", "labels": [], "count": 0},
		"retryCount": 3, "prio": 1}`
	var got map[string]json.RawMessage
	if err := json.Unmarshal(withoutTaskReadOnly([]byte(in)), &got); err != nil {
		t.Fatal(err)
	}
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, []string{"checkpoint", "distribution", "id", "name", "prio", "priority"}) {
		t.Errorf("keys = %v", keys)
	}
	var cp, dist map[string]any
	_ = json.Unmarshal(got["checkpoint"], &cp)
	_ = json.Unmarshal(got["distribution"], &dist)
	if len(cp) != 1 || cp["enabled"] != false || len(dist) != 4 {
		t.Errorf("checkpoint = %v, distribution = %v", cp, dist)
	}
	for _, body := range []string{`{"name": "n", "priority": 2}`, `[1]`, `{"name": `, ``} {
		if out := withoutTaskReadOnly([]byte(body)); string(out) != body {
			t.Errorf("%q became %q", body, out)
		}
	}
}
