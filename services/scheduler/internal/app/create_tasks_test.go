package app_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func TestCreateTaskStoresOneSubmittedTask(t *testing.T) {
	h := newHarness(t)
	work := h.hub.Wait(app.ClaimWaiter{AgentID: "a1", Tenant: "*", Machine: "m1"})
	defer work.Stop()
	got := h.create(user("t1"), spec("hello", func(in *domain.SpecInput) { in.Priority = intp(2) }))
	if got.ID == "" || got.TenantID != "t1" || got.Status != domain.StatusPending || got.Spec.Priority != 2 ||
		got.CreatedBy != "key-t1" || !got.CreatedAt.Equal(h.clock.Now()) || got.ClusterQueue != "" {
		t.Errorf("created %+v", got)
	}
	if names := h.eventNames(got.ID); names != "[TaskSubmitted]" {
		t.Errorf("events = %s", names)
	}
	select {
	case <-work.Woken():
	default:
		t.Error("a new task did not wake waiting claims")
	}
	if calls := h.store.CallsOf("Create"); len(calls) != 1 || calls[0] != "t1/" {
		t.Errorf("Create calls = %v", calls)
	}
}

func TestCreateTaskRefusesABadSpecAndStoresNothing(t *testing.T) {
	h := newHarness(t)
	_, err := h.app.CreateTasks(h.ctx, user("t1"), spec("x", func(in *domain.SpecInput) { in.Priority = intp(11) }), "")
	wantInvalid(t, "priority 11", err, "priority")
	if calls := h.store.CallsOf("Create"); len(calls) != 0 {
		t.Errorf("an invalid task reached the store: %v", calls)
	}
}

