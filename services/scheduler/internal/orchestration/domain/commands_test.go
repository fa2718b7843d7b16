package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// sim plays a group against stand-in tasks: it applies each decision as a
// store would (creates, cancels, deletes tasks), lets the test move tasks,
// and checks after every step that folding the recorded events from
// nothing gives the same state (the group is rebuildable from its events).
type sim struct {
	t       *testing.T
	s       State
	now     time.Time
	tasks   map[string]*simTask
	order   []string // task ids in creation order
	ids     int
	records []Record
}

type simTask struct {
	spec  task.Spec
	facts Facts
}

func newSim(t *testing.T, in Input, start bool) *sim {
	t.Helper()
	def, err := Normalize(in)
	if err != nil {
		t.Fatal(err)
	}
	x := &sim{t: t, now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC), tasks: map[string]*simTask{}}
	s, d := Create(x.now, "group-1", "tenant-a", "user-1", "", def, start, x.newID)
	x.apply(s, d)
	return x
}

func (x *sim) newID() string { x.ids++; return fmt.Sprintf("t%03d", x.ids) }

func (x *sim) apply(s State, d Decision) {
	x.t.Helper()
	x.s = s
	x.records = append(x.records, d.Records...)
	for _, recs := range d.NewTasks {
		sub := recs[0].Event.(task.Submitted)
		if sub.Spec.GroupID != s.Group.ID || sub.TenantID != "tenant-a" || sub.CreatedBy != "user-1" {
			x.t.Fatalf("member task submitted as %+v", sub)
		}
		x.tasks[sub.ID] = &simTask{spec: sub.Spec, facts: Facts{Status: task.StatusPending}}
		x.order = append(x.order, sub.ID)
	}
	for id := range d.CancelTasks {
		if f := &x.tasks[id].facts; !f.Status.Final() {
			f.Status, f.EndedAt = task.StatusCancelled, x.now
		}
	}
	for _, id := range d.DeleteTasks {
		x.tasks[id].facts.Gone = true
	}
	for _, id := range d.RetryTasks {
		f := &x.tasks[id].facts
		if f.Status != task.StatusFailed && f.Status != task.StatusCancelled {
			x.t.Fatalf("task %s retried while %s", id, f.Status)
		}
		*f = Facts{Status: task.StatusPending}
	}
	x.checkRebuild()
}

// checkRebuild folds every recorded event from nothing and compares.
func (x *sim) checkRebuild() {
	x.t.Helper()
	var re State
	for _, r := range x.records {
		if !re.Apply(r) {
			x.t.Fatalf("no case for %s", r.Event.EventName())
		}
	}
	want, _ := json.Marshal(x.s)
	got, _ := json.Marshal(re)
	if string(want) != string(got) {
		x.t.Fatalf("rebuilt state differs:\n got %s\nwant %s", got, want)
	}
}

func (x *sim) taskOf(key string) string {
	x.t.Helper()
	m, ok := x.s.Members[key]
	if !ok || m.TaskID == "" {
		x.t.Fatalf("member %s has no task (%+v)", key, m)
	}
	return m.TaskID
}

// set moves the member's task to status now.
func (x *sim) set(key string, status task.Status) {
	x.t.Helper()
	f := &x.tasks[x.taskOf(key)].facts
	f.Status = status
	if status == task.StatusRunning {
		f.StartedAt = x.now
	}
	if status.Final() {
		f.EndedAt = x.now
		if status == task.StatusFailed {
			f.Error = "exit code 1"
		}
	}
}

// open is the group with its open members and their tasks' facts, as a
// store loads them (Scope Open).
func (x *sim) open() (State, map[string]Facts) {
	open := x.s.Clone()
	for k, m := range open.Members {
		if m.Status.Final() {
			delete(open.Members, k)
		}
	}
	facts := map[string]Facts{}
	for _, m := range open.Members {
		if m.Released() && !x.tasks[m.TaskID].facts.Gone {
			facts[m.TaskID] = x.tasks[m.TaskID].facts
		}
	}
	return open, facts
}

// merge applies a decision made on the open members: final members the
// store did not load stay as they were.
func (x *sim) merge(s State, d Decision) {
	x.t.Helper()
	for k, m := range x.s.Members {
		if _, ok := s.Members[k]; !ok {
			s.Members[k] = m
		}
	}
	x.apply(s, d)
}

// advance runs the process manager on the open members, as a store loads
// them.
func (x *sim) advance() Decision {
	x.t.Helper()
	open, facts := x.open()
	s, d := open.Advance(x.now, facts, x.newID)
	x.merge(s, d)
	return d
}

// retry runs RetryMember on every member with its task's facts (Scope
// All) and applies what it decided, refused or not.
func (x *sim) retry(key string) (Decision, error) {
	x.t.Helper()
	all := x.s.Clone()
	facts := map[string]Facts{}
	for _, m := range all.Members {
		if m.Released() && !x.tasks[m.TaskID].facts.Gone {
			facts[m.TaskID] = x.tasks[m.TaskID].facts
		}
	}
	s, d, err := all.RetryMember(x.now, facts, "user-1", x.taskOf(key))
	if !d.Empty() {
		x.apply(s, d)
	}
	return d, err
}

