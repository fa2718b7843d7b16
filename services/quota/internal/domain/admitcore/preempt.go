package admitcore

import (
	"cmp"
	"math"
	"slices"
)

// candidate is an admitted workload that a preemptor may evict.
type candidate struct {
	w   *workload
	n   *node // its ClusterQueue node
	own bool  // in the preemptor's ClusterQueue
}

// targets finds the victims that let preemptor p (on ClusterQueue node n,
// with assignment a) fit, following Kueue's classical preemption:
//
//   - candidates are admitted workloads using a flavor/resource p needs,
//     in its own ClusterQueue per withinClusterQueue, and in other
//     ClusterQueues of its cohort tree that borrow per
//     reclaimWithinCohort; MinPriorityGap applies to priority rules;
//   - they are tried in order (other queues first, lowest priority, most
//     recently admitted), removed greedily until p fits, then each but the
//     last is put back if p still fits without it;
//   - reclaiming from other queues is tried without letting p borrow;
//     failing that, only p's own queue, with borrowing.
//
// Workloads already being evicted, or chosen earlier in the same Schedule
// call, are not candidates. The simulated usage is restored before
// returning.
func (s *State) targets(cy *cycle, n *node, p *workload, a assignment) []*workload {
	need := a.need
	sim := cy.sim
	uses := func(w *workload) bool {
		for _, r := range w.assignment {
			if slices.Contains(need, r.fr) {
				return true
			}
		}
		return false
	}
	// freeable bounds what evicting every candidate could free in each
	// needed flavor/resource: if it cannot cover the shortfall, no set of
	// victims can, and the simulation below is skipped.
	freeable := make([]int64, len(need))
	var cands []candidate
	add := func(o *node, policy PreemptionPolicy, own bool) {
		for _, w := range cy.pool(s, o) {
			if !allowedVictim(policy, n.cq.spec.Preemption.MinPriorityGap, p, w) {
				if w.Priority > p.Priority {
					break // the pool is sorted by priority: none further qualifies
				}
				continue
			}
			if cy.chosen[w.ID] || !uses(w) {
				continue
			}
			cands = append(cands, candidate{w: w, n: o, own: own})
			for _, r := range w.assignment {
				if i := slices.Index(need, r.fr); i >= 0 {
					freeable[i] += r.qty
				}
			}
		}
	}
	spec := n.cq.spec.Preemption
	if spec.WithinClusterQueue != "" && spec.WithinClusterQueue != Never {
		add(n, spec.WithinClusterQueue, true)
	}
	if n.parent != nil && spec.ReclaimWithinCohort != "" && spec.ReclaimWithinCohort != Never {
		s.eachQueue(n.root, func(o *node) {
			if o != n && !o.withinNominal(sim, need) {
				add(o, spec.ReclaimWithinCohort, false)
			}
		})
	}
	if len(cands) == 0 {
		return nil
	}
	for i, fr := range need {
		var q int64
		for _, r := range a.frs {
			if r.fr == fr {
				q += r.qty
			}
		}
		if q-n.available(sim, fr) > freeable[i] {
			return nil
		}
	}
	slices.SortStableFunc(cands, func(x, y candidate) int {
		if x.own != y.own {
			if x.own {
				return 1
			}
			return -1
		}
		return victimOrder(x.w, y.w)
	})
	own := slices.DeleteFunc(slices.Clone(cands), func(c candidate) bool { return !c.own })
	if len(own) == len(cands) {
		return minimalPreemptions(n, a, sim, need, cands, true)
	}
	if t := minimalPreemptions(n, a, sim, need, cands, false); t != nil {
		return t
	}
	return minimalPreemptions(n, a, sim, need, own, true)
}

