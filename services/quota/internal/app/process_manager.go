package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Steps of the production and unsubscription flows, named for the fault
// hook. "X.call" runs before the operator is asked, "X.record" after it
// answered and before its answer is recorded.
const (
	StepRayApply          = "ray.apply"
	StepRayApplied        = "ray.applied"
	StepRayObserved       = "ray.observed"
	StepWorkGroupApply    = "workgroup.apply"
	StepWorkGroupApplied  = "workgroup.applied"
	StepWorkGroupObserved = "workgroup.observed"
	StepQuotaSettle       = "quota.settle"
	StepWorkGroupDelete   = "workgroup.delete"
	StepWorkGroupDeleted  = "workgroup.deleted"
	StepQuotaDelete       = "quota.delete"
)

// ProcessManager drives production and unsubscription (docs/decisions/0013-quota-flows-as-process-managers.md) through
// the cluster operator. It keeps no state of its own: every pass reads what
// is pending from the store, and every step is recorded as an event before
// the next one starts, so a new instance (after a crash, on another
// replica) resumes where the last one stopped. Each step is idempotent:
// applying a resource that exists changes nothing, deleting one that is
// gone succeeds, and events are recorded only for changes (a version race
// with another instance retries with fresh state).
//
// A pass, step by step:
//  1. Ray clusters being created: apply the resource (once, RayClusterApplied),
//     then record Running or Failed as the operator reports it.
//  2. WorkGroups being created: once their Ray cluster is applied, apply the
//     spec (per generation, WorkGroupApplied), then record Running or Failed;
//     a failed Ray cluster or a refused spec fails the WorkGroup with the
//     reason.
//  3. Quotas producing (or failed): QuotaProduced when all their
//     WorkGroups run — the message consumers wait for — or
//     QuotaProductionFailed with the reason.
//  4. WorkGroups being deleted: delete the resource (gone = deleted) and
//     record WorkGroupDeleted once the operator no longer has it.
//  5. Quotas being unsubscribed: delete them once their WorkGroups are gone,
//     and give a root's inventory back.
type ProcessManager struct {
	app      *App
	store    ProcessStore
	op       Operator
	interval time.Duration
	wake     chan struct{}
	log      *slog.Logger
	// Fault, if set, is called before each step; an error stops the pass
	// there (tests use it to stop the service at every step).
	Fault func(step string) error
}

// NewProcessManager returns a process manager that passes every interval
// (default 1s) and whenever woken.
func NewProcessManager(a *App, store ProcessStore, op Operator, interval time.Duration) *ProcessManager {
	if interval <= 0 {
		interval = time.Second
	}
	return &ProcessManager{app: a, store: store, op: op, interval: interval, wake: make(chan struct{}, 1),
		log: a.log.With("component", "process_manager")}
}

// Wake asks for a pass now (after a command recorded work, or when the
// operator saw a status change).
func (m *ProcessManager) Wake() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// ErrStopped is returned by Run when the fault hook stopped it.
var ErrStopped = errors.New("process manager stopped by its fault hook")