// cancel runs Cancel on the open members and applies what it decided,
// refused or not.
func (x *sim) cancel(reason string) (Decision, error) {
	x.t.Helper()
	open, facts := x.open()
	s, d, err := open.Cancel(x.now, facts, "user-1", reason)
	if !d.Empty() {
		x.merge(s, d)
	}
	return d, err
}

func (x *sim) counts() map[task.Status]int { return x.s.Group.Counts }

func names(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Event.EventName())
	}
	return out
}

func TestSerialFailureCancelsTheRest(t *testing.T) {
	x := newSim(t, Input{Tasks: []MemberInput{member("a"), member("b"), member("c")}}, true)
	if x.s.Group.Status != StatusRunning || len(x.tasks) != 3 {
		t.Fatalf("started: %+v, %d tasks", x.s.Group, len(x.tasks))
	}
	// Each member's task waits for the one before.
	if deps := x.tasks[x.taskOf("c")].spec.DependsOn; len(deps) != 1 || deps[0] != x.taskOf("b") {
		t.Fatalf("c depends on %v", deps)
	}
	x.set("a", task.StatusCompleted)
	x.advance()
	x.set("b", task.StatusRunning)
	x.advance()
	x.set("b", task.StatusFailed)
	d := x.advance()
	if x.s.Group.Status != StatusFailed || x.s.Group.Reason != "task b failed" || d.CancelTasks[x.taskOf("c")] == "" || len(d.CancelTasks) != 1 {
		t.Fatalf("after b failed: %+v, cancels %v, events %v", x.s.Group, d.CancelTasks, names(d.Records))
	}
	x.advance() // mirrors c's cancellation
	want := map[task.Status]int{task.StatusCompleted: 1, task.StatusFailed: 1, task.StatusCancelled: 1}
	if !equalCounts(x.counts(), want) || x.s.Group.Open() != 0 {
		t.Fatalf("counts = %v", x.counts())
	}
	if d := x.advance(); !d.Empty() {
		t.Fatalf("a settled group decided %v", names(d.Records))
	}
}

func equalCounts(a, b map[task.Status]int) bool {
	for _, s := range task.Statuses() {
		if a[s] != b[s] {
			return false
		}
	}
	return true
}

// The documented DAG: download → process1 ∥ process2 → merge.
func TestDAGReleasesEverythingWithDependenciesAsTaskIDs(t *testing.T) {
	x := newSim(t, Input{Mode: "dag", Tasks: []MemberInput{member("download"), member("process1", "download"),
		member("process2", "download"), member("merge", "process1", "process2")}}, true)
	merge := x.tasks[x.taskOf("merge")].spec.DependsOn
	if !slices.Equal(merge, []string{x.taskOf("process1"), x.taskOf("process2")}) || len(x.tasks[x.taskOf("download")].spec.DependsOn) != 0 {
		t.Fatalf("merge depends on %v", merge)
	}
	for _, k := range []string{"download", "process1", "process2", "merge"} {
		x.set(k, task.StatusCompleted)
		x.advance()
	}
	if x.s.Group.Status != StatusCompleted || x.counts()[task.StatusCompleted] != 4 || x.s.Group.EndedAt.IsZero() {
		t.Fatalf("group = %+v", x.s.Group)
	}
}

func TestDAGFailureSkipsOnlyDescendants(t *testing.T) {
	x := newSim(t, Input{Mode: "dag", Tasks: []MemberInput{member("root"), member("b1", "root"), member("b2", "b1"),
		member("b3", "b2"), member("c1", "root"), member("c2", "c1")}}, true)
	x.set("root", task.StatusCompleted)
	x.set("b1", task.StatusFailed)
	d := x.advance()
	if len(d.CancelTasks) != 2 || d.CancelTasks[x.taskOf("b2")] != "dependency b1 failed" || d.CancelTasks[x.taskOf("b3")] == "" {
		t.Fatalf("cancels = %v", d.CancelTasks)
	}
	if x.s.Group.Status != StatusRunning {
		t.Fatalf("the other branch must go on: %+v", x.s.Group)
	}
	x.advance()
	x.set("c1", task.StatusCompleted)
	x.advance()
	x.set("c2", task.StatusCompleted)
	x.advance()
	g := x.s.Group
	if g.Status != StatusFailed || g.Reason != "3 of 6 tasks did not complete" || !slices.Equal(g.FailedMembers, []string{"b1"}) {
		t.Fatalf("group = %+v", g)
	}
	if !equalCounts(x.counts(), map[task.Status]int{task.StatusCompleted: 3, task.StatusFailed: 1, task.StatusCancelled: 2}) {
		t.Fatalf("counts = %v", x.counts())
	}
}

