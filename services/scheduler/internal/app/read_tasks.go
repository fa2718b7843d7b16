package app

import (
	"context"
	"fmt"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// GetTask returns one of the caller's tasks as of every acknowledged write,
// by its id or by the name its create gave it (byClientID).
func (a *App) GetTask(ctx context.Context, c Caller, id string) (domain.Task, error) {
	return a.byClientID(ctx, c, id, func(id string) (domain.Task, error) { return a.tasks.Get(ctx, c.Tenant, id) })
}

// TasksByID returns the caller's tasks among ids by id (as GetTask reads
// them: every acknowledged write); the others are left out.
func (a *App) TasksByID(ctx context.Context, c Caller, ids []string) (map[string]domain.Task, error) {
	out := make(map[string]domain.Task, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	ts, err := a.tasks.GetMany(ctx, c.Tenant, ids)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		out[t.ID] = t
	}
	return out, nil
}

// ListTasks lists the caller's tasks from TaskViews, once it shows the
// caller's changes committed before the call (awaitViews). A type filter
// no task can have is refused with the types there are, as a spec's type
// is (docs/api/tasks.md, ListTasks).
func (a *App) ListTasks(ctx context.Context, c Caller, f ListFilter) ([]domain.Task, string, error) {
	if f.Type != "" {
		if err := domain.CheckType(f.Type); err != nil {
			return nil, "", err
		}
	}
	// A window that ends before it starts is a mistake in the request, not
	// an empty answer: refused as the audit log refuses from after to.
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && f.CreatedAfter.After(f.CreatedBefore) {
		return nil, "", &domain.InvalidError{Field: "created_after", Reason: "is after created_before"}
	}
	if err := CheckListStart(f.Offset, f.PageToken); err != nil {
		return nil, "", err
	}
	if f.PageSize <= 0 {
		f.PageSize = DefaultPageSize
	}
	f.Tenant = c.Tenant
	if err := a.awaitViews(ctx, f.Tenant); err != nil {
		return nil, "", err
	}
	return a.views.List(ctx, f)
}

// How long a list waits for TaskViews to show the changes committed
// before it, and how often it looks again.
const (
	listWaitLimit = time.Second
	listWaitPoll  = 5 * time.Millisecond
)

// awaitViews waits until TaskViews shows the tenant's task changes that
// were committed when the list was asked (among the latest changes), so
// that a client listing right after it created, cancelled or completed a
// task sees that change: the projection trails the writes by the relay's
// and the consumer's lag, tens of milliseconds. Changes committed after
// the call are not waited for, so steady writes do not hold a list up.
// Past listWaitLimit (a projection far behind, or stopped) the list
// answers from the views as they are: lists stay eventually consistent,
// never unavailable (docs/api/tasks.md, "Lists show your writes").
func (a *App) awaitViews(ctx context.Context, tenant string) error {
	pending, err := a.views.Unapplied(ctx, tenant)
	if err != nil || len(pending) == 0 {
		return err
	}
	deadline := time.NewTimer(listWaitLimit)
	defer deadline.Stop()
	poll := time.NewTicker(listWaitPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil
		case <-poll.C:
		}
		if done, err := a.views.Applied(ctx, pending); err != nil || done {
			return err
		}
	}
}

// CheckListStart refuses where a listing is asked to start when it cannot:
// an offset out of 0 to MaxListOffset, or an offset beside a page token
// (the one starts a listing, the other continues one). Every list that
// pages by offset as well as by token checks the same.
func CheckListStart(offset int, pageToken string) error {
	switch {
	case offset < 0 || offset > MaxListOffset:
		return &domain.InvalidError{Field: "offset", Reason: fmt.Sprintf("must be 0 to %d; page on with page_token", MaxListOffset)}
	case offset > 0 && pageToken != "":
		return &domain.InvalidError{Field: "offset", Reason: "starts a listing; page_token continues one: give one of them"}
	}
	return nil
}
