package app

import (
	"context"
	"fmt"
)

// QueueWorkload hands the admission loop the stay of a task the scheduler
// has just stored waiting in a ClusterQueue (Loop.Queue) and answers
// whether it was admitted. Only the scheduler calls it, as an internal
// service with an operator's principal; a tenant gets
// ErrPermissionDenied. ErrNotActive when this instance's loop is a
// standby: the stay reaches the active loop through the task topic anyway.
// See docs/decisions/0055-direct-admission-of-new-tasks.md.
func (a *App) QueueWorkload(ctx context.Context, c Caller, f Fact) (QueueResult, error) {
	if !c.Operator {
		return QueueResult{}, fmt.Errorf("%w: queueing a workload is the scheduler's", ErrPermissionDenied)
	}
	if a.loop == nil {
		return QueueResult{}, ErrNotActive
	}
	return a.loop.Queue(ctx, f)
}

// FinishWorkload hands the admission loop the end of a task's workload
// (Loop.Finish) and returns the admissions of the cycle that applied it.
// The scheduler's only, like QueueWorkload; f must be a finish fact.
func (a *App) FinishWorkload(ctx context.Context, c Caller, f Fact) ([]Admission, error) {
	if !c.Operator {
		return nil, fmt.Errorf("%w: finishing a workload is the scheduler's", ErrPermissionDenied)
	}
	if f.Kind != FactFinish {
		return nil, fmt.Errorf("%w: a %s fact is not a workload's end", ErrInvalid, f.Kind)
	}
	if a.loop == nil {
		return nil, ErrNotActive
	}
	return a.loop.Finish(ctx, f)
}
