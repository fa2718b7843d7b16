package app_test

import (
	"context"
	"errors"
	"fmt"
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
	h.wantListRefused(t, "an unknown type", app.ListFilter{Type: "bash"}, "type", "shell, python, script, noop, video")
}

// wantListRefused checks that listing by f is refused as invalid, naming
// field and saying says, without asking the read model.
func (h *harness) wantListRefused(t *testing.T, what string, f app.ListFilter, field, says string) {
	t.Helper()
	calls := len(h.store.CallsOf("List"))
	_, _, err := h.app.ListTasks(h.ctx, user("t1"), f)
	wantErr(t, what, err, domain.ErrInvalid)
	wantInvalid(t, what, err, field)
	if !strings.Contains(err.Error(), says) {
		t.Errorf("%s: %v does not say %q", what, err, says)
	}
	if len(h.store.CallsOf("List")) != calls {
		t.Errorf("%s was listed", what)
	}
}

// A creation window that ends before it starts is refused, naming
// created_after, before the read model is asked; an empty window (the two
// equal) is a valid question with no answer.
func TestListTasksRefusesAWindowEndingBeforeItStarts(t *testing.T) {
	h := newHarness(t)
	h.create(user("t1"), spec("a"))
	at := h.clock.Now()
	h.wantListRefused(t, "a reversed window", app.ListFilter{CreatedAfter: at.Add(time.Hour), CreatedBefore: at},
		"created_after", "is after created_before")
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

// laggingViews is a read model that shows the tasks after a number of
// looks: the projection trailing the writes.
type laggingViews struct {
	app.TaskViews
	unappliedFor string // the tenant Unapplied was asked about
	looks, after int    // Applied is true from the after-th look on (0: never)
}

func (v *laggingViews) Unapplied(_ context.Context, tenant string) ([]app.TaskVersion, error) {
	v.unappliedFor = tenant
	return []app.TaskVersion{{ID: "task-x", Version: 2}}, nil
}

func (v *laggingViews) Applied(_ context.Context, changes []app.TaskVersion) (bool, error) {
	v.looks++
	if len(changes) != 1 || changes[0] != (app.TaskVersion{ID: "task-x", Version: 2}) {
		return false, fmt.Errorf("asked about %v", changes)
	}
	return v.after > 0 && v.looks >= v.after, nil
}

func laggingHarness(t *testing.T, after int) (*harness, *laggingViews) {
	h := newHarness(t)
	stores := h.store.Stores()
	lag := &laggingViews{TaskViews: stores.Views, after: after}
	stores.Views = lag
	h.app = app.New(stores, h.objects, h.clock.Now, h.hub, app.Config{}, nil)
	return h, lag
}

// A list waits until the read model shows the caller's changes committed
// before it, and lists then.
func TestListTasksWaitsForTheViewsToShowEarlierChanges(t *testing.T) {
	h, lag := laggingHarness(t, 3)
	x := h.create(user("t1"), spec("a"))
	got, _, err := h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{})
	if err != nil || len(got) != 1 || got[0].ID != x.ID {
		t.Fatalf("list = %v, %v", taskIDs(got), err)
	}
	if lag.unappliedFor != "t1" || lag.looks != 3 {
		t.Errorf("Unapplied asked for %q, Applied looked %d times; want t1 and 3", lag.unappliedFor, lag.looks)
	}
}

// A read model that does not catch up (a projection stopped) delays a
// list by the bound, and the list answers from it as it is.
func TestListTasksDoesNotWaitForeverForTheViews(t *testing.T) {
	h, lag := laggingHarness(t, 0)
	x := h.create(user("t1"), spec("a"))
	began := time.Now()
	got, _, err := h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{})
	if err != nil || len(got) != 1 || got[0].ID != x.ID {
		t.Fatalf("list = %v, %v", taskIDs(got), err)
	}
	if lag.looks < 2 || time.Since(began) < time.Second {
		t.Errorf("gave up after %d looks and %s; want the one-second bound", lag.looks, time.Since(began))
	}
	// A caller that gives up first gets its context's error.
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	if _, _, err := h.app.ListTasks(ctx, user("t1"), app.ListFilter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled list: %v", err)
	}
}

// An offset skips that many of the matching tasks; it starts a listing,
// so it does not go with a page token, and it is bounded.
func TestListTasksByOffset(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for i := range 5 {
		h.clock.Advance(time.Second)
		ids = append(ids, h.create(user("t1"), spec(fmt.Sprint("task-", i))).ID)
	}
	got, next, err := h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{PageSize: 2, Offset: 2})
	if err != nil || len(got) != 2 || got[0].ID != ids[2] || got[1].ID != ids[1] || next == "" {
		t.Fatalf("offset 2 = %v, %q, %v; want %v", taskIDs(got), next, err, []string{ids[2], ids[1]})
	}
	if got, next, err := h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{PageSize: 2, Offset: 4}); err != nil || len(got) != 1 || got[0].ID != ids[0] || next != "" {
		t.Errorf("offset 4 = %v, %q, %v", taskIDs(got), next, err)
	}
	if got, _, err := h.app.ListTasks(h.ctx, user("t1"), app.ListFilter{Offset: 9}); err != nil || len(got) != 0 {
		t.Errorf("offset past the end = %v, %v", taskIDs(got), err)
	}
	for _, f := range []app.ListFilter{{Offset: app.MaxListOffset + 1}, {Offset: -1}, {Offset: 2, PageToken: next}} {
		_, _, err := h.app.ListTasks(h.ctx, user("t1"), f)
		var invalid *domain.InvalidError
		if !errors.As(err, &invalid) || invalid.Field != "offset" {
			t.Errorf("%+v: %v, want an invalid offset", f, err)
		}
	}
}
