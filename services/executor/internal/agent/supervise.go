package agent

import (
	"context"
	"sync"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/rpcerr"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// progressEvery is the least time between two progress reports of one
// attempt.
const progressEvery = time.Second

// supervise attaches to the attempt's shim and follows it: lease renewal,
// progress, stop requests, and finally the exit. When ctx ends it detaches
// and leaves the task to the shim.
func (a *Agent) supervise(ctx context.Context, at *attempt) {
	t := at.task
	sess, err := shim.Attach(t.ShimSocket)
	if err != nil {
		// The shim already finished and left (a fast task, or one that
		// ended while the agent was away): its status file has the outcome.
		a.finishFromRunDir(ctx, at, nil)
		return
	}
	// A process counts as running until it ends, not until its outcome is
	// delivered: the queue status and the heartbeat's free slots read it.
	a.running.Add(1)
	ended := sync.OnceFunc(func() { a.running.Add(-1) })
	defer ended()

	server := t.Origin == journal.OriginServer && a.lease != nil
	renew := time.NewTimer(a.renewDelay(at))
	if !server {
		renew.Stop()
	}
	defer renew.Stop()
	// Progress is sampled often but reported at most once per
	// progressEvery, so a chatty task cannot flood the server.
	progress := time.NewTicker(progressEvery / 4)
	defer progress.Stop()
	var (
		stop       *stopRequest
		lastSeq    int64
		lastReport time.Time
	)
	for {
		select {
		case <-sess.Done():
			ended()
			st, err := sess.Result()
			if err == nil && st.StartError == "" {
				a.ranFor(st.EndedAt.Sub(st.StartedAt))
			}
			sess.Close()
			if err != nil {
				a.finishFromRunDir(ctx, at, stop)
				return
			}
			// A cooperative task stopped for a preemption or suspension has
			// written its checkpoint by now; it is saved while the attempt
			// is still this agent's.
			a.saveCheckpoint(ctx, at, st.Stop)
			a.finish(ctx, at, a.processOutcome(at, st, stop))
			return
		case <-ctx.Done():
			sess.Close()
			// The process runs on under its shim: its slot stays taken
			// until this agent has stopped, so that no task starts in it
			// meanwhile (keepLocalSlot).
			at.slot = false
			return
		case r := <-at.stopCh:
			if stop != nil {
				continue
			}
			stop = &r
			grace := time.Duration(t.GracePeriodSec) * time.Second
			if r.grace != nil {
				grace = *r.grace
			}
			// A shim that hung up has ended the task (or died): Done
			// follows and settles it, so only another failure is worth a
			// warning.
			if _, err := sess.Stop(ctx, r.reason, grace); err != nil && !shim.HungUp(err) {
				a.log.Warn("stop request to shim failed", "attempt_id", t.AttemptID, "err", err)
			}
		case <-at.fenceWake:
			if !a.fenced(t) {
				continue
			}
			// A fence that has passed cannot be renewed (the shim is
			// stopping the task), and a shim that is gone needs none.
			if d := a.fenceLeftFor(t); d > 0 {
				if _, err := sess.Fence(ctx, d); err != nil && !shim.HungUp(err) {
					a.log.Warn("fence not renewed", "task_id", t.ID, "attempt_id", t.AttemptID, "err", err)
				}
			}
		case <-renew.C:
			next, err := a.renewLease(ctx, at)
			if rpcerr.AttemptGone(err) {
				at.requestStop(lostRequest(err))
				continue
			}
			renew.Reset(next)
		case <-progress.C:
			if time.Since(lastReport) < progressEvery {
				continue
			}
			st, err := sess.State(ctx)
			if err != nil || st.Progress.Seq == lastSeq {
				continue
			}
			lastReport = time.Now()
			if err := a.reportProgress(ctx, at, st.Progress); err != nil {
				if rpcerr.AttemptGone(err) {
					at.requestStop(lostRequest(err))
				}
				continue
			}
			lastSeq = st.Progress.Seq
		}
	}
}

// renewDelay is when to renew next: the task's renew interval, but never
// later than a third of the remaining lease.
func (a *Agent) renewDelay(at *attempt) time.Duration {
	iv := a.cfg.RenewInterval
	if at.task.RenewIntervalSec > 0 {
		iv = time.Duration(at.task.RenewIntervalSec) * time.Second
	}
	if !at.task.LeaseExpiresAt.IsZero() {
		if rem := at.task.LeaseExpiresAt.Sub(a.now()) / 3; rem < iv {
			iv = rem
		}
	}
	return max(iv, 100*time.Millisecond)
}

// renewLease renews the lease and returns the delay to the next renewal.
func (a *Agent) renewLease(ctx context.Context, at *attempt) (time.Duration, error) {
	t := at.task
	cctx, cancel := a.rpcCtx(ctx)
	resp, err := a.lease.RenewTaskLease(cctx, &taskv1.RenewTaskLeaseRequest{
		TaskId: t.ID, AgentId: a.cfg.AgentID, AttemptId: t.AttemptID,
	})
	cancel()
	if err != nil {
		if !rpcerr.AttemptGone(err) {
			a.log.Warn("lease renewal failed", "attempt_id", t.AttemptID, "err", err)
		}
		// Retry soon: the lease keeps running out while the server is away.
		return min(a.renewDelay(at), 2*time.Second), err
	}
	if resp.GetLeaseExpiresAt() != nil {
		at.task.LeaseExpiresAt = resp.GetLeaseExpiresAt().AsTime()
	}
	_ = a.journal.SetLease(journalCtx, t.AttemptID, at.task.LeaseExpiresAt, a.now())
	return a.renewDelay(at), nil
}

// reportProgress journals the progress and, for server tasks, reports it.
// The caller calls it at most once a second.
func (a *Agent) reportProgress(ctx context.Context, at *attempt, p shim.Progress) error {
	t := at.task
	msg := truncateUTF8(p.Message, 4096)
	if err := a.journal.SetProgress(journalCtx, t.AttemptID, p.Value, msg, a.now()); err != nil {
		return err
	}
	if t.Origin != journal.OriginServer || a.lease == nil {
		return nil
	}
	cctx, cancel := a.rpcCtx(ctx)
	defer cancel()
	_, err := a.lease.ReportTaskProgress(cctx, &taskv1.ReportTaskProgressRequest{
		TaskId: t.ID, AgentId: a.cfg.AgentID, AttemptId: t.AttemptID,
		Progress: int32(p.Value), Message: msg,
	})
	return err
}
