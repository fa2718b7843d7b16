package app_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	oapp "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app/apptest"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// tasks is the scheduler's task use cases as orchestration sees them: it
// records template runs and answers queue lookups from a table.
type tasks struct {
	mu      sync.Mutex
	created []task.SpecInput
	queues  map[string]string // queue name → cluster queue
	resolve int
	// existing are the tasks ListTasks lists, by group_id and tenant, two
	// to a page.
	existing []task.Task
	lists    int
}

func (f *tasks) ListTasks(_ context.Context, c sched.Caller, flt sched.ListFilter) ([]task.Task, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var match []task.Task
	for _, t := range f.existing {
		if t.Spec.GroupID == flt.Group && (c.Tenant == "*" || t.TenantID == c.Tenant) {
			match = append(match, t)
		}
	}
	from := 0
	if flt.PageToken != "" {
		from, _ = strconv.Atoi(flt.PageToken)
	}
	to := min(from+2, len(match))
	next := ""
	if to < len(match) {
		next = strconv.Itoa(to)
	}
	return match[from:to], next, nil
}

func (f *tasks) CreateTasks(_ context.Context, c sched.Caller, in task.SpecInput, _ string) ([]task.Task, error) {
	spec, err := task.NormalizeSpec(in)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, in)
	n := max(1, len(in.TargetMachines))
	out := make([]task.Task, n)
	for i := range out {
		out[i] = task.Task{ID: fmt.Sprintf("task-%d-%d", len(f.created), i), TenantID: c.Tenant, Spec: spec}
	}
	return out, nil
}

func (f *tasks) ResolveQueue(_ context.Context, _ sched.Caller, spec task.Spec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if spec.Queue == "" {
		return "", nil
	}
	f.resolve++
	cq, ok := f.queues[spec.Queue]
	if !ok {
		return "", &task.InvalidError{Field: "queue", Reason: fmt.Sprintf("no queue %q", spec.Queue)}
	}
	return cq, nil
}

// hub stands in for the scheduler's hub: a member task's change touches
// its group, as the scheduler wires it.
type hub struct {
	app            *oapp.App
	changed, woken atomic.Int64
}

func (h *hub) WakeClaimers() { h.woken.Add(1) }

func (h *hub) Changed(t task.Task) {
	h.changed.Add(1)
	if h.app != nil && t.Spec.GroupID != "" {
		h.app.Touch(t.Spec.GroupID)
	}
}

// lock is always free.
type lock struct{}

func (lock) TryLock(context.Context) (sched.HeldLock, bool, error) { return held{}, true, nil }

type held struct{}

func (held) Alive(context.Context) error { return nil }
func (held) Release()                    {}

type world struct {
	t     *testing.T
	store *apptest.Store
	tasks *tasks
	hub   *hub
	clock *clocktest.Fixed
	app   *oapp.App
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, store: apptest.NewStore(), tasks: &tasks{queues: map[string]string{"gpu": "cq-gpu"}}, hub: &hub{}, clock: clocktest.NewFixed(apptest.T0)}
	w.app = oapp.New(oapp.Deps{Groups: w.store, Templates: w.store.Templates(), Tasks: w.tasks, Events: w.hub, Lock: lock{}},
		w.clock.Now, oapp.Config{Reconcile: 5 * time.Millisecond, Workers: 2}, nil)
	w.hub.app = w.app
	return w
}

// run starts the process manager until the test ends.
func (w *world) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.app.RunManager(ctx) }()
	w.t.Cleanup(func() { cancel(); <-done })
}

var alice = sched.Caller{Tenant: "tenant-a", Subject: "key-a"}

func member(id string, deps ...string) oapp.MemberRequest {
	return oapp.MemberRequest{ID: id, Spec: task.SpecInput{Name: id, Command: "true", DependsOn: deps}}
}

// move plays an agent on a member's task and tells the hub, as the task
// use cases do.
func (w *world) move(groupID, key string, to task.Status) {
	w.t.Helper()
	st, err := w.app.GetGroup(context.Background(), alice, groupID)
	if err != nil {
		w.t.Fatal(err)
	}
	t, err := w.store.ChangeTask(st.Members[key].TaskID, func(tk task.Task) []task.Record { return apptest.MoveTask(tk, to, w.clock.Now()) })
	if err != nil {
		w.t.Fatal(err)
	}
	w.hub.Changed(t)
}

