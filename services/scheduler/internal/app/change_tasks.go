package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// UpdateTask changes a pending task: domain.UpdatedSpec says how the
// fields given change its spec.
//
// The new spec's queue is resolved first (a call to the quota service,
// which must not happen inside the task's batch) against the task as read;
// should a concurrent update change what admission depends on before this
// one lands, it starts over.
func (a *App) UpdateTask(ctx context.Context, c Caller, id string, in domain.SpecInput) (domain.Task, error) {
	for attempt := 0; ; attempt++ {
		t, err := a.updateTask(ctx, c, id, in)
		if !errors.Is(err, errResolvedStale) || attempt == 2 {
			return t, err
		}
	}
}

// errResolvedStale: the queue was resolved for a spec that changed since.
var errResolvedStale = errors.New("task changed while its queue was resolved")

func (a *App) updateTask(ctx context.Context, c Caller, id string, in domain.SpecInput) (domain.Task, error) {
	cur, err := a.GetTask(ctx, c, id)
	if err != nil {
		return domain.Task{}, err
	}
	id = cur.ID // the client may have named it (byClientID)
	want, err := domain.UpdatedSpec(cur.Spec, in)
	if err != nil {
		return domain.Task{}, err
	}
	want = want.WithParent()
	if err := a.checkMemberDependencies(ctx, c, cur, want); err != nil {
		return domain.Task{}, err
	}
	if err := a.checkAddedDependencies(ctx, cur, want.DependsOn); err != nil {
		return domain.Task{}, err
	}
	cq, err := a.resolveQueue(ctx, c, want)
	if err != nil {
		return domain.Task{}, err
	}
	return a.mutate(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		spec, err := domain.UpdatedSpec(t.Spec, in)
		if err != nil {
			return nil, err
		}
		spec = spec.WithParent()
		if spec.Queue != want.Queue || spec.Quota != want.Quota || !maps.Equal(spec.Resources, want.Resources) {
			return nil, errResolvedStale
		}
		return t.Update(now, c.Subject, spec, cq)
	})
}

// checkMemberDependencies refuses to change the dependencies of a task
// group's member: its group ordered it among the others (a serial group
// after the member before it, a DAG after its edges), and a member whose
// depends_on were cleared would run out of that order
// (docs/api/task-groups.md). A task whose group_id is no task group's (a
// fan-out's, the client's own) keeps the dependencies it is given.
func (a *App) checkMemberDependencies(ctx context.Context, c Caller, cur domain.Task, want domain.Spec) error {
	if a.groups == nil || cur.Spec.GroupID == "" || slices.Equal(cur.Spec.WithParent().DependsOn, want.DependsOn) {
		return nil
	}
	member, err := a.groups.IsMember(ctx, c, cur)
	if err != nil || !member {
		return err
	}
	return &domain.InvalidError{Field: "depends_on", Reason: fmt.Sprintf(
		"task %s is a member of task group %s, which orders its members; its dependencies are the group's", cur.ID, cur.Spec.GroupID)}
}

// checkAddedDependencies fetches the tasks deps names beyond those t
// already depends on, for domain.Task.CheckAddedDependencies.
func (a *App) checkAddedDependencies(ctx context.Context, t domain.Task, deps []string) error {
	var added []string
	for _, d := range deps {
		if !slices.Contains(t.Spec.DependsOn, d) && !slices.Contains(added, d) {
			added = append(added, d)
		}
	}
	if len(added) == 0 {
		return nil
	}
	found, err := a.tasks.GetMany(ctx, t.TenantID, added)
	if err != nil {
		return err
	}
	return t.CheckAddedDependencies(added, found)
}

// DeleteTask removes a task no attempt holds.
func (a *App) DeleteTask(ctx context.Context, c Caller, id string) (domain.Task, error) {
	return a.mutateNamed(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Delete(now, c.Subject)
	})
}

// CancelTask cancels a task that is not final; its agent is told to stop
// the attempt at its next heartbeat.
func (a *App) CancelTask(ctx context.Context, c Caller, id, reason string) (domain.Task, error) {
	return a.mutateNamed(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Cancel(now, c.Subject, reason)
	})
}

// GroupMembers is what RetryTask and UpdateTask need of task groups (the orchestration
// use cases): a task group follows its members, so a member is retried
// through its group, which follows it again or refuses
// (docs/api/task-groups.md#retrying-a-member).
type GroupMembers interface {
	// RetryMember retries t through the task group its group_id names and
	// returns it as retried. member is false when t is no member of a task
	// group of c's (a fan-out's task, a group_id the client chose): then
	// nothing was done.
	RetryMember(ctx context.Context, c Caller, t domain.Task) (out domain.Task, member bool, err error)
	// IsMember reports whether t is a member of the task group its
	// group_id names, one of c's.
	IsMember(ctx context.Context, c Caller, t domain.Task) (bool, error)
}

// RetryTask puts a failed or cancelled task back to pending. A member of
// a task group is retried by its group (GroupMembers).
func (a *App) RetryTask(ctx context.Context, c Caller, id string) (domain.Task, error) {
	if a.groups != nil {
		t, err := a.GetTask(ctx, c, id)
		if err != nil {
			return domain.Task{}, err
		}
		if t.Spec.GroupID != "" {
			out, member, err := a.groups.RetryMember(ctx, c, t)
			if member {
				if err == nil && out.HeldForDependencies {
					a.releaseHeldSoon() // its dependencies may have completed
				}
				return out, err
			}
		}
		id = t.ID // the client may have named it (byClientID)
	}
	return a.mutateNamed(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Retry(now, c.Subject)
	})
}
