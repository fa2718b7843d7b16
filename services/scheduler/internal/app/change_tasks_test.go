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

func TestCancelTask(t *testing.T) {
	h := newHarness(t)
	pending := h.create(user("t1"), spec("pending"))
	got, err := h.app.CancelTask(h.ctx, user("t1"), pending.ID, "not needed")
	if err != nil || got.Status != domain.StatusCancelled || got.Error != "cancelled: not needed" {
		t.Errorf("cancel of a pending task = %+v, %v", got, err)
	}
	_, err = h.app.CancelTask(h.ctx, user("t1"), pending.ID, "")
	wantErr(t, "cancel of a cancelled task (30002)", err, domain.ErrImmutable)

	other := h.create(user("t1"), spec("other"))
	_, err = h.app.CancelTask(h.ctx, user("t2"), other.ID, "")
	wantErr(t, "cancel of another tenant's task (30004)", err, domain.ErrNotFound)
	h.wantStatus(other.ID, domain.StatusPending)
	if _, err := h.app.CancelTask(h.ctx, admin, other.ID, ""); err != nil {
		t.Errorf("an admin's cancel: %v", err)
	}

	// A running attempt is told to stop at its agent's next heartbeat.
	x := h.running("a1", "m1", spec("running"))
	if _, err := h.app.CancelTask(h.ctx, user("t1"), x.ID, ""); err != nil {
		t.Fatal(err)
	}
	answer, err := h.app.SendHeartbeat(h.ctx, agent("a1"), app.Heartbeat{AgentID: "a1", MachineID: "m1", AttemptIDs: []string{x.AttemptID}})
	stops := answer.Stops
	if err != nil || len(stops) != 1 || stops[0].Reason != "cancelled" || stops[0].TaskID != x.ID {
		t.Errorf("stops after a cancel = %+v, %v", stops, err)
	}
}

func TestRetryTask(t *testing.T) {
	h := newHarness(t)
	x := h.running("a1", "m1", spec("a", func(in *domain.SpecInput) { in.MaxRetries = intp(0) }))
	_, err := h.app.RetryTask(h.ctx, user("t1"), x.ID)
	wantErr(t, "retry of a running task (30002)", err, domain.ErrImmutable)
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID, ExitCode: 1}); err != nil {
		t.Fatal(err)
	}
	h.wantStatus(x.ID, domain.StatusFailed)
	_, err = h.app.RetryTask(h.ctx, user("t2"), x.ID)
	wantErr(t, "retry of another tenant's task", err, domain.ErrNotFound)
	got, err := h.app.RetryTask(h.ctx, user("t1"), x.ID)
	if err != nil || got.Status != domain.StatusPending || !got.RetryAt.Equal(h.clock.Now()) {
		t.Errorf("retry = %+v, %v", got, err)
	}
	if claimed := h.claim("a1", "m1", 1); len(claimed) != 1 || claimed[0].ID != x.ID {
		t.Error("a retried task is not claimable at once")
	}
	cancelled := h.create(user("t1"), spec("c"))
	if _, err := h.app.CancelTask(h.ctx, user("t1"), cancelled.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got, err := h.app.RetryTask(h.ctx, user("t1"), cancelled.ID); err != nil || got.Status != domain.StatusPending {
		t.Errorf("retry of a cancelled task = %+v, %v", got, err)
	}
}

// groupMembers is a recording app.GroupMembers: tasks of the group ids in
// groups are its members; a member's retry answers err, or the task
// pending.
type groupMembers struct {
	groups map[string]bool
	err    error
	asked  []string
}

func (g *groupMembers) RetryMember(_ context.Context, _ app.Caller, t domain.Task) (domain.Task, bool, error) {
	g.asked = append(g.asked, t.ID)
	if !g.groups[t.Spec.GroupID] {
		return domain.Task{}, false, nil
	}
	if g.err != nil {
		return domain.Task{}, true, g.err
	}
	t.Status = domain.StatusPending
	return t, true, nil
}

