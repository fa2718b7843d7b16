package domain

import (
	"testing"
	"time"
)

// queued is a task submitted into ClusterQueue "gpu-cq".
func queued(t *testing.T) Task {
	t.Helper()
	return Fold(Submit(t0, "task-1", "tenant-a", "key-1", "", "", spec(t, func(in *SpecInput) {
		in.Queue, in.Resources = "premium", map[string]string{"nvidia.com/gpu": "2"}
	}), "gpu-cq"))
}

func TestAdmissionGatesClaims(t *testing.T) {
	task := queued(t)
	if !task.AwaitingAdmission() || task.Claimable(t0) || task.AdmissionEpoch != 1 {
		t.Fatalf("submitted = %+v: want awaiting admission at epoch 1, not claimable", task)
	}
	if _, err := task.Lease(t0, "att-1", "agent-1", "m-1", "req"); err == nil {
		t.Fatal("a task awaiting admission was leased")
	}
	// Decisions about another stay or another queue change nothing.
	for _, stale := range []struct {
		epoch int64
		cq    string
	}{{0, "gpu-cq"}, {2, "gpu-cq"}, {1, "other-cq"}} {
		if recs := task.Admit(t0, stale.epoch, stale.cq, nil); recs != nil {
			t.Errorf("Admit(%d, %s) = %v, want nothing", stale.epoch, stale.cq, recs)
		}
	}
	task = run(t, task, task.Admit(t0, 1, "gpu-cq", map[string]string{"nvidia.com/gpu": "a100"}), nil)
	if !task.Admitted || !task.Claimable(t0) || task.Flavors["nvidia.com/gpu"] != "a100" {
		t.Fatalf("admitted = %+v", task)
	}
	if recs := task.Admit(t0, 1, "gpu-cq", nil); recs != nil {
		t.Errorf("repeated admission recorded %v", recs)
	}
	// A plain task needs none.
	if plain := submitted(t, nil); plain.AwaitingAdmission() || !plain.Claimable(t0) {
		t.Errorf("plain task = %+v: want claimable without admission", plain)
	}
}

func TestEvictionPreemptsOrRequeues(t *testing.T) {
	admitted := func() Task {
		task := queued(t)
		return run(t, task, task.Admit(t0, 1, "gpu-cq", nil), nil)
	}
	// Admitted but not yet claimed: straight back to the queue, new stay.
	task := admitted()
	task = run(t, task, task.Evict(t0, 1, "task-9", "reclaim"), nil)
	if task.Status != StatusPending || !task.AwaitingAdmission() || task.AdmissionEpoch != task.Version {
		t.Fatalf("evicted pending = %+v", task)
	}
	if recs := task.Evict(t0, 1, "task-9", "again"); recs != nil {
		t.Errorf("eviction of an earlier stay recorded %v", recs)
	}

	// Running: preempted, still holding its quota until the agent stops it.
	task = admitted()
	recs, err := task.Lease(t0, "att-1", "agent-1", "m-1", "req")
	task = run(t, task, recs, err)
	task = run(t, task, task.Evict(t0, 1, "task-9", "reclaim"), nil)
	if task.Status != StatusPreempted || !task.Admitted || task.PreemptedBy != "task-9" {
		t.Fatalf("evicted running = %+v", task)
	}
	if stop, why := task.MustStop("att-1"); !stop || why != "preempted" {
		t.Errorf("MustStop = %v %q", stop, why)
	}
	if recs := task.Evict(t0, 1, "task-9", "again"); recs != nil {
		t.Errorf("second eviction recorded %v", recs)
	}
	recs, err = task.Requeue(t0, "agent:agent-1", "stopped after preemption")
	task = run(t, task, recs, err)
	if !task.AwaitingAdmission() || task.AttemptID != "" || task.AdmissionEpoch != task.Version {
		t.Fatalf("requeued = %+v", task)
	}
}