func TestParallelWithMaxParallel(t *testing.T) {
	in := Input{Mode: "parallel", MaxParallel: 2}
	for i := range 5 {
		in.Tasks = append(in.Tasks, member(fmt.Sprint("m", i)))
	}
	x := newSim(t, in, true)
	if len(x.tasks) != 2 {
		t.Fatalf("released %d, want 2", len(x.tasks))
	}
	x.set("m0", task.StatusFailed)
	x.advance()
	if len(x.tasks) != 3 || x.s.Group.Status != StatusRunning {
		t.Fatalf("after a failure: %d tasks, %+v", len(x.tasks), x.s.Group)
	}
	for step := 0; x.s.Group.Status == StatusRunning && step < 10; step++ {
		for k, m := range x.s.Members {
			if m.Released() && !m.Status.Final() {
				open := 0
				for _, tk := range x.tasks {
					if !tk.facts.Status.Final() {
						open++
					}
				}
				if open > 2 {
					t.Fatalf("%d tasks open at once", open)
				}
				x.set(k, task.StatusCompleted)
				break
			}
		}
		x.advance()
	}
	if x.s.Group.Status != StatusFailed || len(x.tasks) != 5 || x.counts()[task.StatusCompleted] != 4 {
		t.Fatalf("group = %+v, %d tasks", x.s.Group, len(x.tasks))
	}
}

func TestCreateWithoutStartAndStart(t *testing.T) {
	x := newSim(t, Input{Mode: "parallel", Tasks: []MemberInput{member("a"), member("b")}}, false)
	if x.s.Group.Status != StatusPending || len(x.tasks) != 0 {
		t.Fatalf("created: %+v", x.s.Group)
	}
	s, d, err := x.s.Start(x.now, "user-1", x.newID)
	if err != nil {
		t.Fatal(err)
	}
	x.apply(s, d)
	if len(x.tasks) != 2 || x.s.Group.Status != StatusRunning {
		t.Fatalf("started: %+v", x.s.Group)
	}
	// Starting again changes nothing and succeeds, while it runs and once
	// it ended.
	if s, d, err := x.s.Start(x.now, "user-1", x.newID); err != nil || !d.Empty() || s.Group.Status != StatusRunning {
		t.Fatalf("second start: %+v, %+v, %v", s.Group, d, err)
	}
	x.set("a", task.StatusCompleted)
	x.set("b", task.StatusCompleted)
	x.advance()
	if x.s.Group.Status != StatusCompleted {
		t.Fatalf("group = %+v", x.s.Group)
	}
	if s, d, err := x.s.Start(x.now, "user-1", x.newID); err != nil || !d.Empty() || s.Group.Status != StatusCompleted {
		t.Fatalf("start of a completed group: %+v, %+v, %v", s.Group, d, err)
	}

	// A group cancelled before it started cannot start.
	y := newSim(t, Input{Mode: "serial", Tasks: []MemberInput{member("a")}}, false)
	if _, err := y.cancel(""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := y.s.Start(y.now, "user-1", y.newID); !errors.Is(err, task.ErrImmutable) {
		t.Fatalf("start of a group cancelled before it started: %v", err)
	}
}

// A cancel decides on the members' tasks as they are, not as the group
// last saw them: once every member has ended the group ends by their
// outcome and the cancel is refused as for any ended group; while one is
// open the cancel goes on and what ended meanwhile keeps its outcome.
func TestCancelCatchesUpWithTheMembersFirst(t *testing.T) {
	for _, tt := range []struct {
		name   string
		last   task.Status
		status Status
		reason string
	}{
		{"the last member completed", task.StatusCompleted, StatusCompleted, ""},
		{"the last member failed", task.StatusFailed, StatusFailed, "1 of 2 tasks did not complete"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x := newSim(t, Input{Mode: "parallel", Tasks: []MemberInput{member("a"), member("b")}}, true)
			x.set("a", task.StatusCompleted)
			x.advance()
			x.set("b", tt.last) // the process manager has not seen it yet
			d, err := x.cancel("too late")
			if !errors.Is(err, task.ErrImmutable) || !strings.HasSuffix(err.Error(), ": cannot cancel a "+string(tt.status)+" group") {
				t.Fatalf("cancel = %v", err)
			}
			g := x.s.Group
			if g.Status != tt.status || g.Reason != tt.reason || len(d.CancelTasks) != 0 ||
				!slices.Equal(names(d.Records), []string{"TaskGroupMembersChanged", "TaskGroup" + map[Status]string{
					StatusCompleted: "Completed", StatusFailed: "Failed"}[tt.status]}) {
				t.Fatalf("group %+v after %v, cancels %v", g, names(d.Records), d.CancelTasks)
			}
			if d.Records[0].Actor != "scheduler" || x.s.Members["b"].Status != tt.last {
				t.Fatalf("catch-up by %q, b %s", d.Records[0].Actor, x.s.Members["b"].Status)
			}
		})
	}
	x := newSim(t, Input{Mode: "parallel", Tasks: []MemberInput{member("a"), member("b")}}, true)
	x.set("a", task.StatusCompleted)
	x.set("b", task.StatusRunning)
	d, err := x.cancel("stop")
	if err != nil {
		t.Fatal(err)
	}
	// The catch-up (a completed), then b cancelled with the group, in the
	// decision that cancels its task: the group reads as it is at once.
	if x.s.Group.Status != StatusCancelled || x.s.Members["a"].Status != task.StatusCompleted || len(d.CancelTasks) != 1 ||
		d.CancelTasks[x.taskOf("b")] == "" ||
		!slices.Equal(names(d.Records), []string{"TaskGroupMembersChanged", "TaskGroupMembersChanged", "TaskGroupCanceled"}) ||
		d.Records[0].Actor != "scheduler" || d.Records[1].Actor != "user-1" || d.Records[2].Actor != "user-1" {
		t.Fatalf("cancel with b running: %+v, cancels %v, %v", x.s.Group, d.CancelTasks, names(d.Records))
	}
	b := x.s.Members["b"]
	if b.Status != task.StatusCancelled || b.Error != "cancelled: group group-1 cancelled: stop" || b.EndedAt.IsZero() ||
		!equalCounts(x.counts(), map[task.Status]int{task.StatusCompleted: 1, task.StatusCancelled: 1}) {
		t.Fatalf("b as the cancel answers = %+v, counts %v", b, x.counts())
	}
	x.set("b", task.StatusCancelled) // the task as the store cancelled it
	if d := x.advance(); !d.Empty() {
		t.Fatalf("the catch-up after the cancel decided %v", names(d.Records))
	}
}

