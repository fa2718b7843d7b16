package admitcore

import (
	"fmt"
	"strings"
)

// Reason says why a workload is where it is.
type Reason string

const (
	// ReasonAdmitted: the workload holds quota.
	ReasonAdmitted Reason = "Admitted"
	// ReasonEvicting: admitted, being evicted for a preemptor.
	ReasonEvicting Reason = "Evicting"
	// ReasonQueueNotConfigured: its ClusterQueue was removed from the
	// configuration; it waits for the queue to come back.
	ReasonQueueNotConfigured Reason = "QueueNotConfigured"
	// ReasonBlockedByHead: StrictFIFO, and the head of its queue does not
	// fit.
	ReasonBlockedByHead Reason = "BlockedByStrictFIFOHead"
	// ReasonWaitingForVictims: it preempted workloads that are still
	// stopping.
	ReasonWaitingForVictims Reason = "WaitingForVictims"
	// ReasonNeedsPreemption: it does not fit but evicting others could
	// make room; the next Schedule decides the victims.
	ReasonNeedsPreemption Reason = "NeedsPreemption"
	// ReasonInsufficientQuota: it does not fit and preemption cannot help
	// now (see Shortages).
	ReasonInsufficientQuota Reason = "InsufficientQuota"
	// ReasonFits: it fits now; the next Schedule admits it unless
	// workloads ranked before it take the room first.
	ReasonFits Reason = "Fits"
)

// Explanation is why a workload is, or is not, admitted.
type Explanation struct {
	ID           string
	ClusterQueue string
	Reason       Reason
	// Position: pending workloads ahead of it in its ClusterQueue (0 = the
	// head); -1 when admitted.
	Position int
	// BlockedBy: the StrictFIFO head it waits behind.
	BlockedBy string
	// Shortages: each flavor/resource that was tried and did not fit.
	Shortages []Shortage
	// WaitingFor: victims still being evicted for it.
	WaitingFor []string
	// Preemptor: for an evicting workload, who it makes room for ("" if
	// that preemptor is gone).
	Preemptor string
	// Flavors: the assignment of an admitted workload.
	Flavors map[string]string
}

// Explain says why a workload is or is not admitted, against the current
// facts. Errors: ErrUnknownWorkload.
func (s *State) Explain(id string) (Explanation, error) {
	w := s.workloads[id]
	if w == nil {
		return Explanation{}, fmt.Errorf("%w: %s", ErrUnknownWorkload, id)
	}
	e := Explanation{ID: id, ClusterQueue: w.ClusterQueue, Position: -1}
	q := s.queues[w.ClusterQueue]
	if w.admitted {
		// A copy: the caller may keep or change the explanation without
		// touching the state.
		e.Flavors = make(map[string]string, len(w.flavors))
		for r, f := range w.flavors {
			e.Flavors[r] = f
		}
		if w.evicting {
			e.Reason, e.Preemptor = ReasonEvicting, w.evictingFor
			return e, nil
		}
		e.Reason = ReasonAdmitted
		return e, nil
	}
	e.Position = q.position(w)
	if q.node == nil {
		e.Reason = ReasonQueueNotConfigured
		return e, nil
	}
	n := q.node
	// Against the facts, not a simulation: an explanation says why the
	// workload waits now, and never moves a memo or cache (no availCache).
	a := s.assign(n, w, s.usage, nil, &e.Shortages)
	switch {
	// Under StrictFIFO what blocks a workload behind the head is the head,
	// whatever the workload's own fit; saying "fits" would be misleading.
	case n.cq.spec.QueueingStrategy == StrictFIFO && e.Position > 0 &&
		s.assign(n, q.pending[0], s.usage, nil, nil).mode != modeFit:
		e.Reason, e.BlockedBy = ReasonBlockedByHead, q.pending[0].ID
		return e, nil
	case a.mode == modeFit:
		e.Reason = ReasonFits
		return e, nil
	// A preemptor with victims still stopping: its room is being made,
	// nothing else to do.
	case len(w.victims) > 0:
		e.Reason, e.WaitingFor = ReasonWaitingForVictims, append([]string(nil), w.victims...)
		return e, nil
	case a.mode == modePreempt:
		e.Reason = ReasonNeedsPreemption
	default:
		e.Reason = ReasonInsufficientQuota
	}
	return e, nil
}

// Sentence says the explanation in words, for an answer's reason. It
// counts positions from 1, as the API's position does (the head of the
// queue is position 1), and writes every quantity with quantity: the core
// does not know the unit its numbers count (the admission layer's are
// milli-units, written as the API writes its shortages).
func (e Explanation) Sentence(quantity func(int64) string) string {
	at := fmt.Sprintf("position %d in %s", e.Position+1, e.ClusterQueue)
	switch e.Reason {
	case ReasonAdmitted:
		return "admitted"
	case ReasonEvicting:
		if e.Preemptor != "" {
			return "admitted, being evicted for " + e.Preemptor
		}
		return "admitted, being evicted"
	case ReasonQueueNotConfigured:
		return fmt.Sprintf("cluster queue %s is not configured", e.ClusterQueue)
	case ReasonBlockedByHead:
		return fmt.Sprintf("%s behind head %s, which does not fit (StrictFIFO)", at, e.BlockedBy)
	case ReasonFits:
		return at + ": fits now"
	case ReasonWaitingForVictims:
		return fmt.Sprintf("waiting for %s to be evicted", strings.Join(e.WaitingFor, ", "))
	}
	parts := make([]string, 0, len(e.Shortages))
	// Every flavor that was tried, so an operator sees both what is short
	// and where borrowing could come from.
	for _, sh := range e.Shortages {
		if sh.Flavor == "" {
			parts = append(parts, fmt.Sprintf("%s: no quota in %s", sh.Resource, e.ClusterQueue))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s/%s: requested %s, available %s (nominal %s, borrowable %s)",
			sh.Flavor, sh.Resource, quantity(sh.Requested), quantity(sh.Available), quantity(sh.Nominal), quantity(sh.Borrowable)))
	}
	return at + ": " + strings.Join(parts, "; ")
}

