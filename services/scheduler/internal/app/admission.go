package app

import (
	"context"
	"errors"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Admission is the quota service as task submission sees it.
type Admission interface {
	// ResolveQueue names the ClusterQueue that admits a task c submits
	// with this queue, GU quota and resource requests, or "" when the task
	// needs no admission. Its errors (unknown queue, GU_QUOTA_NOT_EXISTS,
	// GU_QUOTA_CREATING, …) are the caller's answer.
	ResolveQueue(ctx context.Context, c Caller, queue, quota string, resources map[string]string) (string, error)
	// QueueWorkload hands the quota service's admission loop the stay of
	// a task just stored waiting for admission (t as created), and returns
	// the loop's decision when it admitted the stay at once (ok). Not ok:
	// not admitted yet, and its decision comes through the quota topic as
	// for every other stay. An error (the quota service unreachable, its
	// loop not active where the call landed) means the same.
	QueueWorkload(ctx context.Context, t domain.Task) (d AdmissionDecision, ok bool, err error)
	// FinishWorkload hands the admission loop the end of a task that held
	// or waited for admission (t as it ended: completed, failed or
	// cancelled), and returns the admissions of the loop's cycle that
	// applied it, those the freed quota allowed among them. An error
	// means the quota topic carries the end and the decisions.
	FinishWorkload(ctx context.Context, t domain.Task) ([]AdmissionDecision, error)
}

// AdmissionDecision is the quota service's admission of a task's stay, as
// WorkloadAdmitted carries it.
type AdmissionDecision struct {
	TaskID string
	// Epoch is the task version that began the stay.
	Epoch        int64
	ClusterQueue string
	Flavors      map[string]string
}

// needsResolving reports whether a spec asks for anything admission
// decides about. Plain tasks never call the quota service.
func needsResolving(s domain.Spec) bool {
	return s.Queue != "" || s.Quota != "" || len(s.Resources) > 0
}

// resolveQueue returns the ClusterQueue for spec, "" when no admission
// applies (nothing asked, or no quota service configured).
func (a *App) resolveQueue(ctx context.Context, c Caller, s domain.Spec) (string, error) {
	if !c.Pipeline {
		for name := range s.Resources {
			if a.reserved[name] {
				return "", &domain.InvalidError{Field: "resources[" + name + "]",
					Reason: "counts the model-conversion pipeline's stages: only its own stage tasks ask for it"}
			}
		}
	}
	if a.admission == nil || !needsResolving(s) {
		return "", nil
	}
	return a.admission.ResolveQueue(ctx, c, s.Queue, s.Quota, s.Resources)
}

// ResolveQueue is the ClusterQueue that admits a task c submits with spec,
// "" when none applies: what CreateTasks asks before storing a task, for
// use cases that store tasks of their own (task groups).
func (a *App) ResolveQueue(ctx context.Context, c Caller, spec domain.Spec) (string, error) {
	return a.resolveQueue(ctx, c, spec)
}

// queueTimeout bounds how long a created task waits for the quota
// service's answer on the direct path before it relies on the quota topic.
const queueTimeout = 10 * time.Second

// admitAtOnce hands each created task that waits for admission to the
// quota service's admission loop (Admission.QueueWorkload), each on a
// goroutine of its own: the creation has committed and is answered
// without waiting. A stay the loop admits at once is applied as its
// decision from the quota topic would be (AdmitTask), so the task becomes
// claimable without the round trip through the task and quota topics;
// that decision, arriving later, changes nothing. Whatever goes wrong
// here, the topics still carry the stay and its decision. See
// docs/decisions/0055-direct-admission-of-new-tasks.md.
func (a *App) admitAtOnce(ctx context.Context, tasks []domain.Task) {
	if a.admission == nil {
		return
	}
	for _, t := range tasks {
		if !t.AwaitingAdmission() || t.HeldForDependencies {
			continue // a held task enters its queue once released
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queueTimeout)
			defer cancel()
			d, ok, err := a.admission.QueueWorkload(ctx, t)
			if err != nil {
				a.log.Debug("direct admission not decided; the quota topic carries it", "task_id", t.ID, "err", err)
				return
			}
			if !ok {
				return
			}
			if err := a.AdmitTask(ctx, t.ID, d.Epoch, d.ClusterQueue, d.Flavors); err != nil {
				a.log.Warn("direct admission not applied; the quota topic carries it", "task_id", t.ID, "err", err)
			}
		}()
	}
}

