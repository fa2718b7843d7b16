package app

import (
	"errors"
	"testing"
	"time"
)

// A standby instance explains from the recorded workloads; a tenant sees
// its own tasks only.
func TestExplainTaskOnAStandby(t *testing.T) {
	f := newFixture(t)
	admitted := now.Add(-time.Minute)
	f.store.state.workloads["t1"] = WorkloadRecord{Workload: Workload{ID: "t1", ClusterQueue: "cq"}, TenantID: "acme",
		State: StateAdmitted, Flavors: map[string]string{GPUResource: "a100"}, AdmittedAt: admitted}
	got, err := f.app.ExplainTask(f.ctx, premium, "t1")
	if err != nil || got.State != StateAdmitted || got.ClusterQueue != "cq" || got.Flavors[GPUResource] != "a100" ||
		got.AdmittedAtUnixNano != admitted.UnixNano() {
		t.Errorf("acme's task = %+v, %v; want admitted in cq on a100", got, err)
	}
	if _, err := f.app.ExplainTask(f.ctx, standard, "t1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("beta explained acme's task: %v, want ErrNotFound", err)
	}
	if got, err := f.app.ExplainTask(f.ctx, operator, "t1"); err != nil || got.State != StateAdmitted {
		t.Errorf("an operator's explanation = %+v, %v", got, err)
	}
	if _, err := f.app.ExplainTask(f.ctx, operator, "t-none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an unknown task: %v, want ErrNotFound", err)
	}
	if _, live := f.app.Usage([]string{"cq"}, nil); live {
		t.Error("a standby reported live usage")
	}
}

// The active instance explains from its core; a workload waiting for its
// queue from its live record, and one the loop does not hold (finished:
// the loop keeps only live workloads) from the recorded one.
func TestExplainTaskOnTheActiveLoop(t *testing.T) {
	f := newFixture(t)
	admitted := now.Add(-time.Minute)
	f.loop.core = &core{explained: map[string]Explanation{
		"t-admitted": {ClusterQueue: "cq", State: StateAdmitted},
		"t-pending":  {ClusterQueue: "cq", State: StatePending, Position: 2, Reason: "waiting for quota", BlockedBy: "t-admitted"},
	}}
	f.loop.work = map[string]*WorkloadRecord{
		"t-admitted": {Workload: Workload{ID: "t-admitted", ClusterQueue: "cq"}, TenantID: "acme", State: StateAdmitted,
			Flavors: map[string]string{GPUResource: "a100"}, AdmittedAt: admitted},
		"t-pending": {Workload: Workload{ID: "t-pending", ClusterQueue: "cq"}, TenantID: "acme", State: StatePending},
		"t-outside": {Workload: Workload{ID: "t-outside", ClusterQueue: "cq-gone"}, TenantID: "acme", State: StatePending, Reason: "no queue cq-gone"},
	}
	f.store.state.workloads["t-finished"] = WorkloadRecord{Workload: Workload{ID: "t-finished", ClusterQueue: "cq"}, TenantID: "acme",
		State: StateFinished, Reason: "succeeded"}
	f.loop.outside = map[string]bool{"t-outside": true}
	tests := []struct {
		id   string
		want TaskAdmission
	}{
		// The core's explanation of an admitted workload gets the
		// recorded flavors and admission time.
		{"t-admitted", TaskAdmission{TaskID: "t-admitted", Explanation: Explanation{ClusterQueue: "cq", State: StateAdmitted,
			Flavors: map[string]string{GPUResource: "a100"}}, AdmittedAtUnixNano: admitted.UnixNano()}},
		{"t-pending", TaskAdmission{TaskID: "t-pending", Explanation: Explanation{ClusterQueue: "cq", State: StatePending,
			Position: 2, Reason: "waiting for quota", BlockedBy: "t-admitted"}}},
		{"t-outside", TaskAdmission{TaskID: "t-outside", Explanation: Explanation{ClusterQueue: "cq-gone", State: StatePending,
			Reason: "no queue cq-gone"}}},
		{"t-finished", TaskAdmission{TaskID: "t-finished", Explanation: Explanation{ClusterQueue: "cq", State: StateFinished,
			Reason: "succeeded"}}},
	}
	for _, tt := range tests {
		got, err := f.app.ExplainTask(f.ctx, premium, tt.id)
		if err != nil || got.TaskID != tt.want.TaskID || got.ClusterQueue != tt.want.ClusterQueue || got.State != tt.want.State ||
			got.Position != tt.want.Position || got.Reason != tt.want.Reason || got.BlockedBy != tt.want.BlockedBy ||
			got.Flavors[GPUResource] != tt.want.Flavors[GPUResource] || got.AdmittedAtUnixNano != tt.want.AdmittedAtUnixNano {
			t.Errorf("%s = %+v, %v; want %+v", tt.id, got, err, tt.want)
		}
	}
	// Both answer for the tenant's own tasks only; a task neither holds
	// is unknown.
	for _, id := range []string{"t-pending", "t-finished"} {
		if _, err := f.app.ExplainTask(f.ctx, standard, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("beta explained acme's %s: %v, want ErrNotFound", id, err)
		}
	}
	if _, err := f.app.ExplainTask(f.ctx, operator, "t-none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an unknown task: %v, want ErrNotFound", err)
	}
}
