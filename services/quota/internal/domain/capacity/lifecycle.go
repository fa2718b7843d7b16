package capacity

import (
	"fmt"
	"time"
)

// UpdateState is what deciding a quota update needs to know.
type UpdateState struct {
	Quota Quota
	// Parent (zero for a root), its other open children, and the quota's
	// own open children.
	Parent   Quota
	Siblings []Quota
	Children []Quota
	// The cluster, for a GU root (its min_units is reserved inventory).
	Cluster Cluster
	// The WorkGroup quota at or above the quota (level ≥ 2) and its
	// WorkGroup.
	Anchor          Quota
	AnchorWorkGroup WorkGroup
	Now             time.Time
}

// UpdateQuota changes a quota's limits (allowed whenever the
// WorkGroup's resource exists, not only once it runs). The WorkGroup behind
// it is applied again at a new generation; a GU root's min_units takes or
// gives back inventory. Limits must keep min ≤ max, fit the parent and
// cover the children.
func UpdateQuota(st UpdateState, min, max int64) ([]Event, error) {
	q := st.Quota
	switch {
	case !q.Exists():
		return nil, NotFound("quota", q.ID)
	case q.Status == QuotaDeletedStatus:
		// Still shown by GetQuota, as deleted: a change to it is refused
		// as one to a quota being unsubscribed is, not as an unknown id.
		return nil, conflict("quota %s was deleted", q.ID)
	case !q.Open():
		return nil, conflict("quota %s is being unsubscribed", q.ID)
	}
	switch {
	case min < 0:
		return nil, invalid("min_units", "must not be negative")
	case max < 1:
		return nil, invalid("max_units", "must be at least 1")
	case min > max && min == q.Min:
		// The new max is the change that broke the rule.
		return nil, invalid("max_units", "%d is below min_units %d", max, min)
	case min > max:
		return nil, invalid("min_units", "%d exceeds max_units %d", min, max)
	}
	// A change must reach the WorkGroup as a new generation; without its
	// resource (being deleted, or gone) it could not, so the update is
	// refused rather than recorded and lost.
	if st.Anchor.Exists() && !st.AnchorWorkGroup.ResourceExists() {
		return nil, conflict("the WorkGroup of quota %s does not exist (%s)", st.Anchor.ID, orNone(st.AnchorWorkGroup.Status))
	}
	// The production rules, for the new limits: within the parent, and
	// (below) still covering the children.
	if q.Level > 1 {
		if max > st.Parent.Max {
			return nil, invalid("max_units", "%d exceeds the parent's max_units %d", max, st.Parent.Max)
		}
		if !q.Background {
			sum := min
			for _, s := range st.Siblings {
				if s.ID != q.ID && s.Open() && !s.Background {
					sum += s.Min
				}
			}
			if sum > st.Parent.Min {
				return nil, invalid("min_units", "the parent's children would hold %d min_units; the parent has %d", sum, st.Parent.Min)
			}
		}
	}
	var sum int64
	for _, c := range st.Children {
		if !c.Open() {
			continue
		}
		if c.Max > max {
			return nil, invalid("max_units", "child %s has max_units %d", c.Name, c.Max)
		}
		if !c.Background {
			sum += c.Min
		}
	}
	if sum > min {
		return nil, invalid("min_units", "the children hold %d min_units", sum)
	}
	// Unchanged limits record nothing, so a repeated request does not apply
	// the WorkGroup again.
	if min == q.Min && max == q.Max {
		return nil, nil
	}
	ev := func(agg string, d any) Event { return Event{Aggregate: agg, TenantID: q.TenantID, At: st.Now, Data: d} }
	var out []Event
	// Only a GU root's min_units is backed by inventory: raising it needs
	// free GPUs (31003 otherwise); lowering it gives the difference back at
	// once.
	if q.Level == 1 && q.Kind == KindGU && min != q.Min {
		if d := min - q.Min; d > 0 {
			if free := st.Cluster.Inventory[q.MachineType].Available(); free < d {
				return nil, fmt.Errorf("%w: cluster %s has %d free GPUs of %s; the update needs %d more",
					ErrInventoryInsufficient, q.Cluster, free, q.MachineType, d)
			}
			out = append(out, ev(ClusterAggregate(q.Cluster), InventoryReserved{MachineType: q.MachineType, GPUs: d, QuotaID: q.ID}))
		} else {
			out = append(out, ev(ClusterAggregate(q.Cluster), InventoryReleased{MachineType: q.MachineType, GPUs: -d, QuotaID: q.ID}))
		}
	}
	out = append(out, ev(QuotaAggregate(q.ID), QuotaUpdated{Min: min, Max: max}))
	if st.Anchor.Exists() {
		wg := st.AnchorWorkGroup
		// A WorkGroup's GPUs are its own quota's min_units; a change deeper
		// in its subtree changes only the nested quotas of its spec.
		gpus := wg.GPUs
		if st.Anchor.ID == q.ID {
			gpus = min
		}
		out = append(out, ev(WorkGroupAggregate(st.Anchor.ID), WorkGroupSpecChanged{Generation: wg.Generation + 1, GPUs: gpus}))
	}
	return out, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// UnsubscribeState is what deciding an unsubscription needs to know.
type UnsubscribeState struct {
	// Quota and every quota below it (any order).
	Quota   Quota
	Subtree []Quota
	// WorkGroups of the subtree's WorkGroup quotas, by quota id.
	WorkGroups map[string]WorkGroup
	// The Ray cluster of the quota's ⟨tenant, cluster⟩ (zero when none).
	Ray    RayCluster
	Reason string
	Now    time.Time
}

// Unsubscribe gives a quota and its subtree up (docs/api/quota.md, "Production and unsubscription"): every
// WorkGroup still there is to be deleted first; when the tenant has no Ray
// cluster on the cluster, or nothing is left to delete, the quotas are
// deleted at once. Unsubscribing again records nothing.
func Unsubscribe(st UnsubscribeState) ([]Event, error) {
	q := st.Quota
	if !q.Exists() {
		return nil, NotFound("quota", q.ID)
	}
	// Already under way, and the process manager finishes it, or already
	// done: recording nothing makes the call safe to repeat. An
	// unsubscription of what is already gone succeeds (docs/api/quota.md,
	// "Production and unsubscription").
	if q.Status == QuotaUnsubscribing || q.Status == QuotaDeletedStatus {
		return nil, nil
	}
	ev := func(agg string, d any) Event { return Event{Aggregate: agg, TenantID: q.TenantID, At: st.Now, Data: d} }
	var out, deleting []Event
	// The whole subtree at once: a child cannot outlive the parent it was
	// carved from, and every WorkGroup in it holds GPUs of the root's
	// reservation.
	for _, s := range append([]Quota{q}, st.Subtree...) {
		if s.Open() {
			out = append(out, ev(QuotaAggregate(s.ID), QuotaUnsubscribed{Reason: st.Reason}))
		}
		if wg, ok := st.WorkGroups[s.ID]; ok && wg.Status != StatusDeleted && wg.Status != StatusDeleting {
			deleting = append(deleting, ev(WorkGroupAggregate(s.ID), WorkGroupDeleting{}))
		}
	}
	// With WorkGroups to delete, the quotas wait in Unsubscribing until the
	// operator reports them gone (FinishUnsubscription). The inventory stays
	// reserved until then, so it is never handed out while a WorkGroup may
	// still hold the GPUs.
	if st.Ray.Exists() && len(deleting) > 0 {
		return append(out, deleting...), nil
	}
	// No Ray cluster: no WorkGroup can exist on the cluster; succeed now.
	for _, s := range append([]Quota{q}, st.Subtree...) {
		if wg, ok := st.WorkGroups[s.ID]; ok && wg.Status != StatusDeleted {
			out = append(out, ev(WorkGroupAggregate(s.ID), WorkGroupDeleted{}))
		}
	}
	return append(out, finish(st)...), nil
}

// FinishUnsubscription deletes the quotas of an unsubscription once every
// WorkGroup of the subtree is gone; nil while one is not.
func FinishUnsubscription(st UnsubscribeState) []Event {
	if st.Quota.Status != QuotaUnsubscribing {
		return nil
	}
	// All or nothing: the quotas go only once every WorkGroup of the subtree
	// is gone.
	for _, wg := range st.WorkGroups {
		if wg.Status != StatusDeleted {
			return nil
		}
	}
	return finish(st)
}

func finish(st UnsubscribeState) []Event {
	q := st.Quota
	ev := func(agg string, d any) Event { return Event{Aggregate: agg, TenantID: q.TenantID, At: st.Now, Data: d} }
	var out []Event
	for _, s := range append([]Quota{q}, st.Subtree...) {
		if s.Status != QuotaDeletedStatus {
			out = append(out, ev(QuotaAggregate(s.ID), QuotaDeleted{}))
		}
	}
	// Inventory goes back only with the root: a subtree's quotas were carved
	// out of the root's reservation, not out of the cluster.
	if q.Level == 1 && q.Kind == KindGU && q.Min > 0 {
		out = append(out, ev(ClusterAggregate(q.Cluster), InventoryReleased{MachineType: q.MachineType, GPUs: q.Min, QuotaID: q.ID}))
	}
	return out
}

// Phase is what a cluster operator observes of a resource.
type Phase string

// Phases.
const (
	PhasePending Phase = "Pending"
	PhaseRunning Phase = "Running"
	PhaseFailed  Phase = "Failed"
	// PhaseAbsent: the resource does not exist (never created, or deleted).
	PhaseAbsent Phase = "Absent"
)

// Observation is a resource's status as the operator reports it.
type Observation struct {
	Phase  Phase
	Reason string
	// Generation of the spec the status is about (WorkGroups).
	Generation int64
	Endpoint   string
}

// ObserveRay records what the operator reports about a Ray cluster that is
// being created.
func ObserveRay(r RayCluster, o Observation, now time.Time) []Event {
	// Only a Ray cluster the operator accepted (Applied) is observed: a
	// status read before that is about nothing yet, or about an older
	// cluster of the same name.
	if r.Status != StatusCreating || !r.Applied {
		return nil
	}
	ev := func(d any) []Event {
		return []Event{{Aggregate: RayAggregate(r.TenantID, r.Cluster), TenantID: r.TenantID, At: now, Data: d}}
	}
	switch o.Phase {
	case PhaseRunning:
		return ev(RayClusterRunning{Endpoint: o.Endpoint})
	case PhaseFailed:
		return ev(RayClusterFailed{Reason: orUnknown(o.Reason)})
	}
	return nil
}

// ObserveWorkGroup records what the operator reports about a WorkGroup
// being created (Running at its current generation, or Failed) or being
// deleted (Absent).
func ObserveWorkGroup(w WorkGroup, o Observation, now time.Time) []Event {
	ev := func(d any) []Event {
		return []Event{{Aggregate: WorkGroupAggregate(w.QuotaID), TenantID: w.TenantID, At: now, Data: d}}
	}
	switch w.Status {
	case StatusCreating:
		// The operator has not accepted the current spec yet, so whatever it
		// reports is about an older one.
		if w.AppliedGeneration < w.Generation {
			return nil
		}
		switch {
		// A status counts only for the current generation or a later one:
		// Running at an older spec says nothing about the new one.
		case o.Phase == PhaseRunning && o.Generation >= w.Generation:
			return ev(WorkGroupRunning{GPUs: w.GPUs})
		case o.Phase == PhaseFailed && o.Generation >= w.Generation:
			return ev(WorkGroupFailed{Reason: orUnknown(o.Reason)})
		}
	case StatusDeleting:
		if o.Phase == PhaseAbsent {
			return ev(WorkGroupDeleted{})
		}
	}
	return nil
}

// FailWorkGroup records that a WorkGroup being created cannot be: the
// operator refused it, or its Ray cluster failed.
func FailWorkGroup(w WorkGroup, reason string, now time.Time) []Event {
	// Failure is news only while the WorkGroup is being created: one that
	// runs, failed already or is being deleted keeps its state.
	if w.Status != StatusCreating {
		return nil
	}
	return []Event{{Aggregate: WorkGroupAggregate(w.QuotaID), TenantID: w.TenantID, At: now, Data: WorkGroupFailed{Reason: reason}}}
}

// SettleProduction decides a producing (or failed) quota's outcome from the
// WorkGroups it needs (its own, or those of a root's WorkGroup quotas):
// QuotaProduced once all run, QuotaProductionFailed when one failed.
func SettleProduction(q Quota, wgs []WorkGroup, now time.Time) []Event {
	if q.Status != QuotaProvisioning && q.Status != QuotaFailed {
		return nil
	}
	ev := func(d any) []Event {
		return []Event{{Aggregate: QuotaAggregate(q.ID), TenantID: q.TenantID, At: now, Data: d}}
	}
	// One failed WorkGroup fails the production; one still being created (or
	// deleted) leaves it undecided until the next observation.
	produced := QuotaProduced{}
	for _, w := range wgs {
		switch w.Status {
		case StatusFailed:
			reason := fmt.Sprintf("WorkGroup %s failed: %s", w.ID, w.Reason)
			// The same failure again records nothing: the process manager
			// settles on every observation.
			if q.Status == QuotaFailed && q.Reason == reason {
				return nil
			}
			return ev(QuotaProductionFailed{Reason: reason})
		case StatusRunning:
			produced.WorkGroups = append(produced.WorkGroups, ProducedWorkGroup{QuotaID: w.QuotaID, QuotaName: w.QuotaName,
				WorkGroupID: w.ID, MachineType: w.MachineType, GPUs: w.GPUs})
		default:
			return nil
		}
	}
	return ev(produced)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown reason"
	}
	return s
}
