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
}

// needsResolving reports whether a spec asks for anything admission
// decides about. Plain tasks never call the quota service.
func needsResolving(s domain.Spec) bool {
	return s.Queue != "" || s.Quota != "" || len(s.Resources) > 0
}

// resolveQueue returns the ClusterQueue for spec, "" when no admission
// applies (nothing asked, or no quota service configured).
func (a *App) resolveQueue(ctx context.Context, c Caller, s domain.Spec) (string, error) {
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

// AdmitTask applies the quota service's admission of a task's stay in its
// ClusterQueue (see domain.Task.Admit); stale decisions change nothing.
func (a *App) AdmitTask(ctx context.Context, id string, epoch int64, clusterQueue string, flavors map[string]string) error {
	_, err := a.mutate(ctx, system, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Admit(now, epoch, clusterQueue, flavors), nil
	})
	if err == nil {
		a.hub.WakeClaimers()
	}
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