func (g *groupMembers) IsMember(_ context.Context, _ app.Caller, t domain.Task) (bool, error) {
	g.asked = append(g.asked, t.ID)
	return g.groups[t.Spec.GroupID], g.err
}

// A member's dependencies are its group's: an update that changes them is
// 30005 and changes nothing, one that leaves them is an update as any;
// the dependencies of a task whose group_id is no task group's, or that
// has none, change as they are given.
func TestUpdateTaskOfAGroupMember(t *testing.T) {
	h := newHarness(t)
	groups := &groupMembers{groups: map[string]bool{"g-1": true}}
	h.app.SetGroups(groups)
	before := h.create(user("t1"), spec("before"))
	inGroup := func(name, group string) domain.Task {
		return h.create(user("t1"), spec(name, func(in *domain.SpecInput) { in.GroupID = group; in.DependsOn = []string{before.ID} }))
	}
	member := inGroup("m", "g-1")
	for _, in := range []domain.SpecInput{
		{DependsOn: []string{}},                     // cleared
		{DependsOn: []string{before.ID, member.ID}}, // changed
		{ParentID: "p-other"},                       // a parent is a dependency
	} {
		var cleared []string
		if in.DependsOn != nil && len(in.DependsOn) == 0 {
			cleared = []string{"depends_on"}
		}
		if err := in.Clear(cleared); err != nil {
			t.Fatal(err)
		}
		_, err := h.app.UpdateTask(h.ctx, user("t1"), member.ID, in)
		var inv *domain.InvalidError
		if !errors.As(err, &inv) || inv.Field != "depends_on" {
			t.Errorf("update %+v of a member = %v, want 30005 naming depends_on", in, err)
		}
	}
	if got := h.get(member.ID); !slices.Equal(got.Spec.DependsOn, []string{before.ID}) || got.Version != member.Version {
		t.Fatalf("a refused update changed the member: %+v", got)
	}
	if got, err := h.app.UpdateTask(h.ctx, user("t1"), member.ID, domain.SpecInput{Name: "renamed"}); err != nil ||
		got.Spec.Name != "renamed" || !slices.Equal(got.Spec.DependsOn, []string{before.ID}) {
		t.Fatalf("an update leaving a member's dependencies = %+v, %v", got, err)
	}
	for _, x := range []domain.Task{inGroup("f", "fan-1"), inGroup("p", "")} {
		in := domain.SpecInput{DependsOn: []string{}}
		if err := in.Clear([]string{"depends_on"}); err != nil {
			t.Fatal(err)
		}
		if got, err := h.app.UpdateTask(h.ctx, user("t1"), x.ID, in); err != nil || len(got.Spec.DependsOn) != 0 {
			t.Errorf("clearing the dependencies of %s (group %q) = %+v, %v", x.ID, x.Spec.GroupID, got, err)
		}
	}
}

