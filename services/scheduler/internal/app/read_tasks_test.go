package app_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func TestGetTaskIsScopedToTheCallersTenant(t *testing.T) {
	h := newHarness(t)
	x := h.create(user("t1"), spec("a"))
	if got, err := h.app.GetTask(h.ctx, user("t1"), x.ID); err != nil || got.ID != x.ID {
		t.Errorf("own task = %+v, %v", got, err)
	}
	if _, err := h.app.GetTask(h.ctx, admin, x.ID); err != nil {
		t.Errorf("an admin's read: %v", err)
	}
	_, err := h.app.GetTask(h.ctx, user("t2"), x.ID)
	wantErr(t, "another tenant's task is not found (30004)", err, domain.ErrNotFound)
}

func TestListTasksListsTheCallersTenant(t *testing.T) {
	h := newHarness(t)
	a := h.create(user("t1"), spec("a"))
	h.clock.Advance(time.Second)
	b := h.create(user("t1"), spec("b"))
	h.create(user("t2"), spec("c"))
	// The caller's tenant wins over any tenant a filter names.
	got, next, err := h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{Tenant: "*", PageSize: 1})
	if err != nil || len(got) != 1 || got[0].ID != b.ID || next == "" {
		t.Fatalf("first page = %v, %q, %v", taskIDs(got), next, err)
	}
	got, next, err = h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{PageSize: 1, PageToken: next})
	if err != nil || len(got) != 1 || got[0].ID != a.ID || next != "" {
		t.Errorf("second page = %v, %q, %v", taskIDs(got), next, err)
	}
	if got, _, err := h.app.ListTasks(h.ctx, admin, app.ListFilter{}); err != nil || len(got) != 3 {
		t.Errorf("an admin's list = %v, %v", taskIDs(got), err)
	}
	_, _, err = h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{PageToken: "forged"})
	wantErr(t, "a forged page token", err, app.ErrBadPageToken)
	if calls := h.store.CallsOf("List"); calls[0] != "t1" {
		t.Errorf("List calls = %v", calls)
	}
}

// A type filter no task can have is refused, naming type and the types
// there are, before the read model is asked; a known type lists only the
// caller's tasks of that type.
func TestListTasksFiltersByType(t *testing.T) {
	h := newHarness(t)
	a := h.create(user("t1"), spec("a"))
	h.create(user("t1"), domain.SpecInput{Name: "n", Type: domain.TypeNoop})
	h.create(user("t2"), spec("c"))
	got, _, err := h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{Type: domain.TypeShell})
	if err != nil || len(got) != 1 || got[0].ID != a.ID {
		t.Errorf("shell tasks = %v, %v", taskIDs(got), err)
	}
	calls := len(h.store.CallsOf("List"))
	_, _, err = h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{Type: "bash"})
	wantErr(t, "an unknown type", err, domain.ErrInvalid)
	var invalid *domain.InvalidError
	if !errors.As(err, &invalid) || invalid.Field != "type" || !strings.Contains(invalid.Reason, "shell, python, script, noop, video") {
		t.Errorf("unknown type: %v", err)
	}
	if len(h.store.CallsOf("List")) != calls {
		t.Errorf("an unknown type was listed")
	}
}

// A creation window that ends before it starts is refused, naming
// created_after, before the read model is asked; an empty window (the two
// equal) is a valid question with no answer.
func TestListTasksRefusesAWindowEndingBeforeItStarts(t *testing.T) {
	h := newHarness(t)
	h.create(user("t1"), spec("a"))
	at := h.clock.Now()
	calls := len(h.store.CallsOf("List"))
	_, _, err := h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{CreatedAfter: at.Add(time.Hour), CreatedBefore: at})
	wantErr(t, "created_after after created_before", err, domain.ErrInvalid)
	var invalid *domain.InvalidError
	if !errors.As(err, &invalid) || invalid.Field != "created_after" || !strings.Contains(invalid.Reason, "created_before") {
		t.Errorf("reversed window: %v", err)
	}
	if len(h.store.CallsOf("List")) != calls {
		t.Errorf("a reversed window was listed")
	}
	if got, _, err := h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{CreatedAfter: at, CreatedBefore: at}); err != nil || len(got) != 0 {
		t.Errorf("an empty window = %v, %v", taskIDs(got), err)
	}
}

func TestWatchSignalsChangesOfOneTask(t *testing.T) {
	h := newHarness(t)
	x := h.create(user("t1"), spec("a"))
	y := h.create(user("t1"), spec("b"))
	changes, cancel := h.app.Watch(x.ID)
	defer cancel()
	if _, err := h.app.CancelTask(h.ctx, user("t1"), y.ID, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
		t.Error("a change of another task was signalled")
	default:
	}
	if _, err := h.app.CancelTask(h.ctx, user("t1"), x.ID, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	default:
		t.Error("the watched task's change was not signalled")
	}
}

func TestVideoTasksCreatedBeforeReadsTheStore(t *testing.T) {
	h := newHarness(t)
	video := spec("v", func(in *domain.SpecInput) {
		in.Type, in.Command = domain.TypeVideo, ""
		in.Video = &domain.Video{Model: "m", Type: "text_to_video", Prompt: "p", Width: 832, Height: 480, Duration: 5, FrameNum: 81}
	})
	old := h.create(user("t1"), video)
	h.clock.Advance(time.Hour)
	h.create(user("t2"), video)
	got, err := h.app.VideoTasksCreatedBefore(h.ctx, apptest.T0.Add(time.Minute), 10)
	if err != nil || len(got) != 1 || got[0].ID != old.ID {
		t.Errorf("old video tasks = %v, %v", taskIDs(got), err)
	}
}