func TestCancelAndDelete(t *testing.T) {
	x := newSim(t, Input{Mode: "parallel", MaxParallel: 1, Tasks: []MemberInput{member("a"), member("b"), member("c")}}, true)
	x.set("a", task.StatusRunning)
	x.advance()
	if _, _, err := x.s.Delete(x.now, "user-1"); !errors.Is(err, task.ErrImmutable) {
		t.Fatalf("delete of a running group: %v", err)
	}
	d, err := x.cancel("not needed")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.CancelTasks) != 1 || x.s.Group.Status != StatusCancelled || x.s.Group.Reason != "cancelled: not needed" {
		t.Fatalf("cancel: %v, %+v", d.CancelTasks, x.s.Group)
	}
	// b and c were never released: they are cancelled without a task.
	if x.s.Members["b"].Status != task.StatusCancelled || len(x.tasks) != 1 {
		t.Fatalf("b = %+v", x.s.Members["b"])
	}
	x.advance()
	if !equalCounts(x.counts(), map[task.Status]int{task.StatusCancelled: 3}) {
		t.Fatalf("counts = %v", x.counts())
	}
	if d, err := x.cancel(""); !errors.Is(err, task.ErrImmutable) || !d.Empty() {
		t.Fatalf("cancel of a cancelled group: %v, %v", err, names(d.Records))
	}
	s, d, err := x.s.Delete(x.now, "user-1")
	if err != nil {
		t.Fatal(err)
	}
	x.apply(s, d)
	if !x.s.Group.Deleted || !slices.Equal(d.DeleteTasks, []string{x.taskOf("a")}) {
		t.Fatalf("delete: %v, %+v", d.DeleteTasks, x.s.Group)
	}
}

// A member retried while its group runs is followed again: pending once
// more, no longer counted failed, and the group ends by how it ends.
func TestRetriedMemberIsFollowedAgain(t *testing.T) {
	x := newSim(t, Input{Mode: "parallel", Tasks: []MemberInput{member("a"), member("b")}}, true)
	x.set("a", task.StatusFailed)
	x.set("b", task.StatusRunning)
	x.advance()
	if !slices.Equal(x.s.Group.FailedMembers, []string{"a"}) {
		t.Fatalf("failed members %v", x.s.Group.FailedMembers)
	}
	d, err := x.retry("a")
	if err != nil {
		t.Fatal(err)
	}
	a := x.s.Members["a"]
	if !slices.Equal(d.RetryTasks, []string{x.taskOf("a")}) || !slices.Equal(names(d.Records), []string{"TaskGroupMembersChanged"}) ||
		d.Records[0].Actor != "user-1" || a.Status != task.StatusPending || !a.StartedAt.IsZero() || !a.EndedAt.IsZero() || a.Error != "" {
		t.Fatalf("retry: %v %v, a = %+v", d.RetryTasks, names(d.Records), a)
	}
	if !equalCounts(x.counts(), map[task.Status]int{task.StatusPending: 1, task.StatusRunning: 1}) || len(x.s.Group.FailedMembers) != 0 {
		t.Fatalf("counts %v, failed members %v", x.counts(), x.s.Group.FailedMembers)
	}
	x.set("a", task.StatusRunning)
	x.advance()
	x.set("a", task.StatusCompleted)
	x.set("b", task.StatusCompleted)
	x.advance()
	if x.s.Group.Status != StatusCompleted || x.s.Group.Reason != "" || x.counts()[task.StatusCompleted] != 2 {
		t.Fatalf("group %+v, counts %v", x.s.Group, x.counts())
	}
	// Failing again, it is counted failed again.
	y := newSim(t, Input{Mode: "parallel", Tasks: []MemberInput{member("a"), member("b")}}, true)
	y.set("a", task.StatusFailed)
	y.advance()
	if _, err := y.retry("a"); err != nil {
		t.Fatal(err)
	}
	y.set("a", task.StatusFailed)
	y.set("b", task.StatusCompleted)
	y.advance()
	if g := y.s.Group; g.Status != StatusFailed || g.Reason != "1 of 2 tasks did not complete" || !slices.Equal(g.FailedMembers, []string{"a"}) {
		t.Fatalf("group %+v", g)
	}
}