func (w *world) waitGroup(id string, what string, cond func(orch.State) bool) orch.State {
	w.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := w.app.GetGroup(context.Background(), alice, id)
		if err == nil && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out waiting for %s: %+v, %v", what, st.Group, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The process manager moves a dag on as its members' tasks change: a
// failed branch cancels its descendant, the other goes on, the group ends
// failed — each step triggered by the hub, none by a timer.
func TestManagerMovesADAGOn(t *testing.T) {
	w := newWorld(t)
	w.run()
	st, err := w.app.CreateGroup(context.Background(), alice, oapp.GroupRequest{Mode: "dag", Start: true, Tasks: []oapp.MemberRequest{
		member("root"), member("b1", "root"), member("b2", "b1"), member("c1", "root")}})
	if err != nil {
		t.Fatal(err)
	}
	id := st.Group.ID
	if w.hub.woken.Load() != 1 || w.hub.changed.Load() != 0 || len(w.store.Tasks(id)) != 4 {
		t.Fatalf("four new tasks woke the claims %d times (%d changes), %d stored", w.hub.woken.Load(), w.hub.changed.Load(), len(w.store.Tasks(id)))
	}
	w.move(id, "root", task.StatusCompleted)
	w.move(id, "b1", task.StatusFailed)
	w.waitGroup(id, "b2 cancelled", func(s orch.State) bool { return s.Members["b2"].Status == task.StatusCancelled })
	if s, _ := w.app.GetGroup(context.Background(), alice, id); s.Group.Status != orch.StatusRunning {
		t.Fatalf("the group ended before c1: %+v", s.Group)
	}
	w.move(id, "c1", task.StatusCompleted)
	done := w.waitGroup(id, "the group to end", func(s orch.State) bool { return s.Group.Status.Final() })
	if done.Group.Status != orch.StatusFailed || !slices.Equal(done.Group.FailedMembers, []string{"b1"}) {
		t.Fatalf("group = %+v", done.Group)
	}
}

// A repeat waiting for interval_sec needs no member change: the reconcile
// finds it due once the time has come (a restarted scheduler has no timer).
func TestManagerStartsSpacedRunsWhenDue(t *testing.T) {
	w := newWorld(t)
	st, err := w.app.CreateGroup(context.Background(), alice, oapp.GroupRequest{Start: true, Repeat: &oapp.RepeatRequest{
		RepeatInput: orch.RepeatInput{Count: 3, Parallel: ptr(3), IntervalSec: ptr(60), Spec: task.SpecInput{Name: "r", Command: "true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := st.Group.ID
	w.run()
	w.move(id, "run-1", task.StatusRunning)
	w.waitGroup(id, "run-1 seen running", func(s orch.State) bool { return s.Members["run-1"].Status == task.StatusRunning })
	if n := len(w.store.Tasks(id)); n != 1 {
		t.Fatalf("%d runs before the interval", n)
	}
	w.clock.Advance(60 * time.Second)
	w.waitGroup(id, "run-2", func(s orch.State) bool { _, ok := s.Members["run-2"]; return ok })
}

// A member task that changed without a signal (the replica that changed it
// died) is found by the reconcile.
func TestManagerReconcilesMissedChanges(t *testing.T) {
	w := newWorld(t)
	st, err := w.app.CreateGroup(context.Background(), alice, oapp.GroupRequest{Mode: "parallel", Start: true,
		Tasks: []oapp.MemberRequest{member("a")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.ChangeTask(st.Members["a"].TaskID, func(tk task.Task) []task.Record {
		return apptest.MoveTask(tk, task.StatusCompleted, w.clock.Now())
	}); err != nil {
		t.Fatal(err)
	}
	w.run()
	w.waitGroup(st.Group.ID, "completed", func(s orch.State) bool { return s.Group.Status == orch.StatusCompleted })
	if len(w.store.CallsOf("Due")) == 0 {
		t.Fatal("the reconcile never asked the store")
	}
}

func ptr(v int) *int { return &v }

func TestCreateGroupRefusals(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	tpl := orch.Template{ID: "train", Name: "train", Command: "python", Args: []string{"--model={{model}}"},
		Variables: []orch.Var{{Name: "model", Type: orch.VarSelect, Required: true, Options: []string{"a", "b"}}}}
	if _, err := w.app.CreateTemplate(ctx, alice, tpl); err != nil {
		t.Fatal(err)
	}
	withTemplate := func(vars map[string]any, spec task.SpecInput) oapp.GroupRequest {
		return oapp.GroupRequest{Mode: "parallel", Start: true, Tasks: []oapp.MemberRequest{{ID: "m", TemplateID: "train", Variables: vars, Spec: spec}}}
	}
	tests := []struct {
		name   string
		caller sched.Caller
		req    oapp.GroupRequest
		want   error
		field  string
	}{
		{"operator", sched.Caller{Tenant: "*", Subject: "ops"}, oapp.GroupRequest{Tasks: []oapp.MemberRequest{member("a")}}, sched.ErrForbidden, ""},
		{"unknown template", alice, oapp.GroupRequest{Tasks: []oapp.MemberRequest{{TemplateID: "nope"}}}, task.ErrInvalid, "tasks[0].template_id"},
		{"bad variable", alice, withTemplate(map[string]any{"model": "c"}, task.SpecInput{}), task.ErrInvalid, "tasks[0].variables.model"},
		{"missing variable", alice, withTemplate(nil, task.SpecInput{}), task.ErrInvalid, "tasks[0].variables.model"},
		{"type override", alice, withTemplate(map[string]any{"model": "a"}, task.SpecInput{Type: "script"}), task.ErrInvalid, "tasks[0].type"},
		{"variables without template", alice, oapp.GroupRequest{Tasks: []oapp.MemberRequest{{ID: "x", Spec: task.SpecInput{Name: "x", Command: "c"},
			Variables: map[string]any{"a": "b"}}}}, task.ErrInvalid, "tasks[0].variables"},
		{"unknown queue", alice, oapp.GroupRequest{Tasks: []oapp.MemberRequest{{Spec: task.SpecInput{Name: "q", Command: "c", Queue: "cpu"}}}},
			task.ErrInvalid, "tasks[0].queue"},
	}
	for _, tt := range tests {
		_, err := w.app.CreateGroup(ctx, tt.caller, tt.req)
		var ie *task.InvalidError
		if !errors.Is(err, tt.want) || (tt.field != "" && (!errors.As(err, &ie) || ie.Field != tt.field)) {
			t.Errorf("%s: %v, want %v on %s", tt.name, err, tt.want, tt.field)
		}
	}
	if n := len(w.store.CallsOf("Create")); n != 0 {
		t.Fatalf("refused groups reached the store %d times", n)
	}
}

// A member made from a template gets the rendered task with the member's
// own fields on top; queues are resolved once per distinct request and
// recorded with the members.
func TestCreateGroupAppliesTemplatesAndQueues(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.app.CreateTemplate(ctx, alice, orch.Template{ID: "train", Name: "train", Command: "python", Priority: 7,
		Args: []string{"train.py", "--model={{model}}"}, Env: map[string]string{"A": "1"},
		Variables: []orch.Var{{Name: "model", Type: orch.VarString, Required: true}}}); err != nil {
		t.Fatal(err)
	}
	st, err := w.app.CreateGroup(ctx, alice, oapp.GroupRequest{Mode: "dag", Start: true, Tasks: []oapp.MemberRequest{
		{ID: "a", TemplateID: "train", Variables: map[string]any{"model": "x y"},
			Spec: task.SpecInput{Priority: ptr(2), Env: map[string]string{"B": "2"}, Queue: "gpu"}},
		{ID: "b", Spec: task.SpecInput{Name: "b", Command: "true", Queue: "gpu", DependsOn: []string{"a"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var a, b task.Task
	for _, tk := range w.store.Tasks(st.Group.ID) {
		if tk.ID == st.Members["a"].TaskID {
			a = tk
		} else {
			b = tk
		}
	}
	if !slices.Equal(a.Spec.Args, []string{"train.py", "--model=x y"}) || a.Spec.Priority != 2 || a.Spec.Env["A"] != "1" ||
		a.Spec.Env["B"] != "2" || a.Spec.Name != "train" || a.ClusterQueue != "cq-gpu" || b.ClusterQueue != "cq-gpu" {
		t.Fatalf("a = %+v (queue %s), b queue %s", a.Spec, a.ClusterQueue, b.ClusterQueue)
	}
	if w.tasks.resolve != 1 {
		t.Fatalf("queue resolved %d times, want once", w.tasks.resolve)
	}
}

func TestGroupCommandsAndReset(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	st, err := w.app.CreateGroup(ctx, alice, oapp.GroupRequest{Mode: "serial", Tasks: []oapp.MemberRequest{member("a"), member("b")}})
	if err != nil || st.Group.Status != orch.StatusPending || len(w.store.Tasks(st.Group.ID)) != 0 {
		t.Fatalf("created %+v, %v", st.Group, err)
	}
	id := st.Group.ID
	if _, err := w.app.StartGroup(ctx, sched.Caller{Tenant: "tenant-b"}, id); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("another tenant's start: %v", err)
	}
	if st, err = w.app.StartGroup(ctx, alice, id); err != nil || len(w.store.Tasks(id)) != 2 {
		t.Fatalf("start: %+v, %v", st.Group, err)
	}
	// Starting a started group succeeds and creates nothing.
	if st, err = w.app.StartGroup(ctx, alice, id); err != nil || st.Group.Status != orch.StatusRunning || len(w.store.Tasks(id)) != 2 {
		t.Fatalf("second start: %+v, %v, %d tasks", st.Group, err, len(w.store.Tasks(id)))
	}
	if _, err := w.app.ResetRepeat(ctx, alice, id, "why"); !errors.Is(err, sched.ErrForbidden) {
		t.Fatalf("a tenant's reset: %v", err)
	}
	if _, err := w.app.ResetRepeat(ctx, sched.Caller{Tenant: "*", Subject: "ops"}, id, "why"); !errors.Is(err, task.ErrImmutable) {
		t.Fatalf("reset of a serial group: %v", err)
	}
	if err := w.app.DeleteGroup(ctx, alice, id); !errors.Is(err, task.ErrImmutable) {
		t.Fatalf("delete of a running group: %v", err)
	}
	if st, err = w.app.CancelGroup(ctx, alice, id, "enough"); err != nil || st.Group.Status != orch.StatusCancelled {
		t.Fatalf("cancel: %+v, %v", st.Group, err)
	}
	for _, tk := range w.store.Tasks(id) {
		if tk.Status != task.StatusCancelled {
			t.Fatalf("member task %s is %s", tk.ID, tk.Status)
		}
	}
	if err := w.app.DeleteGroup(ctx, alice, id); err != nil {
		t.Fatal(err)
	}
	if _, err := w.app.GetGroup(ctx, alice, id); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if l, _, err := w.app.ListGroups(ctx, alice, oapp.GroupFilter{}); err != nil || len(l) != 0 {
		t.Fatalf("list after delete: %v, %v", l, err)
	}
}

// A cancel that arrives after the last member ended but before the
// process manager moved the group on (it is not running here, so the
// order is the test's) does not cancel the group: it ends by its members'
// outcome, which is stored, and the cancel is refused as for an ended
// group. Nothing is cancelled.
func TestCancelAfterTheLastMemberEndedIsRefused(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	st, err := w.app.CreateGroup(ctx, alice, oapp.GroupRequest{Mode: "parallel", Start: true,
		Tasks: []oapp.MemberRequest{member("a"), member("b")}})
	if err != nil {
		t.Fatal(err)
	}
	id := st.Group.ID
	for _, k := range []string{"a", "b"} {
		if _, err := w.store.ChangeTask(st.Members[k].TaskID, func(tk task.Task) []task.Record {
			return apptest.MoveTask(tk, task.StatusCompleted, w.clock.Now())
		}); err != nil {
			t.Fatal(err)
		}
	}
	client := alice
	client.IP = "10.0.0.7"
	_, err = w.app.CancelGroup(ctx, client, id, "racing the end")
	if !errors.Is(err, task.ErrImmutable) || !strings.Contains(err.Error(), "cannot cancel a completed group") {
		t.Fatalf("cancel = %v", err)
	}
	got, err := w.app.GetGroup(ctx, alice, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Group.Status != orch.StatusCompleted || got.Group.Counts[task.StatusCompleted] != 2 || got.Group.Reason != "" {
		t.Fatalf("group = %+v", got.Group)
	}
	for _, tk := range w.store.Tasks(id) {
		if tk.Status != task.StatusCompleted {
			t.Fatalf("task %s is %s", tk.ID, tk.Status)
		}
	}
	for _, r := range w.store.Events() {
		if _, ok := r.Event.(orch.Canceled); ok {
			t.Fatal("the group was cancelled")
		}
		if r.IP != "" {
			// The group's end is the process manager's, not the client's.
			t.Fatalf("%s by %s carries the client's address", r.Event.EventName(), r.Actor)
		}
	}
	// Once one member is still open the cancel goes on, and the member that
	// ended keeps its outcome.
	st, err = w.app.CreateGroup(ctx, alice, oapp.GroupRequest{Mode: "parallel", Start: true,
		Tasks: []oapp.MemberRequest{member("a"), member("b")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.ChangeTask(st.Members["a"].TaskID, func(tk task.Task) []task.Record {
		return apptest.MoveTask(tk, task.StatusCompleted, w.clock.Now())
	}); err != nil {
		t.Fatal(err)
	}
	got, err = w.app.CancelGroup(ctx, client, st.Group.ID, "stop")
	if err != nil || got.Group.Status != orch.StatusCancelled || got.Members["a"].Status != task.StatusCompleted ||
		got.Members["b"].Status != task.StatusCancelled {
		t.Fatalf("cancel with b open: %+v, %v", got.Group, err)
	}
	// The catch-up (a completed) is the process manager's; b cancelled
	// with the group, and the group's cancel, are the client's.
	evs := w.store.Events()
	caught, stopped, last := evs[len(evs)-3], evs[len(evs)-2], evs[len(evs)-1]
	if last.Event.EventName() != "TaskGroupCanceled" || last.IP != "10.0.0.7" ||
		stopped.Event.EventName() != "TaskGroupMembersChanged" || stopped.IP != "10.0.0.7" ||
		caught.Event.EventName() != "TaskGroupMembersChanged" || caught.IP != "" {
		t.Fatalf("recorded %s (%q), %s (%q), then %s (%q)", caught.Event.EventName(), caught.IP,
			stopped.Event.EventName(), stopped.IP, last.Event.EventName(), last.IP)
	}
	if a, _ := w.store.Task(st.Members["a"].TaskID); a.Status != task.StatusCompleted {
		t.Fatalf("a = %s", a.Status)
	}
}

// A DAG where a fails, its dependent b is cancelled, x still runs.
// RetryTask of a (through RetryMember) re-runs a and brings b back; the
// group follows both to the end and completes. Once it has ended, its
// members are not run again and nothing changes.
func TestRetriedMemberIsFollowedByItsGroup(t *testing.T) {
	w := newWorld(t)
	w.run()
	ctx := context.Background()
	st, err := w.app.CreateGroup(ctx, alice, oapp.GroupRequest{Mode: "dag", Start: true, Tasks: []oapp.MemberRequest{
		member("a"), member("b", "a"), member("x")}})
	if err != nil {
		t.Fatal(err)
	}
	id := st.Group.ID
	w.move(id, "x", task.StatusRunning)
	w.move(id, "a", task.StatusFailed)
	w.waitGroup(id, "b cancelled", func(s orch.State) bool { return s.Members["b"].Status == task.StatusCancelled })
	a, _ := w.store.Task(st.Members["a"].TaskID)
	got, isMember, err := w.app.RetryMember(ctx, alice, a)
	if err != nil || !isMember || got.ID != a.ID || got.Status != task.StatusPending {
		t.Fatalf("retry of a = %+v, %v, %v", got, isMember, err)
	}
	g, _ := w.app.GetGroup(ctx, alice, id)
	if g.Members["a"].Status != task.StatusPending || g.Members["b"].Status != task.StatusPending ||
		g.Group.Counts[task.StatusFailed] != 0 || g.Group.Counts[task.StatusCancelled] != 0 || len(g.Group.FailedMembers) != 0 {
		t.Fatalf("after the retry: %+v, a %s, b %s", g.Group, g.Members["a"].Status, g.Members["b"].Status)
	}
	for _, k := range []string{"a", "b", "x"} {
		w.move(id, k, task.StatusCompleted)
	}
	done := w.waitGroup(id, "the group to end", func(s orch.State) bool { return s.Group.Status.Final() })
	if done.Group.Status != orch.StatusCompleted || done.Group.Reason != "" || done.Group.Counts[task.StatusCompleted] != 3 {
		t.Fatalf("group = %+v", done.Group)
	}

	// A failed member of an ended group stays as it ended.
	st, err = w.app.CreateGroup(ctx, alice, oapp.GroupRequest{Mode: "parallel", Start: true, Tasks: []oapp.MemberRequest{member("a")}})
	if err != nil {
		t.Fatal(err)
	}
	w.move(st.Group.ID, "a", task.StatusFailed)
	ended := w.waitGroup(st.Group.ID, "the group to fail", func(s orch.State) bool { return s.Group.Status == orch.StatusFailed })
	a, _ = w.store.Task(st.Members["a"].TaskID)
	_, isMember, err = w.app.RetryMember(ctx, alice, a)
	if !isMember || !errors.Is(err, task.ErrImmutable) || !strings.Contains(err.Error(), "the task's group "+st.Group.ID+" has ended (failed)") {
		t.Fatalf("retry in an ended group: %v, %v", isMember, err)
	}
	if after, _ := w.app.GetGroup(ctx, alice, st.Group.ID); after.Group.Version != ended.Group.Version {
		t.Fatalf("the refused retry changed the group: %+v", after.Group)
	}
	if a, _ := w.store.Task(a.ID); a.Status != task.StatusFailed {
		t.Fatalf("the refused retry changed the task: %s", a.Status)
	}

	// A task that carries the group's id without being a member, and one
	// whose group_id is no task group, are not the groups' to retry.
	stray := a
	stray.ID = "stray"
	if _, isMember, err := w.app.RetryMember(ctx, alice, stray); isMember || err != nil {
		t.Fatalf("retry of a task of no member: %v, %v", isMember, err)
	}
	stray.Spec.GroupID = "fan-1"
	if _, isMember, err := w.app.RetryMember(ctx, alice, stray); isMember || err != nil {
		t.Fatalf("retry of a fan-out's task: %v, %v", isMember, err)
	}
	if _, isMember, err := w.app.RetryMember(ctx, sched.Caller{Tenant: "tenant-b"}, a); isMember || err != nil {
		t.Fatalf("another tenant's retry: %v, %v", isMember, err)
	}
}

func TestTemplateUseCases(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	tpl, err := w.app.CreateTemplate(ctx, alice, orch.Template{Name: "echo", Command: "echo", Args: []string{"{{msg}}"},
		Variables: []orch.Var{{Name: "msg", Type: orch.VarString, Required: true}}})
	if err != nil || tpl.ID == "" || tpl.CreatedBy != "key-a" {
		t.Fatalf("create: %+v, %v", tpl, err)
	}
	if _, err := w.app.CreateTemplate(ctx, sched.Caller{Tenant: "*"}, tpl); !errors.Is(err, sched.ErrForbidden) {
		t.Fatalf("operator create: %v", err)
	}
	if _, err := w.app.RunTemplate(ctx, alice, tpl.ID, oapp.RunRequest{Variables: map[string]any{"msg": true}}); !errors.Is(err, task.ErrInvalid) ||
		!strings.Contains(err.Error(), "msg") || len(w.tasks.created) != 0 {
		t.Fatalf("bad run: %v (%d created)", err, len(w.tasks.created))
	}
	out, err := w.app.RunTemplate(ctx, alice, tpl.ID, oapp.RunRequest{Variables: map[string]any{"msg": "a b"}, Priority: ptr(1),
		TargetMachines: []string{"m1", "m2"}})
	if err != nil || len(out) != 2 {
		t.Fatalf("run: %v, %v", out, err)
	}
	in := w.tasks.created[0]
	if !slices.Equal(in.Args, []string{"a b"}) || *in.Priority != 1 || !slices.Equal(in.TargetMachines, []string{"m1", "m2"}) {
		t.Fatalf("run created %+v", in)
	}
	if _, err := w.app.RunTemplate(ctx, sched.Caller{Tenant: "tenant-b"}, tpl.ID, oapp.RunRequest{}); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("another tenant's run: %v", err)
	}
	up, err := w.app.UpdateTemplate(ctx, alice, tpl.ID, orch.Template{Name: "echo2", Command: "echo"}, nil)
	if err != nil || up.Name != "echo2" || up.Version != 2 {
		t.Fatalf("update: %+v, %v", up, err)
	}
	// Fields named change, the others keep their value; an empty name
	// named is refused and changes nothing.
	up, err = w.app.UpdateTemplate(ctx, alice, tpl.ID, orch.Template{Description: "d"}, []string{"id", "description"})
	if err != nil || up.Description != "d" || up.Name != "echo2" || up.Command != "echo" || up.Version != 3 {
		t.Fatalf("update of the description: %+v, %v", up, err)
	}
	if _, err := w.app.UpdateTemplate(ctx, alice, tpl.ID, orch.Template{Description: "e"}, []string{"name", "description"}); !errors.Is(err, task.ErrInvalid) {
		t.Fatalf("update with an empty name: %v", err)
	}
	if got, _ := w.app.GetTemplate(ctx, alice, tpl.ID); got.Description != "d" || got.Version != 3 {
		t.Fatalf("after the refused update: %+v", got)
	}
	if _, err := w.app.UpdateTemplate(ctx, sched.Caller{Tenant: "tenant-b"}, tpl.ID, orch.Template{Description: "e"},
		[]string{"description"}); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("another tenant's update: %v", err)
	}
	if l, _, err := w.app.ListTemplates(ctx, alice, oapp.TemplateFilter{}); err != nil || len(l) != 1 {
		t.Fatalf("list: %v, %v", l, err)
	}
	if err := w.app.DeleteTemplate(ctx, alice, tpl.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.app.GetTemplate(ctx, alice, tpl.ID); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

// An id no task group has but some of the caller's tasks have as their
// group_id (a fan-out's) reads as those tasks, every page of them; another
// tenant's tasks of that id are not the caller's, and an id of no task is
// not found.
func TestGroupOfTasksWithoutATaskGroup(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	for i, s := range []task.Status{task.StatusCompleted, task.StatusRunning, task.StatusPending} {
		w.tasks.existing = append(w.tasks.existing, task.Task{ID: fmt.Sprintf("t%d", i), TenantID: "tenant-a", Status: s, Version: 3,
			CreatedAt: at.Add(time.Duration(i) * time.Second), Spec: task.Spec{Name: "fan", GroupID: "fan-1"}})
	}
	w.tasks.existing = append(w.tasks.existing, task.Task{ID: "theirs", TenantID: "tenant-b", Spec: task.Spec{GroupID: "fan-1"}})
	st, err := w.app.GetGroup(ctx, alice, "fan-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Group.ID != "fan-1" || st.Group.Mode != orch.ModeParallel || st.Group.Status != orch.StatusRunning || st.Group.Total != 3 || len(st.Members) != 3 {
		t.Fatalf("group of tasks = %+v with %d members", st.Group, len(st.Members))
	}
	if w.tasks.lists != 2 {
		t.Errorf("%d list pages read, want both", w.tasks.lists)
	}
	if ch, err := w.app.GroupChanges(ctx, alice, "fan-1", st.Group.Version); err != nil || ch.Group.Version != st.Group.Version || len(ch.Members) != 3 {
		t.Errorf("changes of a group of tasks = %+v, %v", ch.Group, err)
	}
	if _, err := w.app.GetGroup(ctx, sched.Caller{Tenant: "tenant-c"}, "fan-1"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("a tenant without such tasks: %v", err)
	}
	if _, err := w.app.GetGroup(ctx, alice, "no-such-group"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("an id of no task: %v", err)
	}
	if _, err := w.app.CancelGroup(ctx, alice, "fan-1", "x"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("cancel of a group of tasks: %v (its tasks are cancelled one by one)", err)
	}
}