// A member of a task group is retried through its group, which decides;
// a task whose group_id is no task group's (a fan-out's, the client's own)
// is retried as any task, and so is a task without one, which the groups
// are not asked about.
func TestRetryTaskOfAGroupMember(t *testing.T) {
	h := newHarness(t)
	groups := &groupMembers{groups: map[string]bool{"g-1": true}}
	h.app.SetGroups(groups)
	inGroup := func(name, group string) domain.Task {
		x := h.create(user("t1"), spec(name, func(in *domain.SpecInput) { in.GroupID = group }))
		if _, err := h.app.CancelTask(h.ctx, user("t1"), x.ID, ""); err != nil {
			t.Fatal(err)
		}
		return x
	}
	member := inGroup("m", "g-1")
	got, err := h.app.RetryTask(h.ctx, user("t1"), member.ID)
	if err != nil || got.Status != domain.StatusPending || !slices.Equal(groups.asked, []string{member.ID}) {
		t.Fatalf("retry of a member = %+v, %v (asked %v)", got, err, groups.asked)
	}
	h.wantStatus(member.ID, domain.StatusCancelled) // the group's to retry, not RetryTask's
	groups.err = fmt.Errorf("%w: the task's group g-1 has ended (failed)", domain.ErrImmutable)
	_, err = h.app.RetryTask(h.ctx, user("t1"), member.ID)
	wantErr(t, "retry of a member of an ended group (30002)", err, domain.ErrImmutable)
	h.wantStatus(member.ID, domain.StatusCancelled)

	fan := inGroup("f", "fan-1")
	if got, err := h.app.RetryTask(h.ctx, user("t1"), fan.ID); err != nil || got.Status != domain.StatusPending {
		t.Fatalf("retry of a fan-out's task = %+v, %v", got, err)
	}
	plain := inGroup("p", "")
	asked := len(groups.asked)
	if got, err := h.app.RetryTask(h.ctx, user("t1"), plain.ID); err != nil || got.Status != domain.StatusPending || len(groups.asked) != asked {
		t.Fatalf("retry of a task of no group = %+v, %v (groups asked %v)", got, err, groups.asked)
	}
	_, err = h.app.RetryTask(h.ctx, user("t2"), member.ID)
	wantErr(t, "retry of another tenant's member", err, domain.ErrNotFound)
	if len(groups.asked) != asked {
		t.Fatalf("another tenant's retry reached the group: %v", groups.asked)
	}
}

func TestDeleteTask(t *testing.T) {
	h := newHarness(t)
	y := h.create(user("t1"), spec("b"))
	wantErr(t, "delete of another tenant's task", second(h.app.DeleteTask(h.ctx, user("t2"), y.ID)), domain.ErrNotFound)
	if _, err := h.app.DeleteTask(h.ctx, user("t1"), y.ID); err != nil {
		t.Fatal(err)
	}
	_, err := h.app.GetTask(h.ctx, user("t1"), y.ID)
	wantErr(t, "get of a deleted task", err, domain.ErrNotFound)
	wantErr(t, "delete again", second(h.app.DeleteTask(h.ctx, user("t1"), y.ID)), domain.ErrNotFound)
}

// Deleting a leased task cancels it in the same decision: its attempt is
// told to stop at the next heartbeat, its late outcome changes nothing,
// and the task is gone from reads.
func TestDeleteLeasedTask(t *testing.T) {
	h := newHarness(t)
	running := h.running("a1", "m1", spec("running"))
	assigned := h.claimOne("a1", "m1", h.create(user("t1"), spec("assigned")).ID)
	for _, x := range []domain.Task{running, assigned} {
		if _, err := h.app.DeleteTask(h.ctx, user("t1"), x.ID); err != nil {
			t.Fatalf("delete of a %s task: %v", x.Status, err)
		}
		_, err := h.app.GetTask(h.ctx, user("t1"), x.ID)
		wantErr(t, "get of a deleted "+string(x.Status)+" task", err, domain.ErrNotFound)
		stored := h.get(x.ID)
		if !stored.Deleted || stored.Status != domain.StatusCancelled || stored.Error != "cancelled: deleted" {
			t.Errorf("a deleted %s task is stored %s (deleted %v, error %q), want a cancelled tombstone", x.Status, stored.Status, stored.Deleted, stored.Error)
		}
	}
	answer, err := h.app.SendHeartbeat(h.ctx, agent("a1"), app.Heartbeat{AgentID: "a1", MachineID: "m1", AttemptIDs: []string{running.AttemptID, assigned.AttemptID}})
	stops := answer.Stops
	if err != nil || len(stops) != 2 || stops[0].Reason != "deleted" || stops[0].TaskID != running.ID || stops[1].TaskID != assigned.ID {
		t.Errorf("stops after deleting = %+v, %v", stops, err)
	}
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), running.ID, app.Completion{AgentID: "a1", AttemptID: running.AttemptID, ExitCode: 0}); err == nil {
		t.Error("the deleted task's attempt completed it")
	}
	if got := h.get(running.ID); got.Status != domain.StatusCancelled {
		t.Errorf("after its attempt's late outcome the task is %s, want it left cancelled", got.Status)
	}
}

