package app_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// createNamed creates in as c, named name by its create (a body id or
// ?request_id=).
func (h *harness) createNamed(c app.Caller, name string, in domain.SpecInput) domain.Task {
	h.t.Helper()
	out, err := h.app.CreateTasks(h.ctx, c, in, name)
	if err != nil {
		h.t.Fatal(err)
	}
	return out[0]
}

// A task is reached by the name its create gave it on every route a user
// names a task on; the name is its tenant's alone, and a task's own id wins
// over a name.
func TestTasksAreFoundByTheNamesTheirCreatesGaveThem(t *testing.T) {
	h := newHarness(t)
	train := h.createNamed(user("t1"), "task-train-001", spec("train"))
	if train.ID == "task-train-001" {
		t.Fatal("the name became the task's id")
	}
	if got, err := h.app.GetTask(h.ctx, user("t1"), "task-train-001"); err != nil || got.ID != train.ID {
		t.Errorf("get by name = %s, %v; want %s", got.ID, err, train.ID)
	}
	if res, err := h.app.GetResult(h.ctx, user("t1"), "task-train-001"); err != nil || res.Task.ID != train.ID {
		t.Errorf("result by name = %s, %v", res.Task.ID, err)
	}
	for _, c := range []app.Caller{user("t2"), admin} {
		_, err := h.app.GetTask(h.ctx, c, "task-train-001")
		wantErr(t, "another tenant's (or an operator's) read of t1's name", err, domain.ErrNotFound)
		_, err = h.app.CancelTask(h.ctx, c, "task-train-001", "")
		wantErr(t, "another tenant's (or an operator's) cancel by t1's name", err, domain.ErrNotFound)
	}
	h.wantStatus(train.ID, domain.StatusPending)

	// A name that is another task's id names that task.
	other := h.create(user("t1"), spec("other"))
	h.createNamed(user("t1"), other.ID, spec("named-like-other"))
	if got, err := h.app.GetTask(h.ctx, user("t1"), other.ID); err != nil || got.ID != other.ID {
		t.Errorf("an id that is also a name = %s, %v; want %s", got.ID, err, other.ID)
	}

	// The changes.
	if _, err := h.app.UpdateTask(h.ctx, user("t1"), "task-train-001", domain.SpecInput{Priority: intp(7)}); err != nil {
		t.Fatalf("update by name: %v", err)
	}
	if p := h.get(train.ID).Spec.Priority; p != 7 {
		t.Errorf("priority after update by name = %d", p)
	}
	if _, err := h.app.SuspendTask(h.ctx, user("t1"), "task-train-001", "pause"); err != nil {
		t.Fatalf("suspend by name: %v", err)
	}
	if _, err := h.app.ResumeTask(h.ctx, user("t1"), "task-train-001"); err != nil {
		t.Fatalf("resume by name: %v", err)
	}
	if got, err := h.app.CancelTask(h.ctx, user("t1"), "task-train-001", "by name"); err != nil || got.ID != train.ID || got.Status != domain.StatusCancelled {
		t.Fatalf("cancel by name = %s %s, %v", got.ID, got.Status, err)
	}
	if _, err := h.app.RetryTask(h.ctx, user("t1"), "task-train-001"); err != nil {
		t.Fatalf("retry by name: %v", err)
	}
	h.wantStatus(train.ID, domain.StatusPending)
	if _, err := h.app.CancelTask(h.ctx, user("t1"), "task-train-001", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.DeleteTask(h.ctx, user("t1"), "task-train-001"); err != nil {
		t.Fatalf("delete by name: %v", err)
	}
	_, err := h.app.GetTask(h.ctx, user("t1"), "task-train-001")
	wantErr(t, "a deleted task by its name", err, domain.ErrNotFound)
	_, err = h.app.GetTask(h.ctx, user("t1"), "never-given")
	wantErr(t, "a name no create was given", err, domain.ErrNotFound)
}

// depends_on takes the names creates gave, and the task depends on their
// ids; a name of another tenant, of a deleted task or of nothing is
// refused as a missing task, naming it.
func TestDependenciesNamedByTheirCreatesNames(t *testing.T) {
	h := newHarness(t)
	prep := h.createNamed(user("t1"), "prep", spec("prep"))
	data := h.create(user("t1"), spec("data"))
	train := h.create(user("t1"), spec("train", func(in *domain.SpecInput) { in.DependsOn = []string{"prep", data.ID, prep.ID} }))
	if want := []string{prep.ID, data.ID}; !slices.Equal(train.Spec.DependsOn, want) {
		t.Errorf("depends_on = %v, want %v (ids, each once)", train.Spec.DependsOn, want)
	}
	h.createNamed(user("t2"), "theirs", spec("theirs"))
	gone := h.createNamed(user("t1"), "gone", spec("gone"))
	if _, err := h.app.CancelTask(h.ctx, user("t1"), gone.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.DeleteTask(h.ctx, user("t1"), gone.ID); err != nil {
		t.Fatal(err)
	}
	for _, dep := range []string{"theirs", "gone", "nothing"} {
		_, err := h.app.CreateTasks(h.ctx, user("t1"), spec("after", func(in *domain.SpecInput) { in.DependsOn = []string{"prep", dep} }), "")
		wantInvalid(t, "depends on "+dep, err, "depends_on")
		if err != nil && !strings.Contains(err.Error(), `"`+dep+`"`) {
			t.Errorf("depends on %s: %v does not name it", dep, err)
		}
	}
}

// A failed lookup of a name is the store's failure, not a task not found;
// a task's own id is never looked up as a name.
func TestNameLookupFailureIsTheStores(t *testing.T) {
	h := newHarness(t)
	x := h.createNamed(user("t1"), "named", spec("x"))
	boom := errors.New("connection reset")
	h.store.FailOn("TasksNamed", boom)
	if got, err := h.app.GetTask(h.ctx, user("t1"), x.ID); err != nil || got.ID != x.ID {
		t.Errorf("get by id with the name lookup failing = %s, %v", got.ID, err)
	}
	_, err := h.app.GetTask(h.ctx, user("t1"), "named")
	wantErr(t, "get by name with the lookup failing", err, boom)
	_, err = h.app.CreateTasks(h.ctx, user("t1"), spec("after", func(in *domain.SpecInput) { in.DependsOn = []string{"named"} }), "")
	wantErr(t, "depends_on a name with the lookup failing", err, boom)
	if n := len(h.store.CallsOf("TasksNamed")); n != 2 {
		t.Errorf("%d name lookups, want 2 (none for the task's own id)", n)
	}
}

// parent_id names a task of the caller (by id or name) that the task
// waits for, as for depends_on: it is stored as the parent's id and among
// the dependencies. An unknown or another tenant's parent is refused,
// naming parent_id; an update that names a parent adds it too.
func TestParentIsADependency(t *testing.T) {
	h := newHarness(t)
	parent := h.createNamed(user("t1"), "prep", spec("parent"))
	child := h.create(user("t1"), spec("child", func(in *domain.SpecInput) { in.ParentID = "prep" }))
	if child.Spec.ParentID != parent.ID || !slices.Equal(child.Spec.DependsOn, []string{parent.ID}) {
		t.Fatalf("child: parent_id %q, depends_on %v; want %s in both", child.Spec.ParentID, child.Spec.DependsOn, parent.ID)
	}
	if got := h.claim("a1", "m1", 10); len(got) != 1 || got[0].ID != parent.ID {
		t.Fatalf("claimed %v, want only the parent while it is open", taskIDs(got))
	}
	theirs := h.create(user("t2"), spec("theirs"))
	for _, p := range []string{"no-such-task", theirs.ID} {
		_, err := h.app.CreateTasks(h.ctx, user("t1"), spec("orphan", func(in *domain.SpecInput) { in.ParentID = p }), "")
		wantInvalid(t, "parent "+p, err, "parent_id")
	}
	later := h.create(user("t1"), spec("later"))
	updated, err := h.app.UpdateTask(h.ctx, user("t1"), later.ID, domain.SpecInput{ParentID: parent.ID})
	if err != nil || !slices.Equal(updated.Spec.DependsOn, []string{parent.ID}) {
		t.Fatalf("update naming a parent: depends_on %v, %v", updated.Spec.DependsOn, err)
	}
	_, err = h.app.UpdateTask(h.ctx, user("t1"), later.ID, domain.SpecInput{ParentID: theirs.ID})
	wantInvalid(t, "an update naming another tenant's parent", err, "depends_on")
}