// In a dag, the descendants a member's failure cancelled come back with
// it; a descendant cancelled by hand before it, and one whose other
// dependency failed, stay cancelled. A member whose dependency failed is
// not retried on its own.
func TestRetriedDAGMemberBringsBackWhatItsFailureCancelled(t *testing.T) {
	x := newSim(t, Input{Mode: "dag", Tasks: []MemberInput{member("root"), member("a", "root"), member("b", "a"),
		member("c", "b"), member("h", "a"), member("k", "root"), member("j", "a", "k"), member("x")}}, true)
	x.set("root", task.StatusCompleted)
	x.set("h", task.StatusCancelled) // by hand, before a ended
	x.set("x", task.StatusRunning)
	x.advance()
	x.now = x.now.Add(time.Second)
	x.set("k", task.StatusFailed)
	x.advance()
	x.advance() // j cancelled for k
	x.now = x.now.Add(time.Second)
	x.set("a", task.StatusFailed)
	x.advance()
	x.advance() // b and c cancelled for a
	for k, want := range map[string]task.Status{"b": task.StatusCancelled, "c": task.StatusCancelled, "j": task.StatusCancelled} {
		if got := x.s.Members[k].Status; got != want {
			t.Fatalf("%s is %s", k, got)
		}
	}
	for _, tt := range []struct{ key, want string }{
		{"j", "depends on member a of group group-1, which failed; retry a, and the dependents its end cancelled come back with it"},
		{"b", "depends on member a of group group-1, which failed; retry a"},
		{"x", "cannot retry a running task"},
	} {
		if d, err := x.retry(tt.key); !errors.Is(err, task.ErrImmutable) || !strings.Contains(err.Error(), tt.want) || !d.Empty() {
			t.Fatalf("retry of %s: %v, %v", tt.key, err, names(d.Records))
		}
	}
	x.now = x.now.Add(time.Second)
	d, err := x.retry("a")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{x.taskOf("a"), x.taskOf("b"), x.taskOf("c")}; !slices.Equal(d.RetryTasks, want) {
		t.Fatalf("retried %v, want a, b, c (%v)", d.RetryTasks, want)
	}
	for k, want := range map[string]task.Status{"a": task.StatusPending, "b": task.StatusPending, "c": task.StatusPending,
		"h": task.StatusCancelled, "j": task.StatusCancelled} {
		if got := x.s.Members[k].Status; got != want {
			t.Fatalf("%s is %s, want %s", k, got, want)
		}
	}
	for _, k := range []string{"a", "b", "c", "x"} {
		x.set(k, task.StatusCompleted)
		x.advance()
	}
	g := x.s.Group
	if g.Status != StatusFailed || g.Reason != "3 of 8 tasks did not complete" || !slices.Equal(g.FailedMembers, []string{"k"}) {
		t.Fatalf("group %+v", g)
	}
}

// A retry that comes before the process manager saw the member fail
// records the failure first; what that failure was about to cancel goes
// on waiting for the member instead.
func TestRetryBeforeTheGroupSawTheFailure(t *testing.T) {
	x := newSim(t, Input{Mode: "dag", Tasks: []MemberInput{member("a"), member("b", "a"), member("c", "b"), member("x")}}, true)
	x.set("x", task.StatusRunning)
	x.set("a", task.StatusFailed)
	d, err := x.retry("a")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.CancelTasks) != 0 || !slices.Equal(d.RetryTasks, []string{x.taskOf("a")}) ||
		!slices.Equal(names(d.Records), []string{"TaskGroupMembersChanged", "TaskGroupMembersChanged"}) || d.Records[0].Actor != "scheduler" {
		t.Fatalf("decided %v, cancels %v, retries %v", names(d.Records), d.CancelTasks, d.RetryTasks)
	}
	if !equalCounts(x.counts(), map[task.Status]int{task.StatusPending: 3, task.StatusRunning: 1}) {
		t.Fatalf("counts %v", x.counts())
	}
}