func TestCreateTaskIsIdempotentByRequestID(t *testing.T) {
	h := newHarness(t)
	first, err := h.app.CreateTasks(h.ctx, user("t1"), spec("a"), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.app.CreateTasks(h.ctx, user("t1"), spec("a"), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != first[0].ID {
		t.Errorf("repeated create = %v, want %v", taskIDs(again), taskIDs(first))
	}
	other, err := h.app.CreateTasks(h.ctx, user("t2"), spec("a"), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if other[0].ID == first[0].ID || other[0].TenantID != "t2" {
		t.Errorf("another tenant's request id returned %+v", other[0])
	}
	if n := len(h.store.Events()); n != 2 {
		t.Errorf("%d events stored, want 2 submissions", n)
	}
	if got := h.get(first[0].ID).RequestID; got != "req-1" {
		t.Errorf("request id = %q", got)
	}
}

// A repeat after the first create's task was deleted does not answer the
// deleted task as though it waited: it is 30004, like every read of it.
func TestARepeatedCreateOfADeletedTaskIsNotFound(t *testing.T) {
	h := newHarness(t)
	first, err := h.app.CreateTasks(h.ctx, user("t1"), spec("a"), "req-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.DeleteTask(h.ctx, user("t1"), first[0].ID); err != nil {
		t.Fatal(err)
	}
	again, err := h.app.CreateTasks(h.ctx, user("t1"), spec("a"), "req-2")
	wantErr(t, "a repeated create of a deleted task", err, domain.ErrNotFound)
	if len(again) != 0 || len(h.store.Events(first[0].ID)) != 2 {
		t.Errorf("repeat = %v; events %d, want submitted and deleted only", taskIDs(again), len(h.store.Events(first[0].ID)))
	}
}

func TestCreateTaskDependingOnAMissingTaskIsInvalid(t *testing.T) {
	h := newHarness(t)
	mine := h.create(user("t1"), spec("mine"))
	theirs := h.create(user("t2"), spec("theirs"))
	for _, dep := range []string{"no-such-task", theirs.ID} {
		_, err := h.app.CreateTasks(h.ctx, user("t1"), spec("after", func(in *domain.SpecInput) { in.DependsOn = []string{mine.ID, dep} }), "")
		wantInvalid(t, "depends on "+dep, err, "depends_on")
	}
	if calls := h.store.CallsOf("Create"); len(calls) != 2 {
		t.Errorf("Create calls = %v, want only the two valid tasks", calls)
	}
	after := h.create(user("t1"), spec("after", func(in *domain.SpecInput) { in.DependsOn = []string{mine.ID} }))
	if !slices.Equal(after.Spec.DependsOn, []string{mine.ID}) {
		t.Errorf("depends_on = %v", after.Spec.DependsOn)
	}
}

func TestCreateTaskFansOut(t *testing.T) {
	h := newHarness(t)
	for _, a := range []app.Agent{
		{AgentID: "a1", MachineID: "m1", Labels: []string{"gpu"}},
		{AgentID: "a2", MachineID: "m2", Labels: []string{"gpu"}},
		{AgentID: "a3", MachineID: "m3", Labels: []string{"cpu"}},
		{AgentID: "a4", MachineID: "m4", TenantID: "t2", Labels: []string{"gpu"}},
	} {
		a.LastHeartbeatAt, a.LostAfter = h.clock.Now(), h.clock.Now().Add(time.Minute)
		if _, err := h.store.Heartbeat(h.ctx, a, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		in      domain.SpecInput
		want    int
		machine func(i int) string
		ip      func(i int) string
	}{
		{name: "scatter", want: 3, in: spec("s", func(in *domain.SpecInput) { in.Mode, in.ScatterCount = domain.ModeScatter, 3 })},
		{name: "broadcast to live gpu machines of the tenant", want: 2,
			in:      spec("b", func(in *domain.SpecInput) { in.Mode, in.Labels = domain.ModeBroadcast, []string{"gpu"} }),
			machine: func(i int) string { return []string{"m1", "m2"}[i] }},
		// One machine matched or one task scattered is still a fan-out.
		{name: "broadcast to the one machine with the labels", want: 1,
			in:      spec("b1", func(in *domain.SpecInput) { in.Mode, in.Labels = domain.ModeBroadcast, []string{"cpu"} }),
			machine: func(int) string { return "m3" }},
		{name: "scatter of one", want: 1, in: spec("s1", func(in *domain.SpecInput) { in.Mode, in.ScatterCount = domain.ModeScatter, 1 })},
		{name: "targets", want: 3,
			in: spec("t", func(in *domain.SpecInput) {
				in.TargetMachines, in.TargetIPs = []string{"m7", "m8"}, []string{"10.1.1.1"}
			}),
			machine: func(i int) string { return []string{"m7", "m8", ""}[i] },
			ip:      func(i int) string { return []string{"", "", "10.1.1.1"}[i] }},
		// A target named twice gets one task, where it first appears; two
		// spellings of an address are one address.
		{name: "targets named twice", want: 4,
			in: spec("d", func(in *domain.SpecInput) {
				in.TargetMachines = []string{"m8", "m7", "m8", "m7"}
				in.TargetIPs = []string{"2001:db8::1", "10.1.1.1", "2001:DB8:0::1", "10.1.1.1"}
			}),
			machine: func(i int) string { return []string{"m8", "m7", "", ""}[i] },
			ip:      func(i int) string { return []string{"", "", "2001:db8::1", "10.1.1.1"}[i] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := h.app.CreateTasks(h.ctx, user("t1"), tc.in, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != tc.want {
				t.Fatalf("created %d tasks, want %d", len(ts), tc.want)
			}
			for i, x := range ts {
				if x.FanoutID == "" || x.FanoutID != ts[0].FanoutID || x.Spec.GroupID != x.FanoutID {
					t.Errorf("task %d: fan-out %q group %q, want one shared new group", i, x.FanoutID, x.Spec.GroupID)
				}
				if tc.machine != nil && x.Spec.MachineID != tc.machine(i) {
					t.Errorf("task %d: machine %q, want %q", i, x.Spec.MachineID, tc.machine(i))
				}
				if tc.ip != nil && x.Spec.TargetIP != tc.ip(i) {
					t.Errorf("task %d: ip %q, want %q", i, x.Spec.TargetIP, tc.ip(i))
				}
			}
		})
	}
	t.Run("a named group is kept", func(t *testing.T) {
		ts, err := h.app.CreateTasks(h.ctx, user("t1"), spec("g", func(in *domain.SpecInput) {
			in.Mode, in.ScatterCount, in.GroupID = domain.ModeScatter, 2, "my-group"
		}), "")
		if err != nil || len(ts) != 2 || ts[0].Spec.GroupID != "my-group" || ts[1].Spec.GroupID != "my-group" {
			t.Errorf("created %+v, %v", ts, err)
		}
	})
	t.Run("broadcast without a matching machine", func(t *testing.T) {
		_, err := h.app.CreateTasks(h.ctx, user("t1"), spec("b", func(in *domain.SpecInput) {
			in.Mode, in.Labels = domain.ModeBroadcast, []string{"tpu"}
		}), "")
		wantInvalid(t, "broadcast to no machine", err, "distribution")
	})
	t.Run("too many tasks", func(t *testing.T) {
		machines := make([]string, app.MaxFanout+1)
		for i := range machines {
			machines[i] = fmt.Sprintf("m%d", i)
		}
		before := len(h.store.CallsOf("Create"))
		_, err := h.app.CreateTasks(h.ctx, user("t1"), spec("many", func(in *domain.SpecInput) { in.TargetMachines = machines }), "")
		wantInvalid(t, "fan-out above the limit", err, "targets")
		if len(h.store.CallsOf("Create")) != before {
			t.Error("a refused fan-out reached the store")
		}
	})
}

func TestCreateRepeatedTaskChainsTheRepetitions(t *testing.T) {
	h := newHarness(t)
	first := h.create(user("t1"), spec("dep"))
	ts, err := h.app.CreateTasks(h.ctx, user("t1"), spec("r", func(in *domain.SpecInput) {
		in.Repeat, in.DependsOn = 3, []string{first.ID}
	}), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 {
		t.Fatalf("created %d tasks", len(ts))
	}
	want := [][]string{{first.ID}, {first.ID, ts[0].ID}, {first.ID, ts[1].ID}}
	for i, x := range ts {
		if !slices.Equal(x.Spec.DependsOn, want[i]) {
			t.Errorf("repetition %d depends on %v, want %v", i, x.Spec.DependsOn, want[i])
		}
	}
}

// The task API's smallest input names the target machines and a
// repeat_count together: every target runs the task that many times, one
// run after another there, each machine's chain on its own.
func TestCreateRepeatedTaskRepeatsOnEveryTarget(t *testing.T) {
	h := newHarness(t)
	ts, err := h.app.CreateTasks(h.ctx, user("t1"), spec("stability-test", func(in *domain.SpecInput) {
		in.Repeat, in.TargetMachines, in.TargetIPs = 3, []string{"machine-001", "machine-002"}, []string{"10.0.0.7"}
	}), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 9 {
		t.Fatalf("created %d tasks, want 9 (3 runs on each of 3 targets)", len(ts))
	}
	for i, x := range ts {
		place, run := i/3, i%3
		if want := []string{"machine-001", "machine-002", ""}[place]; x.Spec.MachineID != want {
			t.Errorf("task %d: machine %q, want %q", i, x.Spec.MachineID, want)
		}
		if want := []string{"", "", "10.0.0.7"}[place]; x.Spec.TargetIP != want {
			t.Errorf("task %d: ip %q, want %q", i, x.Spec.TargetIP, want)
		}
		var want []string
		if run > 0 {
			want = []string{ts[i-1].ID}
		}
		if !slices.Equal(x.Spec.DependsOn, want) {
			t.Errorf("task %d (run %d on target %d) depends on %v, want %v", i, run+1, place+1, x.Spec.DependsOn, want)
		}
		if x.Spec.GroupID == "" || x.Spec.GroupID != ts[0].Spec.GroupID {
			t.Errorf("task %d: group %q, want the fan-out's %q", i, x.Spec.GroupID, ts[0].Spec.GroupID)
		}
	}

	before := len(h.store.CallsOf("Create"))
	_, err = h.app.CreateTasks(h.ctx, user("t1"), spec("many", func(in *domain.SpecInput) {
		in.Repeat, in.TargetMachines = 1000, []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11"}
	}), "")
	wantInvalid(t, "targets × repeat_count above the limit", err, "repeat_count")
	if len(h.store.CallsOf("Create")) != before {
		t.Error("a refused fan-out reached the store")
	}
	_, err = h.app.CreateTasks(h.ctx, user("t1"), spec("s", func(in *domain.SpecInput) {
		in.Repeat, in.Mode, in.ScatterCount = 2, domain.ModeScatter, 2
	}), "")
	wantInvalid(t, "repeat_count with scatter", err, "repeat_count")
}

func TestCreateTaskAsksAdmissionOnlyWhenTheSpecNeedsIt(t *testing.T) {
	h := newHarness(t).withAdmission()
	h.admission.ClusterQueue = "cq-standard"
	plain := h.create(user("t1"), spec("plain"))
	if len(h.admission.Calls()) != 0 || plain.ClusterQueue != "" {
		t.Errorf("a plain task asked the quota service: %v", h.admission.Calls())
	}
	queued := h.create(user("t1"), spec("gpu", func(in *domain.SpecInput) {
		in.Queue, in.Quota, in.Resources = "tenant-low", "q1", map[string]string{"nvidia.com/gpu": "1"}
	}))
	calls := h.admission.Calls()
	if len(calls) != 1 || calls[0].Caller != user("t1") || calls[0].Queue != "tenant-low" || calls[0].Quota != "q1" ||
		calls[0].Resources["nvidia.com/gpu"] != "1" {
		t.Errorf("resolve calls = %+v", calls)
	}
	if queued.ClusterQueue != "cq-standard" || !queued.AwaitingAdmission() {
		t.Errorf("queued task %+v does not wait for admission in cq-standard", queued)
	}
	if got := h.claim("a1", "m1", 5); len(got) != 1 || got[0].ID != plain.ID {
		t.Errorf("claim = %v, want only the plain task (the other awaits admission)", taskIDs(got))
	}
}

// The resources the pipeline's stage queues count are its own: a tenant's
// task asking for one, on create or update, alone or as a group member's
// spec, is 30005 naming it and stores nothing; the pipeline's stage task
// asks for it as ever.
func TestPipelineResourcesAreThePipelines(t *testing.T) {
	h := newHarness(t).withAdmission()
	h.app.ReserveResources("taskmesh.io/pipeline-bie")
	h.admission.ClusterQueue = "cq-pipeline-bie"
	hog := spec("hog", func(in *domain.SpecInput) {
		in.Queue, in.Resources = "pipeline-bie", map[string]string{"taskmesh.io/pipeline-bie": "1"}
	})
	_, err := h.app.CreateTasks(h.ctx, user("t1"), hog, "")
	var inv *domain.InvalidError
	if !errors.As(err, &inv) || inv.Field != "resources[taskmesh.io/pipeline-bie]" {
		t.Fatalf("a tenant's task asking for a stage's resource: %v, want 30005 naming it", err)
	}
	if _, err := h.app.ResolveQueue(h.ctx, user("t1"), domain.Spec{Resources: map[string]string{"taskmesh.io/pipeline-bie": "1"}}); !errors.As(err, &inv) {
		t.Fatalf("a group member's spec asking for it: %v, want 30005", err)
	}
	plain := h.create(user("t1"), spec("plain"))
	_, err = h.app.UpdateTask(h.ctx, user("t1"), plain.ID, domain.SpecInput{Resources: map[string]string{"taskmesh.io/pipeline-bie": "1"}})
	if !errors.As(err, &inv) {
		t.Fatalf("an update asking for it: %v, want 30005", err)
	}
	if n := len(h.admission.Calls()); n != 0 {
		t.Fatalf("refused tasks reached the quota service %d times", n)
	}
	stage, err := h.app.CreateTasks(h.ctx, app.Caller{Tenant: "t1", Subject: "pipeline", Pipeline: true}, hog, "")
	if err != nil || len(stage) != 1 || stage[0].ClusterQueue != "cq-pipeline-bie" {
		t.Fatalf("the pipeline's stage task = %+v, %v", stage, err)
	}
}

// A task the quota service admits as it is queued is claimable at once: a
// claim already waiting for work is woken with it, with no decision from
// the quota topic. The claim rechecks only hourly, so nothing but the
// wake-up can answer it.
func TestTaskAdmittedAtCreationWakesAWaitingClaim(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.ClaimRecheck = time.Hour }).withAdmission()
	h.admission.ClusterQueue, h.admission.Admit = "cq-standard", true
	claimed := make(chan []domain.Task, 1)
	go func() {
		got, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", Limit: 5, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		claimed <- got
	}()
	waitFor(t, "the claim to look for work", func() bool { return len(h.store.CallsOf("Claim")) > 0 })
	task := h.create(user("t1"), spec("gpu", func(in *domain.SpecInput) { in.Resources = map[string]string{"nvidia.com/gpu": "1"} }))
	if !task.AwaitingAdmission() {
		t.Fatalf("created task %+v does not wait for admission", task)
	}
	select {
	case got := <-claimed:
		if len(got) != 1 || got[0].ID != task.ID || got[0].Flavors["nvidia.com/gpu"] != "a100" {
			t.Fatalf("claim = %+v, want %s admitted with its flavors", got, task.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting claim was not woken by the admission")
	}
	if q := h.admission.Queued(); len(q) != 1 || q[0].ID != task.ID || q[0].AdmissionEpoch != 1 || q[0].ClusterQueue != "cq-standard" {
		t.Errorf("stays queued directly = %+v, want %s's first in cq-standard", q, task.ID)
	}
	var got []string
	for _, e := range h.store.Events(task.ID) {
		got = append(got, e.Event.EventName())
	}
	if want := []string{"TaskSubmitted", "TaskAdmitted", "TaskLeased"}; !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	// The same decision from the quota topic changes nothing.
	if err := h.app.AdmitTask(h.ctx, task.ID, 1, "cq-standard", nil); err != nil {
		t.Fatal(err)
	}
	if n := len(h.store.Events(task.ID)); n != 3 {
		t.Errorf("the repeated decision recorded %d events in all, want 3", n)
	}
}

// A stay the quota service does not admit at once (or cannot take) waits
// for its decision from the quota topic.
func TestTaskNotAdmittedAtCreationWaitsForTheQuotaTopic(t *testing.T) {
	for name, queueErr := range map[string]error{"not admitted": nil, "quota service unavailable": errors.New("unavailable")} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t).withAdmission()
			h.admission.ClusterQueue, h.admission.QueueErr = "cq-standard", queueErr
			task := h.create(user("t1"), spec("gpu", func(in *domain.SpecInput) { in.Queue = "tenant-low" }))
			waitFor(t, "the stay to be queued directly", func() bool { return len(h.admission.Queued()) == 1 })
			if got := h.claim("a1", "m1", 5); len(got) != 0 {
				t.Errorf("claim = %v, want nothing before the quota topic's decision", taskIDs(got))
			}
			if err := h.app.AdmitTask(h.ctx, task.ID, 1, "cq-standard", nil); err != nil {
				t.Fatal(err)
			}
			if got := h.claim("a1", "m1", 5); len(got) != 1 || got[0].ID != task.ID {
				t.Errorf("claim after the decision = %v, want %s", taskIDs(got), task.ID)
			}
		})
	}
}

// A task that held admission hands its end to the admission loop as it
// completes, and the admissions the loop answers with (the quota it freed
// let a waiting task in) are applied at once: a claim waiting for work is
// woken with the waiting task.
func TestCompletedTaskFreesItsQuotaAtOnce(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.ClaimRecheck = time.Hour }).withAdmission()
	h.admission.ClusterQueue = "cq-standard"
	gpu := func(in *domain.SpecInput) { in.Resources = map[string]string{"nvidia.com/gpu": "1"} }
	first, waiting := h.create(user("t1"), spec("first", gpu)), h.create(user("t1"), spec("waiting", gpu))
	if err := h.app.AdmitTask(h.ctx, first.ID, 1, "cq-standard", nil); err != nil {
		t.Fatal(err)
	}
	leased := h.claimOne("a1", "m1", first.ID)
	h.admission.mu.Lock()
	h.admission.FinishAdmits = []app.AdmissionDecision{{TaskID: waiting.ID, Epoch: 1, ClusterQueue: "cq-standard"}}
	h.admission.mu.Unlock()
	claimed := make(chan []domain.Task, 1)
	go func() {
		got, _, err := h.app.ClaimTasks(h.ctx, agent("a2"), app.ClaimRequest{AgentID: "a2", MachineID: "m2", Limit: 5, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		claimed <- got
	}()
	waitFor(t, "the claim to look for work", func() bool { return len(h.store.CallsOf("Claim")) > 1 })
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), first.ID, app.Completion{AgentID: "a1", AttemptID: leased.AttemptID}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-claimed:
		if len(got) != 1 || got[0].ID != waiting.ID {
			t.Fatalf("claim = %v, want %s admitted by the freed quota", taskIDs(got), waiting.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting claim was not woken by the admission")
	}
	if f := h.admission.Finished(); len(f) != 1 || f[0].ID != first.ID || f[0].Status != domain.StatusCompleted {
		t.Errorf("ends handed over = %+v, want %s completed", f, first.ID)
	}
	// A repeated completion records nothing and hands nothing over again.
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), first.ID, app.Completion{AgentID: "a1", AttemptID: leased.AttemptID}); err != nil {
		t.Fatal(err)
	}
	if f := h.admission.Finished(); len(f) != 1 {
		t.Errorf("a repeated completion handed the end over again: %d ends", len(f))
	}
}

func TestCreateTaskReturnsTheQuotaServicesRefusal(t *testing.T) {
	h := newHarness(t).withAdmission()
	refusal := errors.New("GU_QUOTA_CREATING")
	h.admission.Err = refusal
	_, err := h.app.CreateTasks(h.ctx, user("t1"), spec("gpu", func(in *domain.SpecInput) { in.Quota = "q1" }), "")
	wantErr(t, "quota refusal", err, refusal)
	if calls := h.store.CallsOf("Create"); len(calls) != 0 {
		t.Errorf("a refused task was stored: %v", calls)
	}
}

func TestCreateTaskWithoutQuotaServiceNeedsNoAdmission(t *testing.T) {
	h := newHarness(t)
	got := h.create(user("t1"), spec("gpu", func(in *domain.SpecInput) { in.Queue = "tenant-low" }))
	if got.ClusterQueue != "" || got.AwaitingAdmission() {
		t.Errorf("without a quota service a task waits for admission: %+v", got)
	}
}

func TestCreateTaskPassesTheStoresFailureOn(t *testing.T) {
	h := newHarness(t)
	h.store.FailOn("Create", app.ErrStopping)
	_, err := h.app.CreateTasks(h.ctx, user("t1"), spec("a"), "")
	wantErr(t, "store stopping", err, app.ErrStopping)
}

// Every record a client's request causes carries that client's address
// (the audit log's ip); the scheduler's own decisions carry none.
func TestEventsCarryTheCallersAddress(t *testing.T) {
	h := newHarness(t)
	task := h.create(user("t1"), spec("ip"))
	claimed, _, err := h.app.ClaimTasks(h.ctx, agent("agent-1"), app.ClaimRequest{AgentID: "agent-1", MachineID: "m1", Limit: 1})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if _, err := h.app.StartTask(h.ctx, agent("agent-1"), task.ID, "agent-1", claimed[0].AttemptID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.CancelTask(h.ctx, user("t1"), task.ID, "enough"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range h.store.Events(task.ID) {
		got = append(got, e.Event.EventName()+"@"+e.IP)
	}
	want := []string{"TaskSubmitted@10.0.0.1", "TaskLeased@10.0.1.1", "TaskStarted@10.0.1.1", "TaskCanceled@10.0.0.1"}
	if !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
}

// A task that depends on another and waits in a ClusterQueue is held out
// of the queue: the admission loop gets no stay for it until its
// dependency completed, so it never holds quota its dependency needs.
// The completion releases it at once (RunReleases); the sweeper would
// otherwise.
func TestTaskHeldForItsDependencyQueuesWhenItCompletes(t *testing.T) {
	h := newHarness(t).withAdmission()
	h.admission.ClusterQueue = "cq-standard"
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	go h.app.RunReleases(ctx)
	gpu := func(in *domain.SpecInput) { in.Resources = map[string]string{"nvidia.com/gpu": "1"} }
	parent := h.create(user("t1"), spec("parent", gpu))
	child := h.create(user("t1"), spec("child", gpu, func(in *domain.SpecInput) { in.DependsOn = []string{parent.ID} }))
	if !child.HeldForDependencies || child.AdmissionEpoch != 0 {
		t.Fatalf("child = %+v: want held for its dependency", child)
	}
	waitFor(t, "the parent's stay", func() bool { return len(h.admission.Queued()) == 1 })
	if err := h.app.AdmitTask(h.ctx, child.ID, 0, "cq-standard", nil); err != nil {
		t.Fatal(err)
	}
	if h.get(child.ID).Admitted {
		t.Fatal("a decision admitted the held child")
	}
	if n, err := h.app.ReleaseHeld(h.ctx); err != nil || n != 0 {
		t.Fatalf("release before the parent completed: %d, %v", n, err)
	}
	if q := h.admission.Queued(); len(q) != 1 || q[0].ID != parent.ID {
		t.Fatalf("stays = %v, want only the parent's", taskIDs(q))
	}

	if err := h.app.AdmitTask(h.ctx, parent.ID, 1, "cq-standard", nil); err != nil {
		t.Fatal(err)
	}
	p := h.claimOne("a1", "m1", parent.ID)
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), p.ID, app.Completion{AgentID: "a1", AttemptID: p.AttemptID}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child's stay", func() bool { return len(h.admission.Queued()) == 2 })
	c := h.get(child.ID)
	if q := h.admission.Queued()[1]; q.ID != child.ID || q.AdmissionEpoch != c.Version || q.HeldForDependencies {
		t.Fatalf("second stay = %+v, want the child's at version %d", q, c.Version)
	}
	if got := h.eventNames(child.ID); got != "[TaskSubmitted TaskDependenciesMet]" {
		t.Errorf("child's events = %s", got)
	}
	if err := h.app.AdmitTask(h.ctx, child.ID, c.Version, "cq-standard", nil); err != nil {
		t.Fatal(err)
	}
	h.claimOne("a1", "m1", child.ID)

	// Released once, however often a release runs.
	if n, err := h.app.ReleaseHeld(h.ctx); err != nil || n != 0 {
		t.Errorf("a second release: %d, %v", n, err)
	}
}

// A held task whose dependency had completed before it was created is
// released right after its creation; one left held by a crash is
// released by the sweeper.
func TestHeldTaskWhoseDependencyIsDoneIsReleased(t *testing.T) {
	h := newHarness(t).withAdmission()
	h.admission.ClusterQueue = "cq-standard"
	gpu := func(in *domain.SpecInput) { in.Resources = map[string]string{"nvidia.com/gpu": "1"} }
	parent := h.create(user("t1"), spec("parent", gpu))
	if err := h.app.AdmitTask(h.ctx, parent.ID, 1, "cq-standard", nil); err != nil {
		t.Fatal(err)
	}
	p := h.claimOne("a1", "m1", parent.ID)
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), p.ID, app.Completion{AgentID: "a1", AttemptID: p.AttemptID}); err != nil {
		t.Fatal(err)
	}
	// No RunReleases here: as after a crash, only the sweeper is left.
	child := h.create(user("t1"), spec("child", gpu, func(in *domain.SpecInput) { in.DependsOn = []string{parent.ID} }))
	if !child.HeldForDependencies {
		t.Fatalf("child = %+v: want held until released", child)
	}
	if rep := h.sweep(); rep.Released != 1 {
		t.Fatalf("sweep = %+v, want the child released", rep)
	}
	if c := h.get(child.ID); c.HeldForDependencies || c.AdmissionEpoch != c.Version {
		t.Errorf("child after the sweep = %+v", c)
	}
	waitFor(t, "the child's stay", func() bool {
		// Each stay is handed over on a goroutine of its own: in any order.
		return slices.ContainsFunc(h.admission.Queued(), func(q domain.Task) bool { return q.ID == child.ID })
	})
}

