package app

import (
	"context"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// GetTask returns one of the caller's tasks as of every acknowledged write.
func (a *App) GetTask(ctx context.Context, c Caller, id string) (domain.Task, error) {
	return a.tasks.Get(ctx, c.Tenant, id)
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

// ListTasks lists the caller's tasks from TaskViews (eventually
// consistent: it trails writes by the relay and projection lag). A type
// filter no task can have is refused with the types there are, as a
// spec's type is (docs/api/tasks.md, ListTasks).
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
	f.Tenant = c.Tenant
	return a.views.List(ctx, f)
}