// finishAtOnce hands the end of t (just committed, final, with a
// ClusterQueue) to the admission loop on a goroutine of its own, and
// applies the admissions the loop answers with, as admitAtOnce does: the
// quota the task held is free at the loop's next cycle, and a task waiting
// for it becomes claimable without the round trip through the topics.
func (a *App) finishAtOnce(ctx context.Context, t domain.Task) {
	if a.admission == nil || t.ClusterQueue == "" || !t.Status.Final() {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queueTimeout)
		defer cancel()
		ds, err := a.admission.FinishWorkload(ctx, t)
		if err != nil {
			a.log.Debug("direct end of a workload not applied; the quota topic carries it", "task_id", t.ID, "err", err)
			return
		}
		for _, d := range ds {
			if err := a.AdmitTask(ctx, d.TaskID, d.Epoch, d.ClusterQueue, d.Flavors); err != nil {
				a.log.Warn("direct admission not applied; the quota topic carries it", "task_id", d.TaskID, "err", err)
			}
		}
	}()
}

// releaseHeldSoon wakes RunReleases: a task completed, or a task was
// created held for dependencies that may have completed already.
func (a *App) releaseHeldSoon() {
	select {
	case a.releaseKick <- struct{}{}:
	default: // a release is due already; it will see this change too
	}
}

// heldRecheck is how often RunReleases asks whether any task is held.
const heldRecheck = time.Second

// RunReleases puts held tasks whose dependencies have completed in their
// ClusterQueues (ReleaseHeld) whenever a change may have released some,
// until ctx is done. Every replica runs it for the changes it commits;
// the sweeper's pass catches what a crash left between a completion and
// its release.
//
// A completion wakes it only while held tasks may exist (heldMayExist),
// so that a replica completing thousands of plain tasks a second does not
// query for held ones after each: the flag is set when this replica
// creates a held task and by a check every heldRecheck, which also finds
// held tasks another replica created (their release may then wait for
// that check), and cleared by the check when none is left.
func (a *App) RunReleases(ctx context.Context) {
	tick := time.NewTicker(heldRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.releaseKick:
		case <-tick.C:
			held, err := a.sweeps.AnyHeld(ctx)
			if err != nil {
				continue
			}
			a.heldMayExist.Store(held)
			if !held {
				continue
			}
		}
		if _, err := a.ReleaseHeld(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("releasing tasks held for their dependencies failed; the sweeper retries", "err", err)
		}
	}
}

// ReleaseHeld records TaskDependenciesMet for every held task whose
// dependencies have all completed and hands each new stay to the
// admission loop at once (admitAtOnce), as a creation does. It returns how
// many tasks it released. Releasing is idempotent (Task.ReleaseForAdmission),
// so replicas and the sweeper may overlap.
func (a *App) ReleaseHeld(ctx context.Context) (int, error) {
	n := 0
	for {
		ids, err := a.sweeps.ReleasableHeld(ctx, sweepBatch)
		if err != nil {
			return n, err
		}
		var released []domain.Task
		for _, id := range ids {
			changed := false
			t, err := a.mutate(ctx, system, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
				recs := t.ReleaseForAdmission(now)
				changed = len(recs) > 0
				return recs, nil
			})
			switch {
			case errors.Is(err, domain.ErrNotFound):
			case err != nil:
				return n, err
			case changed:
				released = append(released, t)
			}
		}
		n += len(released)
		a.admitAtOnce(ctx, released)
		if len(ids) < sweepBatch || len(released) == 0 {
			return n, nil
		}
	}
}

// AdmitTask applies the quota service's admission of a task's stay in its
// ClusterQueue (see domain.Task.Admit); stale decisions change nothing.
func (a *App) AdmitTask(ctx context.Context, id string, epoch int64, clusterQueue string, flavors map[string]string) error {
	// The admitted task wakes claims through mutate (Hub.Changed).
	_, err := a.mutate(ctx, system, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Admit(now, epoch, clusterQueue, flavors), nil
	})
	return ignoreGone(err)
}

// EvictTask applies the quota service's preemption of an admitted task to
// make room for preemptor (see domain.Task.Evict).
func (a *App) EvictTask(ctx context.Context, id string, epoch int64, preemptor, reason string) error {
	_, err := a.mutate(ctx, system, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Evict(now, epoch, preemptor, reason), nil
	})
	return ignoreGone(err)
}

// ignoreGone treats a task that no longer exists as done: a decision about
// it has nothing left to change.
func ignoreGone(err error) error {
	if err != nil && errors.Is(err, domain.ErrNotFound) {
		return nil
	}
	return err
}