// Once the group has ended — as recorded, or as its members' tasks say
// when the retry comes — a member is not run again; a repeat tries its
// runs again itself; a task of no member is not the group's.
func TestRetryRefusals(t *testing.T) {
	x := newSim(t, Input{Mode: "parallel", Tasks: []MemberInput{member("a"), member("b")}}, true)
	x.set("a", task.StatusFailed)
	x.advance()
	x.set("b", task.StatusCompleted) // not seen yet
	d, err := x.retry("a")
	if !errors.Is(err, task.ErrImmutable) || !strings.HasSuffix(err.Error(), "the task's group group-1 has ended (failed); its members are not run again") ||
		len(d.RetryTasks) != 0 || x.s.Group.Status != StatusFailed || x.tasks[x.taskOf("a")].facts.Status != task.StatusFailed {
		t.Fatalf("retry in a group that ended meanwhile: %v, %+v", err, x.s.Group)
	}
	if d, err := x.retry("a"); !errors.Is(err, task.ErrImmutable) || !d.Empty() {
		t.Fatalf("retry in an ended group: %v, %v", err, names(d.Records))
	}
	serial := newSim(t, Input{Tasks: []MemberInput{member("a"), member("b")}}, true)
	serial.set("a", task.StatusFailed)
	serial.advance()
	if _, err := serial.retry("a"); !errors.Is(err, task.ErrImmutable) || !strings.Contains(err.Error(), "has ended (failed)") {
		t.Fatalf("retry in a failed serial group: %v", err)
	}
	rep := repeatSim(t, RepeatInput{Count: 2})
	rep.set("run-1", task.StatusFailed)
	rep.advance()
	if d, err := rep.retry("run-1"); !errors.Is(err, task.ErrImmutable) || !strings.Contains(err.Error(), "tries its failed runs again itself") ||
		!d.Empty() {
		t.Fatalf("retry of a repeat's run: %v, %v", err, names(d.Records))
	}
	if _, _, err := x.s.RetryMember(x.now, nil, "user-1", "no-such-task"); !errors.Is(err, ErrNotMember) {
		t.Fatalf("retry of a task of no member: %v", err)
	}
}

func repeatSim(t *testing.T, r RepeatInput) *sim {
	r.Spec = task.SpecInput{Name: "stress", Command: "./stress_test.sh"}
	return newSim(t, Input{Repeat: &r}, true)
}

// openRuns are the released runs that are not final, in release order.
func (x *sim) openRuns() []Member {
	var out []Member
	for _, m := range x.s.Ordered() {
		if m.Released() && !x.tasks[m.TaskID].facts.Status.Final() {
			out = append(out, m)
		}
	}
	return out
}

func TestRepeatParallelAndInterval(t *testing.T) {
	x := repeatSim(t, RepeatInput{Count: 4, Parallel: ptr(2), IntervalSec: ptr(10)})
	// One run at a time until it has started: starts are spaced.
	if len(x.tasks) != 1 || x.tasks[x.taskOf("run-1")].spec.MaxRetries != 0 {
		t.Fatalf("start released %d", len(x.tasks))
	}
	x.set("run-1", task.StatusRunning)
	x.advance()
	if len(x.tasks) != 1 || !x.s.Group.NextWake().Equal(x.now.Add(10*time.Second)) {
		t.Fatalf("before the interval: %d tasks, wake %v", len(x.tasks), x.s.Group.NextWake())
	}
	var starts []time.Time
	starts = append(starts, x.now)
	for len(starts) < 4 {
		x.now = x.now.Add(10 * time.Second)
		x.advance()
		runs := x.openRuns()
		if len(runs) > 2 {
			t.Fatalf("%d runs open", len(runs))
		}
		last := runs[len(runs)-1]
		x.set(last.Key, task.StatusRunning)
		starts = append(starts, x.now)
		x.advance()
		if len(x.openRuns()) == 2 {
			x.set(x.openRuns()[0].Key, task.StatusCompleted)
		}
	}
	for i := 1; i < len(starts); i++ {
		if starts[i].Sub(starts[i-1]) < 10*time.Second {
			t.Fatalf("starts %v", starts)
		}
	}
	for _, m := range x.openRuns() {
		x.set(m.Key, task.StatusCompleted)
	}
	x.advance()
	if x.s.Group.Status != StatusCompleted || x.s.Group.Repeat.Completed != 4 || x.s.Group.Total != 4 {
		t.Fatalf("group = %+v %+v", x.s.Group, x.s.Group.Repeat)
	}
}

