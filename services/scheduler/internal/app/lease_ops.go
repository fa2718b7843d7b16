package app

import (
	"context"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// StartTask marks the attempt running (idempotent for the same attempt).
func (a *App) StartTask(ctx context.Context, c Caller, id, agentID, attemptID string) (domain.Task, error) {
	if err := c.checkAgent(agentID); err != nil {
		return domain.Task{}, err
	}
	return a.mutate(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Start(now, agentID, attemptID)
	})
}

// RenewLease extends the attempt's lease.
func (a *App) RenewLease(ctx context.Context, c Caller, id, agentID, attemptID string, extendSec int) (domain.Task, error) {
	if err := c.checkAgent(agentID); err != nil {
		return domain.Task{}, err
	}
	return a.mutate(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Renew(now, agentID, attemptID, extendSec)
	})
}

// ReportProgress records progress of the attempt.
func (a *App) ReportProgress(ctx context.Context, c Caller, id, agentID, attemptID string, progress int, message string) (domain.Task, error) {
	if err := c.checkAgent(agentID); err != nil {
		return domain.Task{}, err
	}
	return a.mutate(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.ReportProgress(now, agentID, attemptID, progress, message)
	})
}