func TestAdmissionFollowsTheLifecycle(t *testing.T) {
	start := func() Task {
		task := queued(t)
		task = run(t, task, task.Admit(t0, 1, "gpu-cq", nil), nil)
		recs, err := task.Lease(t0, "att-1", "agent-1", "m-1", "req")
		task = run(t, task, recs, err)
		recs, err = task.Start(t0, "agent-1", "att-1")
		return run(t, task, recs, err)
	}
	tests := []struct {
		name         string
		act          func(Task) ([]Record, error)
		wantAdmitted bool
		wantWaiting  bool
	}{
		{"lease lost keeps the admission for the next agent", func(x Task) ([]Record, error) {
			return x.ExpireLease(t0.Add(time.Hour), ReasonAgentLost)
		}, true, false},
		{"failure with a retry queues again", func(x Task) ([]Record, error) {
			recs, _, err := x.Complete(t0, "agent-1", "att-1", Outcome{ExitCode: 1})
			return recs, err
		}, false, true},
		{"success releases", func(x Task) ([]Record, error) {
			recs, _, err := x.Complete(t0, "agent-1", "att-1", Outcome{})
			return recs, err
		}, false, false},
		{"cancel releases", func(x Task) ([]Record, error) { return x.Cancel(t0, "user", "no") }, false, false},
		{"suspend releases", func(x Task) ([]Record, error) { return x.Suspend(t0, "user", "pause") }, false, false},
	}
	for _, tt := range tests {
		task := start()
		recs, err := tt.act(task)
		task = run(t, task, recs, err)
		if task.Admitted != tt.wantAdmitted || task.AwaitingAdmission() != tt.wantWaiting {
			t.Errorf("%s: admitted %v waiting %v, want %v %v", tt.name, task.Admitted, task.AwaitingAdmission(),
				tt.wantAdmitted, tt.wantWaiting)
		}
	}
	// Updating a waiting task starts a new stay (priority or requests may
	// have changed); the previous stay's admission no longer applies.
	task := queued(t)
	recs, err := task.Update(t0, "user", task.Spec, "gpu-cq")
	task = run(t, task, recs, err)
	if task.AdmissionEpoch != 2 || task.Admit(t0, 1, "gpu-cq", nil) != nil {
		t.Errorf("updated = %+v: want a new stay at epoch 2", task)
	}
}

// A task with dependencies that waits in a ClusterQueue stays out of it
// until they have completed: admitted earlier it would hold quota it
// cannot use, and could keep its own dependency out of a full queue.
func TestTaskHeldForItsDependenciesEntersTheQueueOnRelease(t *testing.T) {
	withDeps := func(in *SpecInput) {
		in.Queue, in.Resources = "premium", map[string]string{"nvidia.com/gpu": "2"}
		in.DependsOn = []string{"task-0"}
	}
	task := Fold(Submit(t0, "task-1", "tenant-a", "key-1", "", "", spec(t, withDeps), "gpu-cq"))
	if !task.HeldForDependencies || task.AdmissionEpoch != 0 || !task.AwaitingAdmission() || task.Claimable(t0) {
		t.Fatalf("submitted with dependencies = %+v: want held, no stay, not claimable", task)
	}
	// No stay: no decision can admit it.
	if recs := task.Admit(t0, 0, "gpu-cq", nil); recs != nil {
		t.Errorf("a held task was admitted: %v", recs)
	}
	task = run(t, task, task.ReleaseForAdmission(t0), nil)
	if task.HeldForDependencies || task.AdmissionEpoch != task.Version || !task.AwaitingAdmission() {
		t.Fatalf("released = %+v: want a stay at version %d", task, task.Version)
	}
	if recs := task.ReleaseForAdmission(t0); recs != nil {
		t.Errorf("a second release recorded %v", recs)
	}
	task = run(t, task, task.Admit(t0, task.Version, "gpu-cq", nil), nil)
	if !task.Claimable(t0) {
		t.Fatalf("admitted after release = %+v: want claimable", task)
	}

	// An update that keeps the dependencies holds it again (its stay
	// ends); without a queue, or without dependencies, nothing is held.
	held := Fold(Submit(t0, "task-2", "tenant-a", "key-1", "", "", spec(t, withDeps), "gpu-cq"))
	released := run(t, held, held.ReleaseForAdmission(t0), nil)
	recs, err := released.Update(t0, "key-1", released.Spec, "gpu-cq")
	again := run(t, released, recs, err)
	if !again.HeldForDependencies || again.AdmissionEpoch != 0 {
		t.Errorf("updated with its dependencies = %+v: want held again", again)
	}
	if plain := Fold(Submit(t0, "task-3", "tenant-a", "key-1", "", "", spec(t, withDeps), "")); plain.HeldForDependencies {
		t.Errorf("a task without a queue is held: %+v", plain)
	}
	if q := queued(t); q.HeldForDependencies {
		t.Errorf("a queued task without dependencies is held: %+v", q)
	}
	// Cancelled while held: nothing left to release.
	recs, err = held.Cancel(t0, "key-1", "no longer needed")
	cancelled := run(t, held, recs, err)
	if recs := cancelled.ReleaseForAdmission(t0); recs != nil {
		t.Errorf("a cancelled task was released: %v", recs)
	}
}