func TestRepeatBreakerOpensAndResets(t *testing.T) {
	x := repeatSim(t, RepeatInput{Count: 10, BackoffSec: ptr(5), Breaker: ptr(3)})
	for i := 1; i <= 3; i++ {
		run := x.openRuns()
		if len(run) != 1 {
			t.Fatalf("failure %d: %d open runs", i, len(run))
		}
		x.set(run[0].Key, task.StatusFailed)
		x.advance()
		if i < 3 {
			// The failed run comes back after its backoff, not before.
			if len(x.openRuns()) != 0 || !x.s.Group.NextWake().Equal(x.now.Add(5*time.Second)) {
				t.Fatalf("after failure %d: open %v wake %v", i, x.openRuns(), x.s.Group.NextWake())
			}
			x.now = x.now.Add(5 * time.Second)
			x.advance()
		}
	}
	g := x.s.Group
	if !g.Repeat.CircuitOpen || g.Repeat.ConsecutiveFailures != 3 || g.Status != StatusRunning || x.records[len(x.records)-1].Event.EventName() != "TaskGroupCircuitOpened" {
		t.Fatalf("breaker: %+v", g.Repeat)
	}
	if got := x.openRuns(); len(got) != 0 || len(x.tasks) != 3 {
		t.Fatalf("open runs while the breaker is open: %v", got)
	}
	x.now = x.now.Add(time.Hour)
	if d := x.advance(); len(d.NewTasks) != 0 || !g.NextWake().IsZero() {
		t.Fatalf("a run started with the breaker open: %v", names(d.Records))
	}
	for _, bad := range []struct {
		reason string
		want   error
	}{{"  ", task.ErrInvalid}} {
		if _, _, err := x.s.ResetRepeat(x.now, "ops", bad.reason, x.newID); !errors.Is(err, bad.want) {
			t.Fatalf("reset with reason %q: %v", bad.reason, err)
		}
	}
	s, d, err := x.s.ResetRepeat(x.now, "ops", "stress rig fixed", x.newID)
	if err != nil {
		t.Fatal(err)
	}
	x.apply(s, d)
	r := x.s.Group.Repeat
	if r.CircuitOpen || r.ResetBy != "ops" || r.ResetReason != "stress rig fixed" || !r.ResetAt.Equal(x.now) || len(d.NewTasks) != 1 {
		t.Fatalf("after reset: %+v, %d new tasks", r, len(d.NewTasks))
	}
	// The first run resumes: its fourth attempt (third retry).
	if m := x.openRuns()[0]; m.Run != 1 || m.Attempt != 4 || m.Key != "run-1-retry-3" {
		t.Fatalf("resumed run = %+v", m)
	}
	if _, _, err := x.s.ResetRepeat(x.now, "ops", "again", x.newID); !errors.Is(err, task.ErrImmutable) {
		t.Fatalf("reset of a closed breaker: %v", err)
	}
}