// Run passes until ctx is done. A fault hook error stops it (ErrStopped);
// other errors are logged and the next pass retries.
func (m *ProcessManager) Run(ctx context.Context) error {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		if err := m.Pass(ctx); err != nil {
			if errors.Is(err, ErrStopped) {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			m.log.Warn("pass failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.wake:
		}
	}
}

func (m *ProcessManager) fault(step string) error {
	if m.Fault == nil {
		return nil
	}
	if err := m.Fault(step); err != nil {
		return fmt.Errorf("%w at %s: %w", ErrStopped, step, err)
	}
	return nil
}

// record runs decide in a transaction on fresh state and records its events.
func (m *ProcessManager) record(ctx context.Context, decide func(tx Tx) ([]capacity.Event, error)) error {
	_, err := m.store.Update(ctx, ServiceActor, func(tx Tx) error {
		events, err := decide(tx)
		if err != nil || len(events) == 0 {
			return err
		}
		return tx.Record(events...)
	})
	return err
}

// Pass drives every pending flow one step or more.
func (m *ProcessManager) Pass(ctx context.Context) error {
	p, err := m.store.Pending(ctx)
	if err != nil {
		return err
	}
	for _, r := range p.Rays {
		if err := m.ray(ctx, r); err != nil {
			return err
		}
	}
	for _, w := range p.WorkGroups {
		if err := m.workGroup(ctx, w); err != nil {
			return err
		}
	}
	// Read again: the steps above may have settled quotas' WorkGroups.
	if p, err = m.store.Pending(ctx); err != nil {
		return err
	}
	for _, q := range p.Quotas {
		if err := m.quota(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (m *ProcessManager) now() time.Time { return m.app.clock() }

func (m *ProcessManager) ray(ctx context.Context, r capacity.RayCluster) error {
	spec := capacity.RaySpecOf(r)
	if !r.Applied {
		if err := m.fault(StepRayApply); err != nil {
			return err
		}
		err := m.op.ApplyRayCluster(ctx, spec)
		if errors.Is(err, capacity.ErrOperatorRejected) {
			reason := err.Error()
			return m.record(ctx, func(tx Tx) ([]capacity.Event, error) {
				cur, err := tx.Ray(r.TenantID, r.Cluster)
				if err != nil || cur.Status != capacity.StatusCreating {
					return nil, err
				}
				return []capacity.Event{{Aggregate: capacity.RayAggregate(r.TenantID, r.Cluster), TenantID: r.TenantID, At: m.now(),
					Data: capacity.RayClusterFailed{Reason: reason}}}, nil
			})
		}
		if err != nil {
			return fmt.Errorf("apply Ray cluster %s: %w", r.Name, err)
		}
		if err := m.fault(StepRayApplied); err != nil {
			return err
		}
		if err := m.record(ctx, func(tx Tx) ([]capacity.Event, error) {
			cur, err := tx.Ray(r.TenantID, r.Cluster)
			if err != nil || cur.Status != capacity.StatusCreating || cur.Applied {
				return nil, err
			}
			return []capacity.Event{{Aggregate: capacity.RayAggregate(r.TenantID, r.Cluster), TenantID: r.TenantID, At: m.now(),
				Data: capacity.RayClusterApplied{}}}, nil
		}); err != nil {
			return err
		}
	}
	o, err := m.op.RayClusterStatus(ctx, spec)
	if err != nil {
		return fmt.Errorf("status of Ray cluster %s: %w", r.Name, err)
	}
	if o.Phase == capacity.PhaseAbsent && r.Applied {
		// The resource vanished after it was accepted (deleted by hand, or
		// an operator that lost its state): apply it again.
		if err := m.op.ApplyRayCluster(ctx, spec); err != nil && !errors.Is(err, capacity.ErrOperatorRejected) {
			return fmt.Errorf("apply Ray cluster %s again: %w", r.Name, err)
		}
		return nil
	}
	if o.Phase != capacity.PhaseRunning && o.Phase != capacity.PhaseFailed {
		return nil
	}
	if err := m.fault(StepRayObserved); err != nil {
		return err
	}
	return m.record(ctx, func(tx Tx) ([]capacity.Event, error) {
		cur, err := tx.Ray(r.TenantID, r.Cluster)
		if err != nil {
			return nil, err
		}
		return capacity.ObserveRay(cur, o, m.now()), nil
	})
}

// specOf reads the WorkGroup's quota and subtree in tx.
func specOf(tx Tx, w capacity.WorkGroup) (capacity.WorkGroupSpec, error) {
	q, err := tx.Quota(w.QuotaID)
	if err != nil {
		return capacity.WorkGroupSpec{}, err
	}
	sub, err := tx.Subtree(q)
	if err != nil {
		return capacity.WorkGroupSpec{}, err
	}
	return capacity.WorkGroupSpecOf(w, q, sub), nil
}

// readSpec reads a WorkGroup's current spec.
func (m *ProcessManager) readSpec(ctx context.Context, w capacity.WorkGroup) (capacity.WorkGroupSpec, error) {
	var spec capacity.WorkGroupSpec
	_, err := m.store.Update(ctx, ServiceActor, func(tx Tx) error {
		var err error
		spec, err = specOf(tx, w)
		return err
	})
	return spec, err
}

func (m *ProcessManager) failWorkGroup(ctx context.Context, w capacity.WorkGroup, reason string) error {
	return m.record(ctx, func(tx Tx) ([]capacity.Event, error) {
		cur, err := tx.WorkGroup(w.QuotaID)
		if err != nil || cur.Generation != w.Generation {
			return nil, err
		}
		return capacity.FailWorkGroup(cur, reason, m.now()), nil
	})
}

func (m *ProcessManager) workGroup(ctx context.Context, w capacity.WorkGroup) error {
	spec, err := m.readSpec(ctx, w)
	if err != nil {
		return err
	}
	if w.Status == capacity.StatusDeleting {
		return m.deleteWorkGroup(ctx, w, spec)
	}
	if w.AppliedGeneration < w.Generation {
		ray, err := m.store.Ray(ctx, w.TenantID, w.Cluster)
		if err != nil {
			return err
		}
		switch {
		case ray.Status == capacity.StatusFailed:
			return m.failWorkGroup(ctx, w, fmt.Sprintf("Ray cluster %s failed: %s", ray.Name, ray.Reason))
		case !ray.Applied:
			return nil // the Ray cluster's resource comes first
		}
		if err := m.fault(StepWorkGroupApply); err != nil {
			return err
		}
		err = m.op.ApplyWorkGroup(ctx, spec)
		if err != nil && !errors.Is(err, capacity.ErrOperatorRejected) {
			err = m.applyInRecreatedRay(ctx, ray, spec, err)
		}
		if errors.Is(err, capacity.ErrOperatorRejected) {
			return m.failWorkGroup(ctx, w, err.Error())
		}
		if err != nil {
			return fmt.Errorf("apply WorkGroup %s: %w", w.ID, err)
		}
		if err := m.fault(StepWorkGroupApplied); err != nil {
			return err
		}
		if err := m.record(ctx, func(tx Tx) ([]capacity.Event, error) {
			cur, err := tx.WorkGroup(w.QuotaID)
			if err != nil || cur.Status != capacity.StatusCreating || cur.AppliedGeneration >= spec.Generation {
				return nil, err
			}
			return []capacity.Event{{Aggregate: capacity.WorkGroupAggregate(w.QuotaID), TenantID: w.TenantID, At: m.now(),
				Data: capacity.WorkGroupApplied{Generation: spec.Generation}}}, nil
		}); err != nil {
			return err
		}
	}
	o, err := m.op.WorkGroupStatus(ctx, spec)
	if err != nil {
		return fmt.Errorf("status of WorkGroup %s: %w", w.ID, err)
	}
	if o.Phase == capacity.PhaseAbsent && w.AppliedGeneration >= w.Generation {
		// As for Ray clusters: a vanished resource is applied again, its
		// Ray cluster first (applying an existing one changes nothing).
		ray, err := m.store.Ray(ctx, w.TenantID, w.Cluster)
		if err != nil {
			return err
		}
		if err := m.op.ApplyRayCluster(ctx, capacity.RaySpecOf(ray)); err != nil && !errors.Is(err, capacity.ErrOperatorRejected) {
			return fmt.Errorf("apply Ray cluster %s again: %w", ray.Name, err)
		}
		if err := m.op.ApplyWorkGroup(ctx, spec); err != nil && !errors.Is(err, capacity.ErrOperatorRejected) {
			return fmt.Errorf("apply WorkGroup %s again: %w", w.ID, err)
		}
		return nil
	}
	if o.Phase != capacity.PhaseRunning && o.Phase != capacity.PhaseFailed {
		return nil
	}
	if o.Phase == capacity.PhaseRunning {
		// A WorkGroup runs inside its Ray cluster: it counts as Running
		// once the cluster has been seen Running, so the quota never
		// settles ahead of its cluster, whichever the operator reports
		// first.
		ray, err := m.store.Ray(ctx, w.TenantID, w.Cluster)
		if err != nil {
			return err
		}
		switch ray.Status {
		case capacity.StatusRunning:
		case capacity.StatusFailed:
			return m.failWorkGroup(ctx, w, fmt.Sprintf("Ray cluster %s failed: %s", ray.Name, ray.Reason))
		default:
			return nil
		}
	}
	if err := m.fault(StepWorkGroupObserved); err != nil {
		return err
	}
	return m.recordWorkGroup(ctx, w.QuotaID, o)
}

// recordWorkGroup records what the operator reports of the WorkGroup of
// quota quotaID, folded into the WorkGroup as stored.
func (m *ProcessManager) recordWorkGroup(ctx context.Context, quotaID string, o capacity.Observation) error {
	return m.record(ctx, func(tx Tx) ([]capacity.Event, error) {
		cur, err := tx.WorkGroup(quotaID)
		if err != nil {
			return nil, err
		}
		return capacity.ObserveWorkGroup(cur, o, m.now()), nil
	})
}

// applyInRecreatedRay handles a WorkGroup the operator would not apply
// (applyErr): when its Ray cluster, recorded as applied, is gone from the
// cluster (deleted by hand, or an operator that lost its state), the Ray
// cluster is applied again and then the WorkGroup — the production checks
// that the Ray cluster exists and creates it with the WorkGroup when it
// does not (docs/api/quota.md#production-and-unsubscription). Otherwise
// applyErr stands, and the pass is retried.
func (m *ProcessManager) applyInRecreatedRay(ctx context.Context, ray capacity.RayCluster, spec capacity.WorkGroupSpec, applyErr error) error {
	raySpec := capacity.RaySpecOf(ray)
	o, err := m.op.RayClusterStatus(ctx, raySpec)
	if err != nil || o.Phase != capacity.PhaseAbsent {
		return applyErr
	}
	if err := m.op.ApplyRayCluster(ctx, raySpec); err != nil {
		return fmt.Errorf("apply Ray cluster %s again: %w", ray.Name, err)
	}
	return m.op.ApplyWorkGroup(ctx, spec)
}

func (m *ProcessManager) deleteWorkGroup(ctx context.Context, w capacity.WorkGroup, spec capacity.WorkGroupSpec) error {
	if err := m.fault(StepWorkGroupDelete); err != nil {
		return err
	}
	if err := m.op.DeleteWorkGroup(ctx, spec); err != nil {
		return fmt.Errorf("delete WorkGroup %s: %w", w.ID, err)
	}
	o, err := m.op.WorkGroupStatus(ctx, spec)
	if err != nil {
		return fmt.Errorf("status of WorkGroup %s: %w", w.ID, err)
	}
	if o.Phase != capacity.PhaseAbsent {
		return nil
	}
	if err := m.fault(StepWorkGroupDeleted); err != nil {
		return err
	}
	return m.recordWorkGroup(ctx, w.QuotaID, o)
}

func (m *ProcessManager) quota(ctx context.Context, q capacity.Quota) error {
	if q.Status == capacity.QuotaUnsubscribing {
		if err := m.fault(StepQuotaDelete); err != nil {
			return err
		}
		return m.record(ctx, func(tx Tx) ([]capacity.Event, error) {
			cur, err := tx.Quota(q.ID)
			if err != nil {
				return nil, err
			}
			// Only the top of an unsubscription finishes it, for its whole
			// subtree (and gives a root's inventory back once).
			if cur.ParentID != "" {
				p, err := tx.Quota(cur.ParentID)
				if err != nil || p.Status == capacity.QuotaUnsubscribing {
					return nil, err
				}
			}
			st, err := unsubscribeState(tx, cur)
			if err != nil {
				return nil, err
			}
			st.Now = m.now()
			return capacity.FinishUnsubscription(st), nil
		})
	}
	if err := m.fault(StepQuotaSettle); err != nil {
		return err
	}
	return m.record(ctx, func(tx Tx) ([]capacity.Event, error) {
		cur, err := tx.Quota(q.ID)
		if err != nil {
			return nil, err
		}
		var wgs []capacity.WorkGroup
		subtree := []capacity.Quota{cur}
		if cur.Level == 1 {
			if subtree, err = tx.Subtree(cur); err != nil {
				return nil, err
			}
		}
		for _, s := range subtree {
			if !s.HasWorkGroup() || !s.Open() {
				continue
			}
			w, err := tx.WorkGroup(s.ID)
			if err != nil {
				return nil, err
			}
			wgs = append(wgs, w)
		}
		return capacity.SettleProduction(cur, wgs, m.now()), nil
	})
}
