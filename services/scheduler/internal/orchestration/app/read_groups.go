package app

import (
	"context"
	"errors"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// GetGroup returns one of the caller's groups with every member, as of
// every acknowledged write. An id no task group has but some of the
// caller's tasks have as their group_id (a fan-out's, a client's own) is
// those tasks as a group (orch.TaskSet), up to MaxTaskSet of them.
func (a *App) GetGroup(ctx context.Context, c sched.Caller, id string) (orch.State, error) {
	st, err := a.groups.Get(ctx, c.Tenant, id, All)
	return a.orTaskSet(ctx, c, id, st, err)
}

// orTaskSet is st and err, a task group's read, unless err says there is
// no such group and the caller has tasks of that group_id: then it is
// those tasks as a group (orch.TaskSet), every member of it.
func (a *App) orTaskSet(ctx context.Context, c sched.Caller, id string, st orch.State, err error) (orch.State, error) {
	if !errors.Is(err, task.ErrNotFound) || id == "" {
		return st, err
	}
	tasks, lerr := a.tasksOfGroup(ctx, c, id)
	if lerr != nil {
		return st, lerr
	}
	if set, ok := orch.TaskSet(id, tasks); ok {
		return set, nil
	}
	return st, err
}

// MaxTaskSet bounds the tasks GetGroup shows as a group of tasks: a
// fan-out makes at most sched.MaxFanout, and a client's own group_id
// gathers no more than that into one answer.
const MaxTaskSet = sched.MaxFanout

// tasksOfGroup lists up to MaxTaskSet of the caller's tasks whose
// group_id is id.
func (a *App) tasksOfGroup(ctx context.Context, c sched.Caller, id string) ([]task.Task, error) {
	var out []task.Task
	f := sched.ListFilter{Group: id, PageSize: 1000}
	for len(out) < MaxTaskSet {
		page, next, err := a.tasks.ListTasks(ctx, c, f)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == "" {
			break
		}
		f.PageToken = next
	}
	return out[:min(len(out), MaxTaskSet)], nil
}

// GroupChanges returns one of the caller's groups with the members that
// changed after its version since (a watcher's next step); a group of
// tasks (GetGroup) comes whole.
func (a *App) GroupChanges(ctx context.Context, c sched.Caller, id string, since int64) (orch.State, error) {
	st, err := a.groups.Changed(ctx, c.Tenant, id, since)
	return a.orTaskSet(ctx, c, id, st, err)
}

// ListGroups lists the caller's groups, newest first, without members.
func (a *App) ListGroups(ctx context.Context, c sched.Caller, f GroupFilter) ([]orch.Group, string, error) {
	if err := sched.CheckListStart(f.Offset, f.PageToken); err != nil {
		return nil, "", err
	}
	f.Tenant = c.Tenant
	return a.groups.List(ctx, f)
}