// A repeat that nothing ends on failure (the defaults: no max_failures,
// no breaker, backoff_sec 0) retries its failing runs at a doubling pace,
// 1 s, 2 s, 4 s … up to five minutes; a completed run resets the pace,
// and a repeat with either limit keeps its backoff_sec as given.
func TestUnboundedRepeatBacksOff(t *testing.T) {
	x := repeatSim(t, RepeatInput{Count: 3})
	var waits []time.Duration
	for range 11 {
		run := x.openRuns()
		if len(run) != 1 {
			t.Fatalf("after waits %v: %d open runs", waits, len(run))
		}
		x.set(run[0].Key, task.StatusFailed)
		x.advance()
		if len(x.openRuns()) != 0 {
			t.Fatalf("after waits %v: a run started before its backoff", waits)
		}
		wake := x.s.Group.NextWake()
		waits = append(waits, wake.Sub(x.now))
		x.now = wake
		x.advance()
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	// A completed run resets the pace: the next failure waits 1 s again.
	x.set(x.openRuns()[0].Key, task.StatusCompleted)
	x.advance()
	x.set(x.openRuns()[0].Key, task.StatusFailed)
	x.advance()
	if got := x.s.Group.NextWake().Sub(x.now); got != time.Second {
		t.Fatalf("after a completed run, a failure waits %v, want 1s", got)
	}

	// backoff_sec above the floor is kept as given.
	slow := repeatSim(t, RepeatInput{Count: 2, BackoffSec: ptr(30)})
	slow.set(slow.openRuns()[0].Key, task.StatusFailed)
	slow.advance()
	if got := slow.s.Group.NextWake().Sub(slow.now); got != 30*time.Second {
		t.Fatalf("backoff_sec 30 waits %v", got)
	}
	// Either limit bounds the failures, and backoff_sec 0 retries at once.
	for _, r := range []RepeatInput{{Count: 2, MaxFailures: ptr(5)}, {Count: 2, Breaker: ptr(5)}} {
		y := repeatSim(t, r)
		for i := range 3 {
			y.set(y.openRuns()[0].Key, task.StatusFailed)
			y.advance()
			if open := y.openRuns(); len(open) != 1 || open[0].Attempt != i+2 {
				t.Fatalf("%+v: failure %d not retried at once: %v", r, i+1, open)
			}
		}
	}
}

// max_failures failed runs are tolerated; the next failure ends the
// repeat and cancels its open runs.
func TestRepeatMaxFailuresFailsAndCancelsOpenRuns(t *testing.T) {
	x := repeatSim(t, RepeatInput{Count: 10, Parallel: ptr(3), MaxFailures: ptr(2)})
	runs := x.openRuns()
	if len(runs) != 3 {
		t.Fatalf("%d runs open, want 3", len(runs))
	}
	x.set(runs[0].Key, task.StatusFailed)
	x.set(runs[1].Key, task.StatusFailed)
	x.advance()
	open := x.openRuns()
	if x.s.Group.Status != StatusRunning || x.s.Group.Repeat.Failures != 2 || len(open) != 3 {
		t.Fatalf("after max_failures failures: group %+v, repeat %+v, %d runs open", x.s.Group, x.s.Group.Repeat, len(open))
	}
	x.set(open[0].Key, task.StatusFailed)
	d := x.advance()
	if x.s.Group.Status != StatusFailed || len(d.CancelTasks) != 2 || d.CancelTasks[open[1].TaskID] == "" ||
		d.CancelTasks[open[2].TaskID] == "" || len(d.NewTasks) != 0 {
		t.Fatalf("group %+v, cancels %v, events %v", x.s.Group, d.CancelTasks, names(d.Records))
	}
	if want := "3 runs failed, more than max_failures 2"; x.s.Group.Reason != want {
		t.Errorf("reason %q, want %q", x.s.Group.Reason, want)
	}
	x.advance()
	if x.s.Group.Repeat.Failures != 3 || x.counts()[task.StatusCancelled] != 2 {
		t.Fatalf("after: %+v counts %v", x.s.Group.Repeat, x.counts())
	}
}

func TestResetRefusesOtherGroups(t *testing.T) {
	x := newSim(t, Input{Tasks: []MemberInput{member("a")}}, true)
	if _, _, err := x.s.ResetRepeat(x.now, "ops", "why", x.newID); !errors.Is(err, task.ErrImmutable) {
		t.Fatalf("reset of a serial group: %v", err)
	}
	y := repeatSim(t, RepeatInput{Count: 2})
	if _, _, err := y.s.ResetRepeat(y.now, "ops", "why", y.newID); !errors.Is(err, task.ErrImmutable) {
		t.Fatalf("reset of a closed breaker: %v", err)
	}
}

// A member whose task disappeared (deleted by hand) counts as cancelled.
func TestGoneTaskCountsAsCancelled(t *testing.T) {
	x := newSim(t, Input{Mode: "parallel", Tasks: []MemberInput{member("a"), member("b")}}, true)
	x.tasks[x.taskOf("a")].facts.Gone = true
	x.set("b", task.StatusCompleted)
	x.advance()
	if x.s.Members["a"].Status != task.StatusCancelled || x.s.Group.Status != StatusFailed {
		t.Fatalf("group %+v, a %+v", x.s.Group, x.s.Members["a"])
	}
}

func TestHandlesEveryGroupEvent(t *testing.T) {
	for _, e := range []Event{Created{}, Started{}, Released{}, Changed{}, Completed{}, Failed{}, Canceled{}, Deleted{},
		CircuitOpened{}, RepeatReset{}} {
		if !Handles(e) {
			t.Errorf("Apply has no case for %s", e.EventName())
		}
	}
}

// A member whose id the client did not give is known by its task's id,
// fixed at creation: its dependents name that id, and its task, released
// at once or later (max_parallel), has it. Named members keep their ids and
// get a fresh task id at release.
func TestUnnamedMembersAreTheirTasks(t *testing.T) {
	x := newSim(t, Input{Mode: "serial", Tasks: []MemberInput{member(""), member("named"), member("")}}, true)
	ordered := x.s.Ordered()
	first, named, last := ordered[0], ordered[1], ordered[2]
	if first.Key == "" || unnamed(first.Key) || first.TaskID != first.Key || last.TaskID != last.Key {
		t.Fatalf("unnamed members: %+v, %+v; want each known by its task's id", first, last)
	}
	if named.Key != "named" || named.TaskID == "named" || named.TaskID == "" {
		t.Fatalf("named member: %+v; want its own id and a task id of its own", named)
	}
	if !slices.Equal(named.DependsOn, []string{first.Key}) || !slices.Equal(last.DependsOn, []string{"named"}) {
		t.Fatalf("dependencies: %v, %v", named.DependsOn, last.DependsOn)
	}
	if deps := x.tasks[named.TaskID].spec.DependsOn; !slices.Equal(deps, []string{first.Key}) {
		t.Fatalf("the named member's task depends on %v, want the first member's id %s", deps, first.Key)
	}

	// Released later, a member's task still gets the id fixed at creation.
	y := newSim(t, Input{Mode: "parallel", MaxParallel: 1, Tasks: []MemberInput{member(""), member("")}}, true)
	waiting := y.s.Ordered()[1]
	if waiting.Released() || waiting.PlannedTaskID != waiting.Key {
		t.Fatalf("the second member before its release: %+v", waiting)
	}
	y.set(y.s.Ordered()[0].Key, task.StatusCompleted)
	y.advance()
	if got := y.s.Members[waiting.Key]; got.TaskID != waiting.Key || y.tasks[waiting.Key] == nil {
		t.Fatalf("released as %+v; want its task to have the id %s", got, waiting.Key)
	}
}
