package app

import (
	"context"
	"fmt"
)

// TaskAdmission is where a task stands in admission.
type TaskAdmission struct {
	TaskID string
	Explanation
	AdmittedAtUnixNano int64
}

// ExplainTask explains the caller's task. A task of another tenant is
// ErrNotFound, as is one that never needed admission and is unknown here
// (state none is reported for an operator's query of such a task).
func (a *App) ExplainTask(ctx context.Context, c Caller, taskID string) (TaskAdmission, error) {
	out := TaskAdmission{TaskID: taskID}
	rec, ex, known, live := a.loop.explain(taskID)
	if !live || !known {
		// A standby, or a workload the loop does not hold (a finished
		// one, Loop.work): the recorded state, without the core's detail.
		r, ok, err := a.store.Workload(ctx, taskID)
		if err != nil {
			return out, err
		}
		rec, known = r, ok
		ex = Explanation{ClusterQueue: r.ClusterQueue, State: r.State, Flavors: r.Flavors, Reason: r.Reason}
	}
	if !known || (!c.Operator && rec.TenantID != c.TenantID) {
		// The same words whether the task is another tenant's or none.
		return out, fmt.Errorf("task %q is in no admission queue (it needs no admission, waits for its dependencies to complete, or does not exist): %w",
			taskID, ErrNotFound)
	}
	out.Explanation = ex
	if ex.State == StateAdmitted && ex.Flavors == nil {
		out.Flavors = rec.Flavors
	}
	if !rec.AdmittedAt.IsZero() && (ex.State == StateAdmitted || ex.State == StateEvicting) {
		out.AdmittedAtUnixNano = rec.AdmittedAt.UnixNano()
	}
	return out, nil
}
