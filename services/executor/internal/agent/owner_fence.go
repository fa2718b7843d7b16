package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
)

// A local task may run under its creator's fence (docs/api/agent-local.md,
// "Fenced local tasks"), as a leased task runs under the server's: a
// Slurm backend hands a task to its node's agent and follows it there,
// and if the backend dies or freezes, nothing of it remains to stop the
// task once the server leases it elsewhere. So the backend creates the
// task with a fence and renews it as it reads the task; the shim stops
// the task when a renewal is late, whether this agent is alive or not.
//
// The deadline lives in memory and in the shim, never in the journal:
// only lengths cross between processes. After a restart a waiting task's
// deadline is unknown, and it does not start until its creator renews
// it (awaitFence).

// ownerFenceLeft is how long the local task id may run from now unless
// its creator renews its fence; 0 or less when the deadline passed or is
// unknown.
func (a *Agent) ownerFenceLeft(id string) time.Duration {
	a.mu.Lock()
	deadline, ok := a.ownerFences[id]
	a.mu.Unlock()
	if !ok {
		return 0
	}
	return time.Until(deadline)
}

// setOwnerFence moves the fence of local task id to d from now.
func (a *Agent) setOwnerFence(id string, d time.Duration) {
	a.mu.Lock()
	if a.ownerFences == nil {
		a.ownerFences = map[string]time.Time{}
	}
	a.ownerFences[id] = time.Now().Add(d)
	a.mu.Unlock()
}

// forgetOwnerFence drops the deadline of a task that will not run again
// here (its attempt ended and no retry follows).
func (a *Agent) forgetOwnerFence(t journal.Task, o journal.Outcome) {
	if !t.OwnerFenced() || (o.Status == journal.StatusFailed && t.RetryCount < t.MaxRetries) {
		return
	}
	a.mu.Lock()
	delete(a.ownerFences, t.ID)
	a.mu.Unlock()
}

// RenewFence moves the fence of the local task id (its newest attempt) to
// d from now and returns the task. A task that has ended is returned as
// it is: its creator learns the outcome from the renewal it sends while
// following it. The task must have been created with a fence (30005);
// an unknown one is 30004.
func (a *Agent) RenewFence(ctx context.Context, id string, d time.Duration) (journal.Task, error) {
	t, err := a.journal.Latest(journalCtx, id)
	if errors.Is(err, journal.ErrNotFound) {
		return journal.Task{}, rpcerr.New(rpcerr.TaskNotFound, fmt.Sprintf("task %s not found", id))
	}
	if err != nil {
		return journal.Task{}, rpcerr.New(rpcerr.Internal, err.Error())
	}
	if !t.OwnerFenced() {
		return journal.Task{}, rpcerr.New(rpcerr.InvalidArgument, fmt.Sprintf("task %s was created without a fence (fence_ms)", id))
	}
	if journal.Final(t.Status) {
		return t, nil
	}
	a.setOwnerFence(id, d)
	a.mu.Lock()
	at := a.runs[t.AttemptID]
	a.mu.Unlock()
	if at != nil {
		// Its goroutine passes the new fence to the shim (supervise).
		wake(at.fenceWake)
	}
	return t, nil
}