// victimOrder is Kueue's candidate order within a queue: lowest priority
// first, then most recently admitted.
func victimOrder(x, y *workload) int {
	if c := cmp.Compare(x.Priority, y.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(y.admitSeq, x.admitSeq); c != 0 {
		return c
	}
	return cmp.Compare(x.ID, y.ID)
}

// pool lists a ClusterQueue's admitted workloads that are not being
// evicted, in victim order (kept up to date by the facts).
func (cy *cycle) pool(s *State, n *node) []*workload {
	return s.queues[n.name].victims
}

func (q *queue) addVictim(w *workload) {
	i, _ := slices.BinarySearchFunc(q.victims, w, victimOrder)
	q.victims = slices.Insert(q.victims, i, w)
}

func (q *queue) dropVictim(w *workload) {
	if i, ok := slices.BinarySearchFunc(q.victims, w, victimOrder); ok {
		q.victims = slices.Delete(q.victims, i, i+1)
	}
}

type sumsCache struct {
	gen  uint64
	sums *prioSums
}

// allowedVictim applies a preemption policy between preemptor p and
// candidate v. With a MinPriorityGap, v must be at least that many levels
// below p, and equal priority never qualifies; Any ignores priorities.
func allowedVictim(policy PreemptionPolicy, gap int, p, v *workload) bool {
	lower := int64(v.Priority) < int64(p.Priority)
	if gap > 0 {
		lower = int64(v.Priority) <= int64(p.Priority)-int64(gap)
	}
	switch policy {
	case Any:
		return true
	case LowerPriority:
		return lower
	case LowerOrNewerEqualPriority:
		return lower || (gap == 0 && v.Priority == p.Priority && p.Created.Before(v.Created))
	}
	return false
}

// minimalPreemptions removes candidates in order until the preemptor fits,
// then puts back every victim but the last that is not needed.
func minimalPreemptions(n *node, a assignment, sim []int64, need []int, cands []candidate, allowBorrow bool) []*workload {
	var victims []candidate
	fits := false
	for _, c := range cands {
		if !c.own && c.n.withinNominal(sim, need) {
			// That queue no longer borrows: nothing to reclaim from it.
			continue
		}
		unchargeSim(c, sim, -1)
		victims = append(victims, c)
		if fitsIn(n, a, sim, allowBorrow) {
			fits = true
			break
		}
	}
	if !fits {
		for _, c := range victims {
			unchargeSim(c, sim, 1)
		}
		return nil
	}
	for i := len(victims) - 2; i >= 0; i-- {
		unchargeSim(victims[i], sim, 1)
		if fitsIn(n, a, sim, allowBorrow) {
			victims = slices.Delete(victims, i, i+1)
			continue
		}
		unchargeSim(victims[i], sim, -1)
	}
	out := make([]*workload, len(victims))
	for i, c := range victims {
		unchargeSim(c, sim, 1)
		out[i] = c.w
	}
	return out
}

func unchargeSim(c candidate, sim []int64, sign int64) {
	for _, r := range c.w.assignment {
		c.n.addUsage(sim, r.fr, sign*r.qty)
	}
}

// fitsIn reports whether assignment a fits on n now; without borrowing it
// must also stay within n's own quota.
func fitsIn(n *node, a assignment, sim []int64, allowBorrow bool) bool {
	for _, r := range a.frs {
		if !allowBorrow && sim[n.off+r.fr]+r.qty > n.subtree[r.fr] {
			return false
		}
		if r.qty > n.available(sim, r.fr) {
			return false
		}
	}
	return true
}

// eachQueue calls f for every ClusterQueue node under root, in
// configuration order.
func (s *State) eachQueue(root *node, f func(*node)) {
	for _, c := range root.cohorts {
		s.eachQueue(c, f)
	}
	for _, q := range root.queues {
		f(q)
	}
	if root.isCQ() {
		f(root)
	}
}

// prioSums is what a set of admitted workloads holds of one
// flavor/resource, cumulated by priority (ascending).
type prioSums struct {
	prio []int
	sum  []int64 // sum[i]: held by the workloads of priority <= prio[i]
}

// atMost is what the workloads of priority <= thr hold.
func (p *prioSums) atMost(thr int64) int64 {
	i, _ := slices.BinarySearchFunc(p.prio, thr, func(v int, t int64) int {
		if int64(v) <= t {
			return -1
		}
		return 1
	})
	if i == 0 {
		return 0
	}
	return p.sum[i-1]
}

// sums is the priority sums of what the admitted workloads not being
// evicted hold of fr, for a ClusterQueue or, given a root, for every
// ClusterQueue below it; kept until the tree changes.
func (cy *cycle) sums(s *State, n *node, fr int) *prioSums {
	if c := &s.sums[n.off+fr]; c.sums != nil && c.gen == n.root.changeGen {
		return c.sums
	}
	var ws []*workload
	if n.isCQ() {
		ws = cy.pool(s, n)
	} else {
		s.eachQueue(n, func(o *node) { ws = append(ws, cy.pool(s, o)...) })
		slices.SortFunc(ws, func(x, y *workload) int { return cmp.Compare(x.Priority, y.Priority) })
	}
	p := &prioSums{}
	var total int64
	for _, w := range ws {
		for _, r := range w.assignment {
			if r.fr != fr {
				continue
			}
			total = satAdd(total, r.qty)
			if l := len(p.prio); l > 0 && p.prio[l-1] == w.Priority {
				p.sum[l-1] = total
			} else {
				p.prio, p.sum = append(p.prio, w.Priority), append(p.sum, total)
			}
		}
	}
	s.sums[n.off+fr] = sumsCache{gen: n.root.changeGen, sums: p}
	return p
}

// victimThreshold is the highest priority a policy lets preemptor p
// evict (ok false for Never); LowerOrNewerEqualPriority counts every
// equal priority, so the result bounds the candidates from above.
func victimThreshold(policy PreemptionPolicy, gap int, priority int) (int64, bool) {
	prio := int64(priority)
	switch policy {
	case Any:
		return math.MaxInt64, true
	case LowerPriority:
		if gap > 0 {
			return prio - int64(gap), true
		}
		return prio - 1, true
	case LowerOrNewerEqualPriority:
		if gap > 0 {
			return prio - int64(gap), true
		}
		return prio, true
	}
	return 0, false
}

// freeable bounds what evicting every candidate of preemptor p could free
// of fr: all the admitted workloads its policies let it evict, in its own
// queue and, reclaiming, anywhere else in its cohort tree (borrowing or
// not). It only grows with admissions.
func (cy *cycle) freeable(s *State, n *node, prio int, fr int) int64 {
	spec := n.cq.spec.Preemption
	var total int64
	own := cy.sums(s, n, fr)
	if thr, ok := victimThreshold(spec.WithinClusterQueue, spec.MinPriorityGap, prio); ok {
		total = own.atMost(thr)
	}
	if n.parent != nil {
		if thr, ok := victimThreshold(spec.ReclaimWithinCohort, spec.MinPriorityGap, prio); ok {
			total = satAdd(total, cy.sums(s, n.root, fr).atMost(thr)-own.atMost(thr))
		}
	}
	return total
}
