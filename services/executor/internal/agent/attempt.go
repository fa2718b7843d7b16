package agent

import (
	"fmt"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/fence"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// attempt is an attempt this agent holds and has not finished: claimed,
// queued locally, or running.
type attempt struct {
	task journal.Task
	// stopCh holds the first stop request; later ones are dropped.
	stopCh chan stopRequest
	// fenceWake asks supervise to renew the shim's fence (fence.go).
	fenceWake chan struct{}
	// done is closed when the attempt's goroutine has ended.
	done chan struct{}
	// Tokens held: a process slot and/or a noop slot.
	slot, noop bool
	// started, when StartTask goes alongside the spawn, is closed once it
	// has been answered (execution.go).
	started chan struct{}
	// lapse is the agent's lapse count when the attempt was registered
	// (under the agent's mu).
	lapse int
}

func newAttempt(t journal.Task) *attempt {
	return &attempt{task: t, stopCh: make(chan stopRequest, 1), fenceWake: make(chan struct{}, 1), done: make(chan struct{})}
}

// stopRequest asks an attempt to stop.
type stopRequest struct {
	reason string
	detail string
	// grace before SIGKILL as the server gave it; nil means the task's own
	// grace_period_sec. 0 is SIGKILL right after SIGTERM.
	grace *time.Duration
}

func (at *attempt) requestStop(r stopRequest) {
	select {
	case at.stopCh <- r:
	default:
	}
}

// Agent-side stop reasons. The server's (cancelled, preempted, suspended,
// deleted, lease_lost) are used as given.
const (
	reasonCancelled    = "cancelled"
	reasonDeleted      = "deleted"
	reasonPreempted    = "preempted"
	reasonSuspended    = "suspended"
	reasonLeaseLost    = "lease_lost"
	reasonTaskFinal    = "task_final"
	reasonLocalCancel  = "local_cancel"
	reasonRecoveryLost = "lease_lost_while_away"
)

// stopOutcome maps why an attempt was stopped to the status recorded, the
// error reported and whether the server already decided the outcome (then
// there is nothing to complete: the attempt is not ours any more).
func (a *Agent) stopOutcome(t journal.Task, reason, detail string) (status, errText string, serverDecided bool) {
	switch reason {
	case reasonCancelled:
		status, errText, serverDecided = journal.StatusCancelled, "cancelled by the server", true
	case reasonDeleted:
		// The server cancelled the task as it deleted it (or its retention
		// ended): the attempt ends cancelled, as for a cancel.
		status, errText, serverDecided = journal.StatusCancelled, "deleted on the server", true
	case reasonPreempted:
		status, errText, serverDecided = journal.StatusPreempted, "preempted by the server", true
	case reasonSuspended:
		status, errText, serverDecided = journal.StatusCancelled, "suspended by the server", true
	case reasonLeaseLost:
		status, errText, serverDecided = journal.StatusFailed, "lease lost", true
	case reasonTaskFinal:
		status, errText, serverDecided = journal.StatusCancelled, "task is final on the server", true
	case reasonLocalCancel:
		status, errText = journal.StatusCancelled, "cancelled through the agent-local API"
	case reasonRecoveryLost:
		status, errText = journal.StatusFailed, "lease lost while the agent was away"
	case shim.StopTimeout:
		status, errText = journal.StatusFailed, fmt.Sprintf("timeout after %ds", t.Timeout)
	case shim.StopFenced:
		status, errText = journal.StatusFailed, fence.Message(a.cfg.fence)
		if t.OwnerFenced() {
			errText = fence.OwnerMessage
		}
	case shim.StopOrphaned:
		status, errText = journal.StatusFailed, fmt.Sprintf("orphaned: no agent attached for %s", a.cfg.OrphanGrace)
	case shim.StopTerminated:
		status, errText = journal.StatusFailed, "the shim was terminated"
	default:
		status, errText, serverDecided = journal.StatusFailed, "stopped by the server: "+reason, true
	}
	if detail != "" {
		errText += ": " + detail
	}
	return status, errText, serverDecided
}
