package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
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

// IsMember reports whether t is the task of a member of the task group its
// group_id names, one of c's (not a fan-out's task, nor one given a
// group_id by its client).
func (a *App) IsMember(ctx context.Context, c sched.Caller, t task.Task) (bool, error) {
	if t.Spec.GroupID == "" {
		return false, nil
	}
	st, err := a.groups.Get(ctx, c.Tenant, t.Spec.GroupID, All)
	if errors.Is(err, task.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, m := range st.Members {
		if m.TaskID == t.ID {
			return true, nil
		}
	}
	return false, nil
}

// RetryMember retries task t, a member of the task group its group_id
// names, through that group: the group follows the member again (and, in
// a dag, brings back the descendants it had cancelled because of it), or
// refuses — it has ended, it is a repeat, the member's dependency failed
// (orch.State.RetryMember, docs/api/task-groups.md#retrying-a-member). It
// returns the task as retried. member is false when t is no member of a
// task group of the caller (a fan-out's task, a group_id a client chose):
// then nothing was done, and t is retried as any task is.
func (a *App) RetryMember(ctx context.Context, c sched.Caller, t task.Task) (out task.Task, member bool, err error) {
	if t.Spec.GroupID == "" {
		return task.Task{}, false, nil
	}
	_, written, err := a.mutateTasks(ctx, c, t.Spec.GroupID, All,
		func(s orch.State, facts map[string]orch.Facts, now time.Time) (orch.State, orch.Decision, error) {
			return s.RetryMember(now, facts, c.Subject, t.ID)
		})
	switch {
	case errors.Is(err, orch.ErrNotMember), errors.Is(err, task.ErrNotFound):
		// No such group of the caller's, or the task is gone: retried as
		// any task, it is not found either.
		return task.Task{}, false, nil
	case err != nil:
		return task.Task{}, true, err
	}
	for _, w := range written {
		if w.ID == t.ID {
			return w, true, nil
		}
	}
	return task.Task{}, true, fmt.Errorf("task group %s: the retry of task %s was not written", t.Spec.GroupID, t.ID)
}
