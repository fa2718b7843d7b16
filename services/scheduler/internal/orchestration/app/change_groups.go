package app

import (
	"context"
	"fmt"
	"time"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// StartGroup starts a pending group: its first members are released.
func (a *App) StartGroup(ctx context.Context, c sched.Caller, id string) (orch.State, error) {
	return a.mutate(ctx, c, id, Open, func(s orch.State, _ map[string]orch.Facts, now time.Time) (orch.State, orch.Decision, error) {
		return s.Start(now, c.Subject, a.newID)
	})
}

// CancelGroup cancels a group that is not final: members not released
// never run, pending ones are cancelled, running ones are stopped (their
// agents are told at their next heartbeat: SIGTERM, grace, SIGKILL). A
// group whose members have all ended by now ends by their outcome instead
// and the cancel is refused, as for any group that has ended.
func (a *App) CancelGroup(ctx context.Context, c sched.Caller, id, reason string) (orch.State, error) {
	return a.mutate(ctx, c, id, Open, func(s orch.State, facts map[string]orch.Facts, now time.Time) (orch.State, orch.Decision, error) {
		return s.Cancel(now, facts, c.Subject, reason)
	})
}

// DeleteGroup removes a group that is final or was never started, and its
// member tasks.
func (a *App) DeleteGroup(ctx context.Context, c sched.Caller, id string) error {
	_, err := a.mutate(ctx, c, id, All, func(s orch.State, _ map[string]orch.Facts, now time.Time) (orch.State, orch.Decision, error) {
		return s.Delete(now, c.Subject)
	})
	return err
}

// ResetRepeat closes the open breaker of a repeat so that its runs resume.
// Only an operator may (a tenant's caller is ErrForbidden); the operator,
// the reason and the time are recorded (TaskGroupRepeatReset, audited).
func (a *App) ResetRepeat(ctx context.Context, c sched.Caller, id, reason string) (orch.State, error) {
	if c.Tenant != "*" {
		return orch.State{}, fmt.Errorf("%w: only an operator may reset a repeat's circuit breaker", sched.ErrForbidden)
	}
	return a.mutate(ctx, c, id, Open, func(s orch.State, _ map[string]orch.Facts, now time.Time) (orch.State, orch.Decision, error) {
		return s.ResetRepeat(now, c.Subject, reason, a.newID)
	})
}
