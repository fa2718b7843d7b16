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
	// The search runs on the cycle's simulated usage, never on the state's:
	// what Schedule already decided in this call counts, and nothing here is
	// a fact until the caller records it.
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
			// A workload chosen for another preemptor in this call is as
			// good as gone; one that holds nothing the preemptor needs would
			// free nothing useful.
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
		// Reclaiming takes back only what others borrowed: a queue within
		// its nominal quota in every needed pair keeps its workloads,
		// whatever their priority.
		s.eachQueue(n.root, func(o *node) {
			if o != n && !o.withinNominal(sim, need) {
				add(o, spec.ReclaimWithinCohort, false)
			}
		})
	}
	if len(cands) == 0 {
		return nil
	}
	// The shortfall in each needed pair, against what every candidate
	// together could free: when even that is not enough, no subset is, and
	// the search below would be wasted.
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
	// Other queues' borrowers first: taking back lent quota comes before
	// evicting the preemptor's own queue-mates.
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
	// Two passes, as in Kueue: first every candidate (others' borrowers
	// first) with the preemptor held within its own quota; failing that, its
	// own queue only, letting it borrow. With only its own queue to take
	// from, the second pass is all there is.
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
	// The id breaks ties, so the order is total and victims are chosen the
	// same way on every replica and every replay.
	return cmp.Compare(x.ID, y.ID)
}

// pool lists a ClusterQueue's admitted workloads that are not being
// evicted, in victim order (kept up to date by the facts).
func (cy *cycle) pool(s *State, n *node) []*workload {
	return s.queues[n.name].victims
}

func (q *queue) addVictim(w *workload) {
	// Kept sorted as facts arrive, so a preemption search never sorts a
	// queue's admitted workloads.
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
		// An equal priority is evictable only by an older preemptor, and
		// never under a gap rule: a gap of n means "n levels lower", which
		// equal priority is not.
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
		// Greedily, in candidate order: the first prefix that makes room is
		// an upper bound on the victims.
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
	// Put back every victim the preemptor fits without, newest choice first;
	// the last one stays, since without it the preemptor did not fit. Fewer
	// victims means less work lost.
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
		// Without borrowing, the queue's own usage plus the request must
		// stay within what its subtree owns; with it, only the tree's
		// availability counts (below).
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
	// Valid until anything in the tree changes (changeGen): admissions,
	// evictions and chosen victims all move it.
	if c := &s.sums[n.off+fr]; c.sums != nil && c.gen == n.root.changeGen {
		return c.sums
	}
	var ws []*workload
	if n.isCQ() {
		ws = cy.pool(s, n)
	} else {
		s.eachQueue(n, func(o *node) { ws = append(ws, cy.pool(s, o)...) })
		// Each queue's pool is in priority order, but their concatenation is
		// not; the cumulative sums below need one order.
		slices.SortFunc(ws, func(x, y *workload) int { return cmp.Compare(x.Priority, y.Priority) })
	}
	p := &prioSums{}
	var total int64
	for _, w := range ws {
		for _, r := range w.assignment {
			if r.fr != fr {
				continue
			}
			// Saturating: a sum of many large requests must not wrap around
			// and make a shortfall look coverable.
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
			// The whole tree minus the preemptor's own queue, which its own
			// policy already counted.
			total = satAdd(total, cy.sums(s, n.root, fr).atMost(thr)-own.atMost(thr))
		}
	}
	return total
}
