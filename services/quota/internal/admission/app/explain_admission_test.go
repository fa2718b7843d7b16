package app

import (
	"errors"
	"slices"
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
	// A standby says so too when a pending task's queue does not exist.
	f.store.state.workloads["t2"] = WorkloadRecord{Workload: Workload{ID: "t2", ClusterQueue: "cq-gone"}, TenantID: "acme", State: StatePending}
	got, err = f.app.ExplainTask(f.ctx, premium, "t2")
	if want := "cluster queue cq-gone does not exist; the task waits until a cluster queue of that name is defined"; err != nil ||
		got.State != StatePending || got.Position != 0 || got.Reason != want {
		t.Errorf("a pending task of a deleted queue = %+v, %v; want reason %q", got, err, want)
	}
}

// A tenant's explanation never names another tenant's task: the StrictFIFO
// head it waits behind and the victims it waits for are "a task of
// another tenant" in the reason, and out of blocked_by and waiting_for;
// its own tasks stay named, and an operator sees every id.
func TestExplanationsHideOtherTenantsTasks(t *testing.T) {
	f := newFixture(t)
	f.loop.core = &core{explained: map[string]Explanation{
		"a-behind": {ClusterQueue: "cq", State: StatePending, Position: 2, BlockedBy: "b-head",
			Reason: "position 2 in cq behind head b-head, which does not fit (StrictFIFO)"},
		"a-own-head": {ClusterQueue: "cq", State: StatePending, Position: 3, BlockedBy: "a-behind",
			Reason: "position 3 in cq behind head a-behind, which does not fit (StrictFIFO)"},
		"a-preemptor": {ClusterQueue: "cq", State: StatePending, Position: 1, WaitingFor: []string{"b-victim", "a-victim"},
			Reason: "waiting for b-victim, a-victim to be evicted"},
	}}
	f.loop.work = map[string]*WorkloadRecord{}
	for id, tenant := range map[string]string{"a-behind": "acme", "a-own-head": "acme", "a-preemptor": "acme", "a-victim": "acme",
		"b-head": "beta", "b-victim": "beta"} {
		f.loop.work[id] = &WorkloadRecord{Workload: Workload{ID: id, ClusterQueue: "cq"}, TenantID: tenant, State: StatePending}
	}
	f.store.put(Definition{Kind: KindClusterQueue, Name: "cq", ClusterQueue: gpuQueue("", "1")})
	for _, tc := range []struct {
		c          Caller
		id         string
		blockedBy  string
		waitingFor []string
		reason     string
	}{
		{premium, "a-behind", "", nil, "position 2 in cq behind head a task of another tenant, which does not fit (StrictFIFO)"},
		{premium, "a-own-head", "a-behind", nil, "position 3 in cq behind head a-behind, which does not fit (StrictFIFO)"},
		{premium, "a-preemptor", "", []string{"a-victim"}, "waiting for a task of another tenant, a-victim to be evicted"},
		{operator, "a-behind", "b-head", nil, "position 2 in cq behind head b-head, which does not fit (StrictFIFO)"},
		{operator, "a-preemptor", "", []string{"b-victim", "a-victim"}, "waiting for b-victim, a-victim to be evicted"},
	} {
		got, err := f.app.ExplainTask(f.ctx, tc.c, tc.id)
		if err != nil || got.BlockedBy != tc.blockedBy || !slices.Equal(got.WaitingFor, tc.waitingFor) || got.Reason != tc.reason {
			t.Errorf("%s as %s = blocked_by %q, waiting_for %v, reason %q, %v; want %q, %v, %q",
				tc.id, tc.c.Actor, got.BlockedBy, got.WaitingFor, got.Reason, err, tc.blockedBy, tc.waitingFor, tc.reason)
		}
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
	f.loop.outside = map[string]bool{"t-outside": true, "t-gu-gone": true}
	f.store.put(Definition{Kind: KindClusterQueue, Name: "cq", ClusterQueue: gpuQueue("", "1")})
	// A WorkGroup queue closing since its quota was deleted, and one
	// removed since.
	f.store.put(Definition{Kind: KindClusterQueue, Name: "gu-acme-gu1", Origin: OriginWorkGroup, ClusterQueue: gpuQueue("", "0"),
		Closing: "its GU quota was deleted"})
	f.loop.core.(*core).explained["t-closing"] = Explanation{ClusterQueue: "gu-acme-gu1", State: StatePending, Position: 1,
		Reason: "position 1 in gu-acme-gu1: a100/nvidia.com/gpu: requested 1, available 0 (nominal 0, borrowable 0)"}
	f.loop.work["t-closing"] = &WorkloadRecord{Workload: Workload{ID: "t-closing", ClusterQueue: "gu-acme-gu1"}, TenantID: "acme",
		State: StatePending}
	f.loop.work["t-gu-gone"] = &WorkloadRecord{Workload: Workload{ID: "t-gu-gone", ClusterQueue: "gu-acme-gu2"}, TenantID: "acme",
		State: StatePending}
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
		// A queue that does not exist, or admits nothing new, is named as
		// the reason (docs/api/quota.md#explaining-a-wait).
		{"t-outside", TaskAdmission{TaskID: "t-outside", Explanation: Explanation{ClusterQueue: "cq-gone", State: StatePending,
			Reason: "cluster queue cq-gone does not exist; the task waits until a cluster queue of that name is defined"}}},
		{"t-gu-gone", TaskAdmission{TaskID: "t-gu-gone", Explanation: Explanation{ClusterQueue: "gu-acme-gu2", State: StatePending,
			Reason: "cluster queue gu-acme-gu2 does not exist: its GU quota was deleted (or its WorkGroup stopped running); " +
				"the task waits until a GU quota of that name runs again"}}},
		{"t-closing", TaskAdmission{TaskID: "t-closing", Explanation: Explanation{ClusterQueue: "gu-acme-gu1", State: StatePending,
			Position: 1, Reason: "position 1 in gu-acme-gu1, which admits nothing new: its GU quota was deleted"}}},
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
