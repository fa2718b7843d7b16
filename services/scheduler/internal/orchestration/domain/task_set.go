package domain

import (
	"cmp"
	"slices"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// TaskSet shows tasks that share a group_id no task group has as a
// parallel group of that id: a fan-out's tasks (targets, broadcast,
// scatter, repeat_count) and tasks a client gave a group_id of its own.
// The design's group_id names a task group, so GET of it answers instead
// of 404 (docs/api/task-groups.md, "Fan-outs as groups"). It is a view,
// computed from the tasks as they are, never stored: no event makes it,
// and nothing decides for it. The members are the tasks, in creation
// order, each known by its task id; the status follows theirs: completed
// when all completed, failed when all ended and one failed, cancelled
// when all ended and one was cancelled (none failed), else running.
// ok is false without tasks.
func TaskSet(id string, tasks []task.Task) (s State, ok bool) {
	if len(tasks) == 0 {
		return State{}, false
	}
	tasks = slices.Clone(tasks)
	slices.SortStableFunc(tasks, func(a, b task.Task) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	first := tasks[0]
	g := Group{ID: id, TenantID: first.TenantID, CreatedBy: first.CreatedBy, Name: first.Spec.Name, Mode: ModeParallel,
		Total: len(tasks), Counts: map[task.Status]int{}, CreatedAt: first.CreatedAt, StartedAt: first.CreatedAt}
	s = State{Members: make(map[string]Member, len(tasks))}
	ended, failed, cancelled := 0, false, false
	for i, t := range tasks {
		g.Counts[t.Status]++
		g.UpdatedAt = latest(g.UpdatedAt, t.UpdatedAt)
		// Task versions only grow, so their sum grows with every change
		// of any task (and with every task added): a watcher's "changed
		// since" works as for a group's own version.
		g.Version += t.Version
		switch t.Status {
		case task.StatusFailed:
			failed = true
			g.failed(t.ID)
		case task.StatusCancelled:
			cancelled = true
		}
		if t.Status.Final() {
			ended++
			end := t.EndedAt
			if end.IsZero() {
				end = t.UpdatedAt // cancelled before it ran
			}
			g.EndedAt = latest(g.EndedAt, end)
		}
		s.Members[t.ID] = Member{Key: t.ID, Index: i, Name: t.Spec.Name, DependsOn: t.Spec.DependsOn, Spec: t.Spec,
			TaskID: t.ID, Status: t.Status, StartedAt: t.StartedAt, EndedAt: t.EndedAt, Error: t.Error}
	}
	switch {
	case ended < len(tasks):
		g.Status, g.EndedAt = StatusRunning, time.Time{}
	case failed:
		g.Status = StatusFailed
	case cancelled:
		g.Status = StatusCancelled
	default:
		g.Status = StatusCompleted
	}
	s.Group = g
	return s, true
}

// latest is the latest of ts.
func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}