// Usage is the quota picture of a ClusterQueue or cohort, for APIs.
type Usage struct {
	Name string
	// Parent: the cohort of a ClusterQueue, the parent of a cohort.
	Parent    string
	Resources []ResourceUsage
	// Pending and Admitted count workloads (of every ClusterQueue below,
	// for a cohort).
	Pending  int
	Admitted int
}

// ResourceUsage is one flavor/resource of a Usage.
type ResourceUsage struct {
	Flavor   string
	Resource string
	// Nominal: the node's own quota; for a cohort, Subtree adds what its
	// children lend it.
	Nominal int64
	Subtree int64
	// Used: admitted requests (for a cohort, what its children use beyond
	// their guaranteed quota).
	Used int64
	// Borrowed: Used beyond Subtree, taken from the parent cohort.
	Borrowed int64
	// Lent: own lendable quota left unused while the rest of the parent
	// cohort borrows; an upper bound when several nodes could lend it.
	Lent int64
	// Available: what the node can still use, cohort included.
	Available      int64
	BorrowingLimit *int64
	LendingLimit   *int64
}

// ClusterQueueUsage reports a ClusterQueue's quota and usage. Errors:
// ErrUnknownQueue.
func (s *State) ClusterQueueUsage(name string) (Usage, error) {
	q := s.queues[name]
	if q == nil || q.node == nil {
		return Usage{}, fmt.Errorf("%w: %s", ErrUnknownQueue, name)
	}
	u := s.usageOf(q.node)
	u.Parent = q.node.cq.spec.Cohort
	return u, nil
}

// CohortUsage reports a cohort's quota and usage. Errors:
// ErrUnknownCohort.
func (s *State) CohortUsage(name string) (Usage, error) {
	n := s.cohorts[name]
	if n == nil {
		return Usage{}, fmt.Errorf("%w: %s", ErrUnknownCohort, name)
	}
	u := s.usageOf(n)
	if n.parent != nil {
		u.Parent = n.parent.name
	}
	return u, nil
}

func (s *State) usageOf(n *node) Usage {
	u := Usage{Name: n.name}
	// A cohort counts the workloads of every ClusterQueue below it, so its
	// picture matches the usage it aggregates.
	s.eachQueue(n, func(c *node) {
		q := s.queues[c.name]
		u.Pending += len(q.pending)
		u.Admitted += len(q.admitted)
	})
	for fr, k := range s.frs {
		// Only the pairs the node has quota for, configures or uses: every
		// pair of the whole configuration would drown the few that matter.
		if !s.covers(n, k) {
			continue
		}
		used := s.usage[n.off+fr]
		ru := ResourceUsage{
			Flavor: k.flavor, Resource: k.resource,
			Nominal: n.nominal[fr], Subtree: n.subtree[fr], Used: used,
			Borrowed:  max(0, used-n.subtree[fr]),
			Available: max(0, n.available(s.usage, fr)),
		}
		if l := n.borrowLimit[fr]; l >= 0 {
			ru.BorrowingLimit = new(l)
		}
		if l := n.lendLimit[fr]; l >= 0 {
			ru.LendingLimit = new(l)
		}
		if p := n.parent; p != nil {
			// What the node could lend and does not use, capped by what its
			// siblings borrow beyond their own: quota lent is quota someone
			// else uses. With several possible lenders this is an upper
			// bound for each (see Lent).
			lendable := max(0, n.subtree[fr]-n.local[fr]-n.contribution(s.usage, fr))
			others := int64(0)
			for _, sib := range append(append([]*node(nil), p.cohorts...), p.queues...) {
				if sib != n {
					others += max(0, s.usage[sib.off+fr]-sib.subtree[fr])
				}
			}
			ru.Lent = min(lendable, others)
		}
		u.Resources = append(u.Resources, ru)
	}
	return u
}

// covers reports whether the node or anything below it has quota for k,
// or uses it.
func (s *State) covers(n *node, k frKey) bool {
	fr := s.frIndex[k]
	// A pair configured with a quota of 0 still counts: it says that the
	// node offers the flavor and lends nothing of it.
	return n.subtree[fr] != 0 || n.nominal[fr] != 0 || s.usage[n.off+fr] != 0 || s.configures(n, k)
}

// configures reports whether k appears in the node's own resource groups.
func (s *State) configures(n *node, k frKey) bool {
	var groups []ResourceGroup
	if n.isCQ() {
		groups = n.cq.spec.ResourceGroups
	} else {
		for _, ch := range s.cfg.Cohorts {
			if ch.Name == n.name {
				groups = ch.ResourceGroups
			}
		}
	}
	for _, g := range groups {
		for _, f := range g.Flavors {
			if f.Name == k.flavor {
				for _, r := range f.Resources {
					if r.Name == k.resource {
						return true
					}
				}
			}
		}
	}
	return false
}
