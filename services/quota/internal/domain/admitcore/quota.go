package admitcore

import "math"

// node is a ClusterQueue or a cohort in the quota tree. Quantities are kept
// per flavor/resource index (fr) in flat slices; usage lives outside the
// node, in a []int64 indexed by node.off+fr, so a scheduling simulation can
// work on a copy of all usage at the price of one copy().
//
// The arithmetic follows Kueue's hierarchical cohorts:
//
//   - subtree[fr]: the node's nominal quota plus what its children lend up
//     (each child's subtree minus its guaranteed quota).
//   - local[fr]: guaranteed quota, never lent to the parent:
//     max(0, subtree - lendingLimit) when a lending limit is set, else 0.
//   - usage: a ClusterQueue's admitted requests; for a cohort the part of
//     its children's usage beyond their guaranteed quota.
//   - available: guaranteed quota left, plus what the parent can give,
//     capped by the borrowing limit.
type node struct {
	name   string
	parent *node
	// children, cohorts and ClusterQueues, in configuration order.
	cohorts []*node
	queues  []*node
	cq      *clusterQueue // nil for cohorts
	root    *node
	// height is the distance to the furthest leaf below (Kueue's borrowing
	// level uses it); a ClusterQueue has height 0.
	height int
	// idx is the node's index in State.nodes; off its offset into usage
	// slices (idx*numFR).
	idx int
	off int

	nominal     []int64
	borrowLimit []int64 // -1: unlimited
	lendLimit   []int64 // -1: everything lendable
	subtree     []int64
	local       []int64

	// Memo keys, meaningful on roots only: configGen identifies the
	// configuration the tree was built from; changeGen changes on any
	// change in the tree (usage, admitted set, evictions). Scheduling
	// memoizes "does not fit" against them.
	configGen uint64
	changeGen uint64
}

func (n *node) isCQ() bool { return n.cq != nil }

// satAdd adds without wrapping: quotas of many large nodes saturate at
// MaxInt64 instead of turning negative.
func satAdd(a, b int64) int64 {
	s := a + b
	if a > 0 && b > 0 && s < 0 {
		return math.MaxInt64
	}
	if a < 0 && b < 0 && s >= 0 {
		return math.MinInt64
	}
	return s
}

// computeQuotas fills subtree and local quotas bottom-up (Kueue's
// updateCohortResourceNode).
func (n *node) computeQuotas(numFR int) {
	n.subtree = make([]int64, numFR)
	n.local = make([]int64, numFR)
	copy(n.subtree, n.nominal)
	n.height = 0
	for _, c := range n.cohorts {
		c.computeQuotas(numFR)
		n.height = max(n.height, c.height+1)
	}
	if len(n.queues) > 0 {
		n.height = max(n.height, 1)
	}
	for _, c := range n.queues {
		c.computeQuotas(numFR)
	}
	for _, c := range n.cohorts {
		n.addChildQuota(c)
	}
	for _, c := range n.queues {
		n.addChildQuota(c)
	}
	for fr := range numFR {
		if l := n.lendLimit[fr]; l >= 0 {
			n.local[fr] = max(0, n.subtree[fr]-l)
		}
	}
}

func (n *node) addChildQuota(c *node) {
	for fr := range n.subtree {
		n.subtree[fr] = satAdd(n.subtree[fr], c.subtree[fr]-c.local[fr])
	}
}

// localAvailable is guaranteed quota not yet used: capacity only this
// subtree can use.
func (n *node) localAvailable(u []int64, fr int) int64 {
	return max(0, n.local[fr]-u[n.off+fr])
}

// available is what the node can still use of fr: its guaranteed quota
// left plus what its parent can give, limited by its borrowing limit. It
// is negative when the node is over-admitted (quota shrank under it).
func (n *node) available(u []int64, fr int) int64 {
	if n.parent == nil {
		return n.subtree[fr] - u[n.off+fr]
	}
	pa := n.parent.available(u, fr)
	if bl := n.borrowLimit[fr]; bl >= 0 {
		lq := n.local[fr]
		stored := n.subtree[fr] - lq
		usedInParent := max(0, u[n.off+fr]-lq)
		pa = min(pa, satAdd(stored-usedInParent, bl))
	}
	return satAdd(n.localAvailable(u, fr), pa)
}

// potentialAvailable is the most the node could use of fr if nothing else
// were admitted anywhere: a request above it can never fit.
func (n *node) potentialAvailable(fr int) int64 {
	if n.parent == nil {
		return n.subtree[fr]
	}
	avail := satAdd(n.local[fr], n.parent.potentialAvailable(fr))
	if bl := n.borrowLimit[fr]; bl >= 0 {
		avail = min(avail, satAdd(n.subtree[fr], bl))
	}
	return avail
}

// contribution is the node's usage that counts against its parent: what
// exceeds its guaranteed quota.
func (n *node) contribution(u []int64, fr int) int64 {
	return max(0, u[n.off+fr]-n.local[fr])
}

// addUsage changes the node's usage of fr by delta (negative to release)
// and carries the change of its contribution up the tree.
func (n *node) addUsage(u []int64, fr int, delta int64) {
	for n != nil && delta != 0 {
		before := n.contribution(u, fr)
		u[n.off+fr] += delta
		delta = n.contribution(u, fr) - before
		n = n.parent
	}
}

// borrowingWith reports whether using val more of fr takes the node beyond
// its own quota (nominal for a ClusterQueue, subtree for a cohort).
func (n *node) borrowingWith(u []int64, fr int, val int64) bool {
	return n.subtree[fr] < u[n.off+fr]+val
}

// withinNominal reports whether the node uses no more than its quota in
// every fr of frs (Kueue's IsWithinNominalInResources).
func (n *node) withinNominal(u []int64, frs []int) bool {
	for _, fr := range frs {
		if n.subtree[fr] < u[n.off+fr] {
			return false
		}
	}
	return true
}

// frQty is a quantity of one flavor/resource.
type frQty struct {
	fr  int
	qty int64
}
