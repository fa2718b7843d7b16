package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// sweepBatch bounds the tasks one sweep step handles; the next sweep takes
// the rest.
const sweepBatch = 500

// SweepReport counts what one sweep did.
type SweepReport struct {
	AgentsLost, LeasesExpired, TimedOut, Requeued, DependentsCancelled, Preempted, ResultsExpired int
	// Released: tasks held for their dependencies that entered their
	// queues here, not at once (a crash came between).
	Released int
}

// Sweep does the scheduler's timed work once:
//
//  1. agents whose heartbeats stopped are lost: their leases are released
//     at once (reason agent_lost), long before the lease itself expires;
//  2. leases that ran out are released (reason lease_expired);
//  3. running attempts past timeout + grace + slack fail (the agent did not
//     report the timeout itself);
//  4. preempted tasks whose preemptor finished go back to pending (a
//     cooperative one once it saved its checkpoint), and so
//     do tasks preempted for quota whose agent can no longer confirm the
//     stop (the heartbeat does it otherwise);
//  5. pending tasks whose dependency failed or was cancelled are cancelled;
//  6. pending tasks that may preempt running work (domain.PreemptsByPriority
//     under PreemptGap) and found no free capacity preempt it;
//  7. results stored longer than ResultRetention are deleted from an
//     object store that cannot expire them itself (once an hour);
//  8. tasks held out of their ClusterQueue whose dependencies have all
//     completed enter it (ReleaseHeld; RunReleases does it at once,
//     this covers a crash in between).
//
// Each task changes in its own command, so one bad task cannot stall the
// rest. Run it from exactly one replica (RunSweeper holds a lock).
func (a *App) Sweep(ctx context.Context) (SweepReport, error) {
	var rep SweepReport
	now := a.now()
	cutoff, err := a.lostCutoff(ctx, now)
	if err != nil {
		return rep, err
	}
	lost, err := a.sweeps.LostAgents(ctx, cutoff)
	if err != nil {
		return rep, err
	}
	rep.AgentsLost = len(lost)
	for _, agent := range lost {
		ids, err := a.sweeps.LeasesOf(ctx, agent)
		if err != nil {
			return rep, err
		}
		a.log.Warn("agent lost: releasing its leases", "agent", agent, "tasks", len(ids))
		rep.LeasesExpired += a.each(ctx, ids, func(t domain.Task, now time.Time) ([]domain.Record, error) {
			if t.AgentID != agent {
				return nil, nil
			}
			return t.ExpireLease(now, domain.ReasonAgentLost)
		})
	}
	ids, err := a.sweeps.ExpiredLeases(ctx, now, sweepBatch)
	if err != nil {
		return rep, err
	}
	rep.LeasesExpired += a.each(ctx, ids, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		if !t.Status.Leased() || !now.After(t.LeaseExpiresAt) {
			return nil, nil // renewed meanwhile
		}
		return t.ExpireLease(now, domain.ReasonLeaseExpired)
	})
	if ids, err = a.sweeps.Overdue(ctx, now, a.cfg.TimeoutSlack, sweepBatch); err != nil {
		return rep, err
	}
	rep.TimedOut = a.each(ctx, ids, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		if !t.TimedOut(now, a.cfg.TimeoutSlack) {
			return nil, nil
		}
		return t.TimeOut(now)
	})
	if ids, err = a.sweeps.ReleasablePreempted(ctx, now, a.cfg.PreemptMaxWait, sweepBatch); err != nil {
		return rep, err
	}
	rep.Requeued = a.each(ctx, ids, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		// A cooperative task still saving its checkpoint waits for it: run
		// again without it, it would start over.
		if t.Status != domain.StatusPreempted || t.AwaitsCheckpoint(now, a.cfg.TimeoutSlack) {
			return nil, nil
		}
		return t.Requeue(now, "scheduler", "preemptor finished")
	})
	// Work preempted for quota returns to its queue when its agent's
	// heartbeat shows it stopped; when no heartbeat will (agent lost, or
	// silent past the grace period), the sweeper does it.
	if ids, err = a.sweeps.StrandedEvictions(ctx, now, a.cfg.AgentLostAfter, sweepBatch); err != nil {
		return rep, err
	}
	rep.Requeued += a.each(ctx, ids, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		if t.Status != domain.StatusPreempted {
			return nil, nil
		}
		return t.Requeue(now, "scheduler", "agent did not confirm the preempted attempt stopped")
	})
	deps, err := a.sweeps.BlockedByFailure(ctx, sweepBatch)
	if err != nil {
		return rep, err
	}
	for id, dep := range deps {
		rep.DependentsCancelled += a.each(ctx, []string{id}, func(t domain.Task, now time.Time) ([]domain.Record, error) {
			if t.Status != domain.StatusPending {
				return nil, nil
			}
			return t.Cancel(now, "scheduler", fmt.Sprintf("dependency %s did not complete", dep))
		})
	}
	if a.cfg.PreemptGap > 0 {
		n, err := a.preempt(ctx, now)
		if err != nil {
			return rep, err
		}
		rep.Preempted = n
	}
	if err := a.sweeps.PruneClaims(ctx, now.Add(-a.cfg.ClaimRetention)); err != nil {
		return rep, err
	}
	if rep.Released, err = a.ReleaseHeld(ctx); err != nil {
		return rep, err
	}
	n, err := a.SweepResults(ctx)
	rep.ResultsExpired = n
	return rep, err
}

