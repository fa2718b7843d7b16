package agent

import (
	"context"
	"fmt"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// recover resumes what a previous run of the agent left
// (docs/executor.md#the-agents-loops):
//
//   - assigned and running server attempts are checked with the server
//     (RenewTaskLease). A valid lease, or no answer (the server may be
//     down), resumes the attempt: reattach to its shim, or read the shim's
//     status file if it has finished, or start it if it never had a
//     process (no shim alive in its run directory and none ever spawned
//     the task: see awaitShim). 30001/30002/30003 stop the process through the shim and
//     record it failed; the outcome is still offered to the server, which
//     may refuse it.
//   - running local attempts are reattached the same way.
//   - pending local tasks re-enter the local queue (localLoop reads them).
//   - unsynced outcomes are delivered by the sync loop when it starts.
func (a *Agent) recover(ctx context.Context) error {
	rows, err := a.journal.WithStatus(journalCtx, journal.StatusAssigned, journal.StatusRunning)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	a.removeStaleGroups(rows)
	for _, t := range rows {
		at := newAttempt(t)
		if !a.register(at) {
			continue
		}
		log := a.log.With("task_id", t.ID, "attempt_id", t.AttemptID)
		if t.Origin == journal.OriginServer && a.lease != nil {
			cctx, cancel := a.rpcCtx(ctx)
			resp, err := a.lease.RenewTaskLease(cctx, &taskv1.RenewTaskLeaseRequest{
				TaskId: t.ID, AgentId: a.cfg.AgentID, AttemptId: t.AttemptID,
			})
			cancel()
			switch {
			case err == nil:
				if resp.GetLeaseExpiresAt() != nil {
					at.task.LeaseExpiresAt = resp.GetLeaseExpiresAt().AsTime()
					_ = a.journal.SetLease(journalCtx, t.AttemptID, at.task.LeaseExpiresAt, a.now())
				}
				log.Info("resuming attempt: lease still valid")
			case rpcerr.AttemptGone(err):
				log.Info("attempt lost while the agent was away", "code", rpcerr.Code(err))
				at.requestStop(stopRequest{reason: reasonRecoveryLost,
					detail: fmt.Sprintf("%d %s", rpcerr.Code(err), rpcerr.Message(err))})
			default:
				log.Warn("cannot check the lease, resuming", "err", err)
			}
		}
		a.takeRecoveredSlot(at)
		a.runInBackground(func() { a.resume(ctx, at) })
	}
	return nil
}

// removeStaleGroups removes the spare cgroups an earlier run of the agent
// kept when it stopped without closing (docs/executor.md, "Cgroups are
// reused"): the empty groups named after an attempt of this journal that
// is over, except the ones the open attempts' specs name (a spare taken by
// an attempt keeps its first attempt's name). A group named after no
// attempt of this journal is left alone: it is not this agent's.
func (a *Agent) removeStaleGroups(open []journal.Task) {
	held := map[string]bool{}
	for _, t := range open {
		if t.RunDir == "" {
			continue
		}
		if spec, err := shim.ReadSpec(t.RunDir); err == nil && spec.Cgroup != nil {
			for _, d := range spec.Cgroup.Dirs {
				held[d] = true
			}
		}
	}
	a.isolation.RemoveStaleGroups(func(name string) bool {
		t, err := a.journal.Get(journalCtx, name)
		return err == nil && safeName(t.AttemptID) == name && journal.Final(t.Status)
	}, held)
}

// takeRecoveredSlot takes a slot without waiting: a process that already
// runs cannot wait for one. If the slots are all taken (fewer configured
// than before the restart) the attempt runs without one.
func (a *Agent) takeRecoveredSlot(at *attempt) {
	select {
	case a.slots <- struct{}{}:
		at.slot = true
	default:
		a.log.Warn("more attempts recovered than slots", "attempt_id", at.task.AttemptID)
	}
}

// resume continues one recovered attempt.
func (a *Agent) resume(ctx context.Context, at *attempt) {
	t := at.task
	if t.RunDir == "" {
		// No process was ever started: run it from the beginning (a stop
		// requested during recovery is honoured before spawning).
		a.execute(ctx, at)
		return
	}
	defer a.release(at)
	if !a.awaitShim(ctx, at) {
		// The agent died after journaling the run directory but before a
		// shim started the task: nothing ran, so it starts now (a stop
		// requested during recovery is honoured first).
		select {
		case r := <-at.stopCh:
			a.finishStopped(ctx, at, r)
		default:
			a.spawnAndSupervise(ctx, at)
		}
		return
	}
	// supervise reattaches to the shim, or reads its status file when the
	// shim has finished and left.
	a.supervise(ctx, at)
}

// shimStartWait bounds how long a recovered attempt waits for a shim that
// holds its run directory but does not listen yet (it was starting when
// the agent died).
const shimStartWait = 30 * time.Second

// awaitShim reports whether the recovered attempt's task was ever started
// from its run directory, waiting while a shim is alive there but not yet
// listening. false means no task process was ever started.
func (a *Agent) awaitShim(ctx context.Context, at *attempt) bool {
	dir := at.task.RunDir
	deadline := time.Now().Add(shimStartWait)
	for {
		st, err := shim.Inspect(dir)
		if err != nil {
			// Unreadable: assume the worst (it may have run) and let
			// supervise report what it finds.
			a.log.Warn("cannot inspect run directory", "attempt_id", at.task.AttemptID, "err", err)
			return true
		}
		if !st.ShimAlive || st.MayHaveRun {
			// A live shim that marked its spawn is listening already
			// (it listens first).
			return st.MayHaveRun
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}
