package app

import (
	"context"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// SuspendTask pauses a task (docs/api/tasks.md#suspend-and-resume): a
// pending one is held out of the queue, a leased one's agent is told to
// stop it at its next heartbeat (a cooperative task saves its checkpoint
// first). The quota service frees its admission either way.
func (a *App) SuspendTask(ctx context.Context, c Caller, id, reason string) (domain.Task, error) {
	return a.mutateNamed(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Suspend(now, c.Subject, reason)
	})
}

// ResumeTask puts a suspended task back in the queue; its next run gets
// its last checkpoint back.
func (a *App) ResumeTask(ctx context.Context, c Caller, id string) (domain.Task, error) {
	return a.mutateNamed(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Resume(now, c.Subject)
	})
}
