package app

import (
	"context"
	"fmt"
	"strings"
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
	if !c.Operator {
		ex = a.withoutOthersTasks(c.TenantID, ex)
	}
	out.Explanation = ex
	if ex.State == StateAdmitted && ex.Flavors == nil {
		out.Flavors = rec.Flavors
	}
	if !rec.AdmittedAt.IsZero() && (ex.State == StateAdmitted || ex.State == StateEvicting) {
		out.AdmittedAtUnixNano = rec.AdmittedAt.UnixNano()
	}
	if ex.State == StatePending {
		if err := a.explainQueue(ctx, rec.TenantID, &out.Explanation); err != nil {
			return out, err
		}
	}
	return out, nil
}

// explainQueue says so when a pending workload waits in a queue that
// admits nothing: one that does not exist (position 0: it is in no queue),
// or a closing WorkGroup queue (docs/api/quota.md#explaining-a-wait).
func (a *App) explainQueue(ctx context.Context, tenantID string, ex *Explanation) error {
	d, ok, err := a.store.GetDefinition(ctx, KindClusterQueue, ex.ClusterQueue)
	if err != nil {
		return err
	}
	switch {
	case !ok:
		ex.Position, ex.Shortages, ex.BlockedBy, ex.WaitingFor = 0, nil, "", nil
		ex.Reason = missingQueue(tenantID, ex.ClusterQueue)
	case d.Closing != "":
		ex.Reason = closingQueue(ex.Position, ex.ClusterQueue, d.Closing)
	}
	return nil
}

// missingQueue says why work waits in a ClusterQueue that does not exist.
// A WorkGroup queue's name says which GU quota it was for, and that only a
// quota of that name running again defines it anew.
func missingQueue(tenantID, queue string) string {
	if IsWorkGroupQueue(queue) {
		return fmt.Sprintf("cluster queue %s does not exist: its GU quota was deleted (or its WorkGroup stopped running); "+
			"the task waits until a GU quota of that name runs again", queue)
	}
	return fmt.Sprintf("cluster queue %s does not exist; the task waits until a cluster queue of that name is defined", queue)
}

// closingQueue says why work waits in a closing queue.
func closingQueue(position int, queue, why string) string {
	if position > 0 {
		return fmt.Sprintf("position %d in %s, which admits nothing new: %s", position, queue, why)
	}
	return fmt.Sprintf("in %s, which admits nothing new: %s", queue, why)
}

// anotherTenantsTask stands for a task of another tenant in an
// explanation shown to a tenant.
const anotherTenantsTask = "a task of another tenant"

// withoutOthersTasks takes the ids of other tenants' tasks out of ex, the
// StrictFIFO head it waits behind and the victims it waits for: a tenant
// learns that its task waits for another tenant's, never which one
// (docs/api/quota.md#explaining-a-wait). Its own tasks stay named.
func (a *App) withoutOthersTasks(tenantID string, ex Explanation) Explanation {
	ids := append([]string{ex.BlockedBy}, ex.WaitingFor...)
	tenants := a.loop.tenantsOf(ids)
	foreign := func(id string) bool { return id != "" && tenants[id] != tenantID }
	if foreign(ex.BlockedBy) {
		ex.Reason = strings.ReplaceAll(ex.Reason, ex.BlockedBy, anotherTenantsTask)
		ex.BlockedBy = ""
	}
	var own []string
	for _, id := range ex.WaitingFor {
		if foreign(id) {
			ex.Reason = strings.ReplaceAll(ex.Reason, id, anotherTenantsTask)
			continue
		}
		own = append(own, id)
	}
	if len(ex.WaitingFor) > 0 {
		ex.WaitingFor = own
	}
	return ex
}
