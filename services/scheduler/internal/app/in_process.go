package app

import (
	"context"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// ChangeTask lets an in-process component with lifecycle rules of its own
// (the video API's DELETE table, its retention) decide on a task: decide
// runs on the task as locked for the write, so a rule that depends on the
// state cannot race with an agent changing it. Deleted tasks and tasks of
// other tenants are ErrNotFound; decide's errors are returned as they are.
func (a *App) ChangeTask(ctx context.Context, c Caller, id string, decide func(t domain.Task, now time.Time) ([]domain.Record, error)) (domain.Task, error) {
	return a.mutate(ctx, c, id, decide)
}

// VideoTasksCreatedBefore lists up to limit video tasks of every tenant
// submitted before before, oldest first (the video API's retention sweep).
func (a *App) VideoTasksCreatedBefore(ctx context.Context, before time.Time, limit int) ([]domain.Task, error) {
	return a.tasks.VideoTasksCreatedBefore(ctx, before, limit)
}
