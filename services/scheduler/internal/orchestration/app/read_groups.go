package app

import (
	"context"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// GetGroup returns one of the caller's groups with every member, as of
// every acknowledged write.
func (a *App) GetGroup(ctx context.Context, c sched.Caller, id string) (orch.State, error) {
	return a.groups.Get(ctx, c.Tenant, id, All)
}

// GroupChanges returns one of the caller's groups with the members that
// changed after its version since (a watcher's next step).
func (a *App) GroupChanges(ctx context.Context, c sched.Caller, id string, since int64) (orch.State, error) {
	return a.groups.Changed(ctx, c.Tenant, id, since)
}

// ListGroups lists the caller's groups, newest first, without members.
func (a *App) ListGroups(ctx context.Context, c sched.Caller, f GroupFilter) ([]orch.Group, string, error) {
	f.Tenant = c.Tenant
	return a.groups.List(ctx, f)
}
