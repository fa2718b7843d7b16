package agent

import (
	"context"
	"fmt"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/policy"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
)

// journalCtx is the context of every journal call, never the agent's own:
// an outcome must be recorded even while the agent shuts down.
var journalCtx = context.Background()

// register makes at an active attempt. It reports false if the attempt is
// already active (a replayed claim, a second recovery).
func (a *Agent) register(at *attempt) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.runs[at.task.AttemptID]; ok {
		return false
	}
	at.lapse = a.lapses
	a.runs[at.task.AttemptID] = at
	return true
}

// release ends an attempt's goroutine: it returns its tokens and forgets it.
func (a *Agent) release(at *attempt) {
	a.mu.Lock()
	delete(a.runs, at.task.AttemptID)
	a.mu.Unlock()
	a.freeSlot(at)
	if at.noop {
		<-a.noops
	}
	close(at.done)
}

// freeSlot returns the attempt's process slot once its process is over and
// its outcome journaled: delivering the outcome (result upload,
// CompleteTask) goes on without it, so the next task starts meanwhile.
// Only the attempt's goroutine calls it.
func (a *Agent) freeSlot(at *attempt) {
	if at.slot {
		at.slot = false
		<-a.slots
	}
}

func (a *Agent) active(attemptID string) *attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[attemptID]
}

// execute runs a new attempt from the start. It is the goroutine of the
// attempt; tokens were taken by the caller.
func (a *Agent) execute(ctx context.Context, at *attempt) {
	defer a.release(at)
	t := at.task
	log := a.log.With("task_id", t.ID, "attempt_id", t.AttemptID)

	if err := a.policy.Check(policy.Task{Type: t.Type, Command: t.Command, Args: t.Args, Env: t.Env, Workdir: t.Workdir}); err != nil {
		log.Warn("task refused", "reason", err)
		a.finish(ctx, at, a.failedBeforeStart(err.Error()))
		return
	}
	select {
	case r := <-at.stopCh:
		// Stopped before it started (heartbeat stop, local cancel, or a
		// lease found lost during recovery): nothing runs.
		a.finishStopped(ctx, at, r)
		return
	default:
	}
	if policy.NormalizeType(t.Type) == policy.TypeNoop {
		now := a.now()
		code := 0
		a.finish(ctx, at, journal.Outcome{Status: journal.StatusCompleted, ExitCode: &code, StartedAt: now, EndedAt: now})
		return
	}
	running, err := a.journal.MarkRunning(journalCtx, t.AttemptID, a.now())
	if err != nil {
		log.Error("journal", "err", err)
		return
	}
	if !running {
		return // finished meanwhile (a pending local task cancelled)
	}
	if t.Origin == journal.OriginServer && a.lease != nil {
		if a.freshClaim(t) {
			// The lease was granted moments ago: StartTask goes alongside
			// the spawn instead of before it, and the outcome is delivered
			// only after its answer (finish waits), so the server still sees
			// start before completion. An answer that the attempt is gone
			// stops the process through the shim.
			a.startAlongside(ctx, at)
		} else if err := a.startOnServer(ctx, at); err != nil {
			if rpcerr.AttemptGone(err) {
				a.finishStopped(ctx, at, lostRequest(err))
				return
			}
			if ctx.Err() != nil {
				return
			}
			// Unreachable server: the lease was granted, so run anyway;
			// the journal keeps the outcome until the server is back.
			log.Warn("start task not acknowledged, running anyway", "err", err)
		}
	}
	a.spawnAndSupervise(ctx, at)
}

// freshClaim reports whether the attempt's lease is young enough to start
// the process before StartTask is answered: claimed by this agent (not
// recovered from the journal) less than half a lease ago, by the agent's
// own clock, so the lease certainly still runs when the process starts.
func (a *Agent) freshClaim(t journal.Task) bool {
	if t.LeaseTTLSec <= 0 || t.ReceivedAt.IsZero() {
		return false
	}
	return a.now().Sub(t.ReceivedAt) < time.Duration(t.LeaseTTLSec)*time.Second/2
}