// lostGraceLimit bounds, in multiples of AgentLostAfter, how long after
// taking the sweeper's lock a replica waits for the first sign of an agent
// before it judges silence anyway (see lostCutoff).
const lostGraceLimit = 4

// lostCutoff is the time an agent's heartbeat deadline must be before to
// make it lost: now, or the zero time (no agent is lost) while this
// replica's grace after taking the sweeper's lock lasts. While no replica
// swept — every scheduler down, or Postgres — agents could not heartbeat
// either: their calls were refused, not silent. Judged at once on
// deadlines that passed then, every agent would be lost and the work it
// finished meanwhile refused ("Lost agents" in
// docs/api/tasks.md#leases-attempts-and-heartbeats).
//
// The grace is AgentLostAfter counted from the first time any agent is
// heard from (a heartbeat or a claim, through any replica) after the
// takeover, not from the takeover itself: in one process the lease API
// and the local agent start after the sweeper, and on a slow start that
// alone took longer than AgentLostAfter. So that agents that are all gone
// are still found lost, the grace ends lostGraceLimit × AgentLostAfter
// after the takeover even when none is heard from. A replica taking over
// from a live one hears from an agent within a heartbeat interval, which
// delays a real loss by about AgentLostAfter.
func (a *App) lostCutoff(ctx context.Context, now time.Time) (time.Time, error) {
	since := a.sweepingSince.Load()
	if since == 0 {
		return now, nil
	}
	took, grace := time.Unix(0, since), a.cfg.AgentLostAfter
	// Asked on every sweep until an agent is heard from, so that the time
	// found is within a sweep interval of the first sign of one.
	heard := a.heardSince.Load()
	if heard == 0 && now.Before(took.Add(lostGraceLimit*grace)) {
		latest, err := a.sweeps.LatestHeartbeat(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if latest.After(took) {
			heard = latest.UnixNano()
			a.heardSince.CompareAndSwap(0, heard)
		}
	}
	inGrace := now.Before(took.Add(grace)) ||
		heard != 0 && now.Before(time.Unix(0, heard).Add(grace)) ||
		heard == 0 && now.Before(took.Add(lostGraceLimit*grace))
	if inGrace {
		return time.Time{}, nil
	}
	return now, nil
}

// each applies decide to every task id (any tenant) and counts the tasks
// it changed. Errors are logged: the next sweep tries again.
func (a *App) each(ctx context.Context, ids []string, decide func(domain.Task, time.Time) ([]domain.Record, error)) int {
	n := 0
	for _, id := range ids {
		// The store may run decide more than once (a retried batch): the
		// last run is the one that was stored.
		changed := false
		_, err := a.mutate(ctx, system, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
			recs, err := decide(t, now)
			changed = err == nil && len(recs) > 0
			return recs, err
		})
		switch {
		case errors.Is(err, domain.ErrImmutable), errors.Is(err, domain.ErrNotFound):
		case err != nil:
			a.log.Warn("sweep: task not changed", "task", id, "err", err)
		case changed:
			n++
		}
	}
	return n
}

// preempt: a pending task that has waited PreemptAfter with no agent able
// to take it preempts the lowest-priority, most recently started running
// task it could replace, when its priority allows it
// (domain.PreemptsByPriority under PreemptGap), outside admission queues
// (SweepQueries.PreemptionCandidates). The victim's agent is told
// to stop at its next heartbeat; the victim returns to pending when the
// preemptor ends.
func (a *App) preempt(ctx context.Context, now time.Time) (int, error) {
	pairs, err := a.sweeps.PreemptionCandidates(ctx, now.Add(-a.cfg.PreemptAfter), a.cfg.PreemptGap, 20)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pairs {
		n += a.each(ctx, []string{p.Victim}, func(t domain.Task, now time.Time) ([]domain.Record, error) {
			if !t.Status.Leased() || !domain.PreemptsByPriority(p.Priority, t.Spec.Priority, a.cfg.PreemptGap) {
				return nil, nil
			}
			return t.Preempt(now, p.Preemptor, fmt.Sprintf("priority %d task %s needs the slot", p.Priority, p.Preemptor))
		})
	}
	return n, nil
}

// RunSweeper sweeps every interval while it holds the sweeper lock.
func (a *App) RunSweeper(ctx context.Context, interval time.Duration) {
	for ctx.Err() == nil {
		lock, ok, err := a.sweeper.TryLock(ctx)
		if err != nil || !ok {
			sleep(ctx, interval)
			continue
		}
		a.heardSince.Store(0)
		a.sweepingSince.Store(a.now().UnixNano())
		tick := time.NewTicker(interval)
		for ctx.Err() == nil {
			if err := lock.Alive(ctx); err != nil {
				break
			}
			if rep, err := a.Sweep(ctx); err != nil {
				a.log.Warn("sweep failed", "err", err)
			} else if rep != (SweepReport{}) {
				a.log.Info("sweep", "agents_lost", rep.AgentsLost, "leases_expired", rep.LeasesExpired,
					"timed_out", rep.TimedOut, "requeued", rep.Requeued, "dependents_cancelled", rep.DependentsCancelled,
					"preempted", rep.Preempted, "results_expired", rep.ResultsExpired, "released", rep.Released)
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		tick.Stop()
		lock.Release()
	}
}
