package app

import (
	"context"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// GetTask returns one of the caller's tasks as of every acknowledged write.
func (a *App) GetTask(ctx context.Context, c Caller, id string) (domain.Task, error) {
	return a.tasks.Get(ctx, c.Tenant, id)
}

// ListTasks lists the caller's tasks from TaskViews (eventually
// consistent: it trails writes by the relay and projection lag).
func (a *App) ListTasks(ctx context.Context, c Caller, f ListFilter) ([]domain.Task, string, error) {
	f.Tenant = c.Tenant
	return a.views.List(ctx, f)
}