func TestUpdateTask(t *testing.T) {
	h := newHarness(t)
	x := h.create(user("t1"), spec("a", func(in *domain.SpecInput) { in.Args = []string{"x"}; in.Labels = []string{"gpu"} }))
	got, err := h.app.UpdateTask(h.ctx, user("t1"), x.ID, domain.SpecInput{Priority: intp(1), Name: "renamed"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Priority != 1 || got.Spec.Name != "renamed" || got.Spec.Command != "true" ||
		!slices.Equal(got.Spec.Args, []string{"x"}) || !slices.Equal(got.Spec.Labels, []string{"gpu"}) {
		t.Errorf("updated spec %+v: fields left out must keep their value", got.Spec)
	}
	// A new one-word command keeps the args; a new command line brings its
	// own; a line with shell syntax is refused and changes nothing.
	if got, err = h.app.UpdateTask(h.ctx, user("t1"), x.ID, domain.SpecInput{Command: "echo"}); err != nil ||
		got.Spec.Command != "echo" || !slices.Equal(got.Spec.Args, []string{"x"}) {
		t.Errorf("one-word command: %q %q, %v", got.Spec.Command, got.Spec.Args, err)
	}
	if got, err = h.app.UpdateTask(h.ctx, user("t1"), x.ID, domain.SpecInput{Command: "printf '%s' 'a b'"}); err != nil ||
		got.Spec.Command != "printf" || !slices.Equal(got.Spec.Args, []string{"%s", "a b"}) {
		t.Errorf("command line: %q %q, %v", got.Spec.Command, got.Spec.Args, err)
	}
	_, err = h.app.UpdateTask(h.ctx, user("t1"), x.ID, domain.SpecInput{Command: "echo a | wc"})
	wantInvalid(t, "update to a pipe", err, "command")
	if got := h.get(x.ID); got.Spec.Command != "printf" {
		t.Errorf("a refused update changed the task: %+v", got.Spec)
	}
	_, err = h.app.UpdateTask(h.ctx, user("t1"), x.ID, domain.SpecInput{Priority: intp(0)})
	wantInvalid(t, "update to priority 0", err, "priority")
	_, err = h.app.UpdateTask(h.ctx, user("t2"), x.ID, domain.SpecInput{Priority: intp(2)})
	wantErr(t, "update of another tenant's task", err, domain.ErrNotFound)
	h.claimOne("a1", "m1", x.ID, "gpu")
	_, err = h.app.UpdateTask(h.ctx, user("t1"), x.ID, domain.SpecInput{Priority: intp(2)})
	wantErr(t, "update of a leased task", err, domain.ErrImmutable)
	if got := h.get(x.ID); got.Spec.Priority != 1 {
		t.Errorf("a refused update changed the task: %+v", got.Spec)
	}
}

// An update keeps what it leaves out — the artifacts, the checkpoint
// setting, the address a fan-out targeted — and works on a broadcast's task.
func TestUpdateTaskKeepsItsPlacementAndFiles(t *testing.T) {
	h := newHarness(t)
	a := app.Agent{AgentID: "a1", MachineID: "m1", LastHeartbeatAt: h.clock.Now(), LostAfter: h.clock.Now().Add(time.Minute)}
	if _, err := h.store.Heartbeat(h.ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	coop := h.create(user("t1"), spec("coop", func(in *domain.SpecInput) {
		in.Artifacts, in.Checkpoint = []string{"out/*.pt"}, new(true)
	}))
	got, err := h.app.UpdateTask(h.ctx, user("t1"), coop.ID, domain.SpecInput{Priority: intp(2)})
	if err != nil || !got.Spec.Checkpoint || !slices.Equal(got.Spec.Artifacts, []string{"out/*.pt"}) {
		t.Errorf("a priority update dropped the checkpoint or the artifacts: %+v, %v", got.Spec, err)
	}
	byIP, err := h.app.CreateTasks(h.ctx, user("t1"), spec("ip", func(in *domain.SpecInput) { in.TargetIPs = []string{"10.1.1.1"} }), "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.app.UpdateTask(h.ctx, user("t1"), byIP[0].ID, domain.SpecInput{Name: "renamed"}); err != nil || got.Spec.TargetIP != "10.1.1.1" {
		t.Errorf("an update dropped the target address: %+v, %v", got.Spec, err)
	}
	_, err = h.app.UpdateTask(h.ctx, user("t1"), byIP[0].ID, domain.SpecInput{TargetMachines: []string{"m1", "m2"}})
	wantInvalid(t, "targets in an update", err, "targets")
	bc, err := h.app.CreateTasks(h.ctx, user("t1"), spec("bc", func(in *domain.SpecInput) { in.Mode = domain.ModeBroadcast }), "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.app.UpdateTask(h.ctx, user("t1"), bc[0].ID, domain.SpecInput{Priority: intp(3)}); err != nil ||
		got.Spec.Priority != 3 || got.Spec.Mode != domain.ModeBroadcast || got.Spec.MachineID != "m1" {
		t.Errorf("update of a broadcast's task: %+v, %v", got.Spec, err)
	}
}

// An update's new dependencies must exist, as a create's must, and be
// older than the task, so that no update can close a cycle of tasks that
// would all wait for each other.
func TestUpdateTaskDependencies(t *testing.T) {
	h := newHarness(t)
	first := h.create(user("t1"), spec("first"))
	h.clock.Advance(time.Millisecond)
	second := h.create(user("t1"), spec("second"))
	other := h.create(user("t2"), spec("other's"))
	got, err := h.app.UpdateTask(h.ctx, user("t1"), second.ID, domain.SpecInput{DependsOn: []string{first.ID}})
	if err != nil || !slices.Equal(got.Spec.DependsOn, []string{first.ID}) {
		t.Fatalf("second depends on first: %+v, %v", got.Spec.DependsOn, err)
	}
	for name, deps := range map[string][]string{
		"a cycle":               {second.ID},
		"itself":                {first.ID},
		"an unknown task":       {"00000000-0000-0000-0000-000000000000"},
		"another tenant's task": {other.ID},
	} {
		_, err := h.app.UpdateTask(h.ctx, user("t1"), first.ID, domain.SpecInput{DependsOn: deps})
		wantInvalid(t, "depending on "+name, err, "depends_on")
	}
	if got := h.get(first.ID); len(got.Spec.DependsOn) != 0 {
		t.Errorf("a refused update changed the dependencies: %v", got.Spec.DependsOn)
	}
	// Dependencies the task has already are not checked again.
	if _, err := h.app.UpdateTask(h.ctx, user("t1"), second.ID, domain.SpecInput{DependsOn: []string{first.ID}, Priority: intp(2)}); err != nil {
		t.Errorf("the same dependencies again: %v", err)
	}
}

func TestUpdateTaskResolvesItsQueueAgain(t *testing.T) {
	h := newHarness(t).withAdmission()
	h.admission.ClusterQueue = "cq-low"
	x := h.create(user("t1"), spec("a", func(in *domain.SpecInput) { in.Queue = "low" }))
	h.admission.ClusterQueue = "cq-high"
	got, err := h.app.UpdateTask(h.ctx, user("t1"), x.ID, domain.SpecInput{Queue: "high"})
	if err != nil {
		t.Fatal(err)
	}
	calls := h.admission.Calls()
	if len(calls) != 2 || calls[1].Queue != "high" || got.ClusterQueue != "cq-high" || !got.AwaitingAdmission() {
		t.Errorf("update: task %+v, resolve calls %+v", got, calls)
	}
	refusal := errors.New("unknown queue")
	h.admission.Err = refusal
	_, err = h.app.UpdateTask(h.ctx, user("t1"), x.ID, domain.SpecInput{Queue: "nope"})
	wantErr(t, "update to a refused queue", err, refusal)
	if h.get(x.ID).Spec.Queue != "high" {
		t.Error("a refused update changed the queue")
	}
}

func TestAdmissionDecisions(t *testing.T) {
	h := newHarness(t).withAdmission()
	h.admission.ClusterQueue = "cq1"
	x := h.create(user("t1"), spec("a", func(in *domain.SpecInput) { in.Queue = "q" }))
	if got := h.claim("a1", "m1", 1); len(got) != 0 {
		t.Fatal("a task awaiting admission was claimed")
	}
	work := h.hub.Wait(app.ClaimWaiter{AgentID: "a1", Tenant: "*", Machine: "m1"})
	defer work.Stop()
	if err := h.app.AdmitTask(h.ctx, x.ID, x.AdmissionEpoch+1, "cq1", nil); err != nil {
		t.Fatal(err)
	}
	woken(work) // what a stale decision woke is not the admission's wake
	if h.get(x.ID).Admitted {
		t.Error("a decision about another stay in the queue admitted the task")
	}
	if err := h.app.AdmitTask(h.ctx, x.ID, x.AdmissionEpoch, "cq1", map[string]string{"gpu": "a100"}); err != nil {
		t.Fatal(err)
	}
	if got := h.get(x.ID); !got.Admitted || got.Flavors["gpu"] != "a100" {
		t.Errorf("admitted task %+v", got)
	}
	select {
	case <-work.Woken():
	default:
		t.Error("an admission did not wake waiting claims")
	}
	y := h.claimOne("a1", "m1", x.ID)
	if err := h.app.EvictTask(h.ctx, x.ID, x.AdmissionEpoch, "other-task", "quota"); err != nil {
		t.Fatal(err)
	}
	if got := h.get(x.ID); got.Status != domain.StatusPreempted || got.PreemptedBy != "other-task" || got.AttemptID != y.AttemptID {
		t.Errorf("evicted task %+v", got)
	}
	// Decisions about tasks that are gone change nothing and are done.
	if err := h.app.AdmitTask(h.ctx, "gone", 1, "cq1", nil); err != nil {
		t.Errorf("admit of an unknown task: %v", err)
	}
	if err := h.app.EvictTask(h.ctx, "gone", 1, "x", ""); err != nil {
		t.Errorf("evict of an unknown task: %v", err)
	}
	h.store.FailOn("Mutate", app.ErrStopping)
	wantErr(t, "admit while stopping", h.app.AdmitTask(h.ctx, x.ID, 9, "cq1", nil), app.ErrStopping)
}

func TestChangeTaskDecidesOnTheLockedTask(t *testing.T) {
	h := newHarness(t)
	x := h.create(user("t1"), spec("a"))
	var saw domain.Task
	var at time.Time
	got, err := h.app.ChangeTask(h.ctx, user("t1"), x.ID, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		saw, at = t, now
		return t.Expire(now, "video")
	})
	if err != nil || !got.Deleted || saw.ID != x.ID || !at.Equal(h.clock.Now()) {
		t.Errorf("change = %+v, %v (decide saw %s at %s)", got, err, saw.ID, at)
	}
	_, err = h.app.ChangeTask(h.ctx, user("t1"), x.ID, func(domain.Task, time.Time) ([]domain.Record, error) { return nil, nil })
	wantErr(t, "change of a removed task", err, domain.ErrNotFound)
	y := h.create(user("t2"), spec("b"))
	_, err = h.app.ChangeTask(h.ctx, user("t1"), y.ID, func(domain.Task, time.Time) ([]domain.Record, error) { return nil, nil })
	wantErr(t, "change of another tenant's task", err, domain.ErrNotFound)
}