// A held task another replica created is found by the periodic check
// (RunReleases), even though this replica completes its dependency
// without knowing any task is held.
func TestHeldTaskOfAnotherReplicaIsReleased(t *testing.T) {
	h := newHarness(t).withAdmission()
	h.admission.ClusterQueue = "cq-standard"
	other := app.New(h.store.Stores(), h.objects, h.clock.Now, app.NewHub(), app.Config{}, nil)
	other.SetAdmission(h.admission)
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	go h.app.RunReleases(ctx)
	gpu := func(in *domain.SpecInput) { in.Resources = map[string]string{"nvidia.com/gpu": "1"} }
	parent := h.create(user("t1"), spec("parent", gpu))
	children, err := other.CreateTasks(h.ctx, user("t1"), spec("child", gpu, func(in *domain.SpecInput) { in.DependsOn = []string{parent.ID} }), "")
	if err != nil || len(children) != 1 || !children[0].HeldForDependencies {
		t.Fatalf("child created on the other replica: %+v, %v", children, err)
	}
	if err := h.app.AdmitTask(h.ctx, parent.ID, 1, "cq-standard", nil); err != nil {
		t.Fatal(err)
	}
	p := h.claimOne("a1", "m1", parent.ID)
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), p.ID, app.Completion{AgentID: "a1", AttemptID: p.AttemptID}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child's release", func() bool { return !h.get(children[0].ID).HeldForDependencies })
}