// startAlongside sends StartTask in the background; at.started is closed
// when it has been answered (or given up on).
func (a *Agent) startAlongside(ctx context.Context, at *attempt) {
	at.started = make(chan struct{})
	// The attempt's goroutine goes on changing at.task: copy what the
	// call needs. The lease it answers with is journaled; the attempt's
	// first renewal goes by the claim's, which ends no later.
	taskID, attemptID := at.task.ID, at.task.AttemptID
	a.runInBackground(func() {
		defer close(at.started)
		_, err := a.sendStart(ctx, taskID, attemptID)
		switch {
		case err == nil, ctx.Err() != nil:
		case rpcerr.AttemptGone(err):
			at.requestStop(lostRequest(err))
		default:
			a.log.Warn("start task not acknowledged, running anyway", "task_id", taskID, "attempt_id", attemptID, "err", err)
		}
	})
}

// awaitStarted waits until StartTask sent alongside the spawn has been
// answered, so that the outcome never reaches the server before the start.
func (a *Agent) awaitStarted(ctx context.Context, at *attempt) {
	if at.started == nil {
		return
	}
	select {
	case <-at.started:
	case <-ctx.Done():
	}
}

// lostRequest turns a 30001/30002/30003 answer into the stop it implies.
func lostRequest(err error) stopRequest {
	reason := reasonLeaseLost
	if rpcerr.Code(err) == rpcerr.TaskImmutable {
		reason = reasonTaskFinal
	}
	return stopRequest{reason: reason, detail: fmt.Sprintf("%d %s", rpcerr.Code(err), rpcerr.Message(err))}
}

// startOnServer sends StartTask and takes the lease it answers with.
func (a *Agent) startOnServer(ctx context.Context, at *attempt) error {
	expires, err := a.sendStart(ctx, at.task.ID, at.task.AttemptID)
	if err == nil && !expires.IsZero() {
		at.task.LeaseExpiresAt = expires
	}
	return err
}

// sendStart sends StartTask, retrying transport errors a few times
// (StartTask is idempotent for the same attempt), and journals the answer.
// It returns the lease's new end (zero if the answer has none).
func (a *Agent) sendStart(ctx context.Context, taskID, attemptID string) (time.Time, error) {
	bo := backoffDelay{base: 200 * time.Millisecond, limit: 2 * time.Second}
	var err error
	for try := 0; try < 4; try++ {
		if try > 0 && !sleep(ctx, bo.next()) {
			return time.Time{}, ctx.Err()
		}
		cctx, cancel := a.rpcCtx(ctx)
		var resp *taskv1.StartTaskResponse
		resp, err = a.lease.StartTask(cctx, &taskv1.StartTaskRequest{
			TaskId: taskID, AgentId: a.cfg.AgentID, AttemptId: attemptID,
		})
		cancel()
		if err == nil {
			var expires time.Time
			if resp.GetLeaseExpiresAt() != nil {
				expires = resp.GetLeaseExpiresAt().AsTime()
			}
			_ = a.journal.SetServerStarted(journalCtx, attemptID, expires, a.now())
			return expires, nil
		}
		if !rpcerr.Transient(err) {
			return time.Time{}, err
		}
	}
	return time.Time{}, err
}

// failedBeforeStart is the outcome of an attempt refused or unable to
// start: no process ran.
func (a *Agent) failedBeforeStart(msg string) journal.Outcome {
	now := a.now()
	code := -1
	return journal.Outcome{Status: journal.StatusFailed, ExitCode: &code, Error: msg, StartedAt: now, EndedAt: now}
}

// finishStopped records an attempt stopped before it had a process.
func (a *Agent) finishStopped(ctx context.Context, at *attempt, r stopRequest) {
	status, errText, decided := a.stopOutcome(at.task, r.reason, r.detail)
	now := a.now()
	a.finish(ctx, at, journal.Outcome{
		Status: status, Error: errText, EndedAt: now, StopReason: r.reason,
		Synced: decided, Note: decidedNote(decided, r.reason),
	})
}

func decidedNote(decided bool, reason string) string {
	if !decided {
		return ""
	}
	return "not reported: the server decided (" + reason + ")"
}
