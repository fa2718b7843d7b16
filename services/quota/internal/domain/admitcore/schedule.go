package admitcore

import (
	"maps"
	"math"
	"slices"
	"time"
)

// DecisionKind says what a Decision asks the caller to record.
type DecisionKind int

const (
	// DecideAdmit: admit Decision.ID with Decision.Assignment (apply with
	// Admit).
	DecideAdmit DecisionKind = iota + 1
	// DecidePreempt: evict Decision.Victim to make room for
	// Decision.Preemptor (apply with Preempt now, Evict once the victim
	// has stopped).
	DecidePreempt
)

func (k DecisionKind) String() string {
	switch k {
	case DecideAdmit:
		return "Admit"
	case DecidePreempt:
		return "Preempt"
	}
	return "Unknown"
}

// Decision is one step Schedule asks the caller to persist and apply.
type Decision struct {
	Kind DecisionKind
	At   time.Time // the now given to Schedule
	// Admit.
	ID         string
	Assignment Assignment
	// Preempt.
	Victim    string
	Preemptor string
}

// fitMode ranks how a workload fits: lower is better.
type fitMode int

const (
	modeFit fitMode = iota
	modePreempt
	modeNoFit
)

// compiledReq is a workload's requests resolved against the resource
// groups of one ClusterQueue.
type compiledReq struct {
	groups    []reqGroup
	uncovered []resQty // requested resources the ClusterQueue has no quota for
}

type reqGroup struct {
	g   int      // index in clusterQueue.groups
	idx []int    // index of each requested resource in the group
	res []string // resource names
	qty []int64
}

func (s *State) compile(n *node, w *workload) *compiledReq {
	// Cached per ClusterQueue node: a workload is looked at in every cycle,
	// but its requests need resolving again only when a new configuration
	// rebuilt its node.
	if w.compiledFor == n {
		return w.compiled
	}
	c := &compiledReq{}
	byGroup := map[int]int{}
	for _, r := range w.reqs {
		gi, ok := n.cq.resGroup[r.res]
		if !ok {
			// A resource the queue has no quota for can never be admitted
			// there, whatever happens to usage: kept apart so assign can say
			// so at once (permanent).
			c.uncovered = append(c.uncovered, r)
			continue
		}
		k, ok := byGroup[gi]
		if !ok {
			k = len(c.groups)
			byGroup[gi] = k
			c.groups = append(c.groups, reqGroup{g: gi})
		}
		rg := &c.groups[k]
		rg.idx = append(rg.idx, slices.Index(n.cq.groups[gi].resources, r.res))
		rg.res = append(rg.res, r.res)
		rg.qty = append(rg.qty, r.qty)
	}
	w.compiled, w.compiledFor = c, n
	return c
}

// assignment is the result of flavor assignment for one workload.
type assignment struct {
	mode   fitMode
	borrow bool
	frs    []frQty  // chosen flavor/resource per requested resource
	res    []string // resource names, parallel to frs
	need   []int    // frs that do not fit now (preemption must free them)
	// When mode is modeNoFit: the short resources of each flavor of the
	// failing group, or permanent when a resource has no quota at all.
	blocked   []blockedFlavor
	permanent bool
	// When mode is modePreempt and a single group must preempt: that
	// group's short resources per flavor (none of its flavors fits).
	preemptBlocked []blockedFlavor
	preemptGroups  int
	// Set by evaluate when no victims can cover the shortfall of boundFR
	// (boundQty requested): -1/0 otherwise.
	boundFR  int
	boundQty int64
}

// Shortage is one flavor/resource a workload does not fit in: what it
// asks, what its ClusterQueue can use now (cohort included), its nominal
// quota, and how much of the available quantity is borrowed from the
// cohort.
type Shortage struct {
	Flavor     string // "" when the ClusterQueue has no quota for the resource
	Resource   string
	Requested  int64
	Available  int64
	Nominal    int64
	Borrowable int64
}

// assign is flavor assignment with Kueue's default fungibility: in each
// resource group the first flavor where everything fits (borrowing
// allowed) wins; otherwise the first flavor where preemption could make
// room. short, when not nil, collects why flavors were rejected.
func (s *State) assign(n *node, w *workload, u []int64, cache *availCache, short *[]Shortage) assignment {
	c := s.compile(n, w)
	if len(c.uncovered) > 0 {
		if short != nil {
			for _, r := range c.uncovered {
				*short = append(*short, Shortage{Resource: r.res, Requested: r.qty})
			}
		}
		return assignment{mode: modeNoFit, permanent: true}
	}
	a := assignment{mode: modeFit}
	for _, rg := range c.groups {
		g := &n.cq.groups[rg.g]
		best, bestF, bestBorrow := modeNoFit, -1, false
		var blocked []blockedFlavor
		if cache != nil {
			blocked = cache.blocked[:0]
		}
		// Flavors in configuration order: the first where everything fits
		// wins outright, so the order in the ClusterQueue is the order of
		// preference, as in Kueue.
		for fi := range g.flavors {
			fo := &g.flavors[fi]
			mode, borrow := modeFit, false
			for k, idx := range rg.idx {
				fr, q := fo.frs[idx], rg.qty[k]
				avail := cache.get(n, u, fr)
				// Fits, possibly by borrowing from the cohort; whether it
				// borrows decides its rank among the cycle's heads.
				if q <= avail {
					borrow = borrow || n.borrowingWith(u, fr, q)
					continue
				}
				blocked = append(blocked, blockedFlavor{flavor: int32(fi), fr: int32(fr), qty: q})
				if short != nil {
					own := max(0, n.subtree[fr]-u[n.off+fr])
					*short = append(*short, Shortage{
						// Over its quota (shrunk or closed below its
						// usage) a queue has nothing available, not less.
						Flavor: fo.name, Resource: rg.res[k], Requested: q, Available: max(0, avail),
						Nominal: n.nominal[fr], Borrowable: max(0, avail-own),
					})
				}
				// Preemption can only help if the request fits what the
				// queue could have with nothing else admitted; beyond that
				// no set of victims is ever enough.
				if n.cq.canPreempt && q <= n.potentialAvailable(fr) {
					mode = max(mode, modePreempt)
				} else {
					mode = modeNoFit
				}
			}
			if mode == modeFit {
				best, bestF, bestBorrow = modeFit, fi, borrow
				break
			}
			if mode == modePreempt && best == modeNoFit {
				best, bestF = modePreempt, fi
			}
		}
		// One group that fits in no flavor fails the workload: all of its
		// groups are needed at once.
		if best == modeNoFit {
			if cache != nil {
				cache.blocked = blocked
			}
			return assignment{mode: modeNoFit, blocked: blocked}
		}
		if best == modePreempt {
			a.preemptGroups++
			if cache != nil {
				cache.pblocked = append(cache.pblocked[:0], blocked...)
				a.preemptBlocked = cache.pblocked
			} else {
				a.preemptBlocked = slices.Clone(blocked)
			}
			if cache != nil {
				cache.blocked = blocked
			}
		}
		a.mode = max(a.mode, best)
		a.borrow = a.borrow || bestBorrow
		fo := &g.flavors[bestF]
		for k, idx := range rg.idx {
			fr, q := fo.frs[idx], rg.qty[k]
			a.frs = append(a.frs, frQty{fr, q})
			a.res = append(a.res, rg.res[k])
			// need lists only the pairs short now: what victims must free.
			// The rest fits as it is.
			if best == modePreempt && q > cache.get(n, u, fr) {
				a.need = append(a.need, fr)
			}
		}
	}
	return a
}

// availCache memoizes node.available during one Schedule call; every
// change of the simulated usage starts a new epoch. A nil cache computes
// directly.
type availCache struct {
	epoch    uint32
	stamp    []uint32
	val      []int64
	blocked  []blockedFlavor // scratch for assign's short resources
	pblocked []blockedFlavor // scratch for the group that must preempt
}

func (c *availCache) get(n *node, u []int64, fr int) int64 {
	if c == nil {
		return n.available(u, fr)
	}
	i := n.off + fr
	if c.stamp[i] == c.epoch {
		return c.val[i]
	}
	v := n.available(u, fr)
	c.val[i], c.stamp[i] = v, c.epoch
	return v
}

func (s *State) publicAssignment(a assignment) Assignment {
	out := Assignment{Flavors: make(map[string]string, len(a.frs)), Borrowing: a.borrow}
	for i, r := range a.frs {
		out.Flavors[a.res[i]] = s.frs[r.fr].flavor
	}
	return out
}

// memoized reports whether w was found neither fitting nor able to
// preempt, and that still holds: for a queue that never preempts, every
// flavor of the group that failed still lacks one of the resources it
// lacked (checked against the current simulation, so this is exact
// enough to hold in any cycle); for a preempting queue, nothing changed
// in its tree since.
//
// m is the memo kept beside the workload in its queue: the scan reads it
// without touching the workload record.
func memoized(s *State, cy *cycle, n *node, m *noFitMemo) bool {
	r := n.root
	if m.config != r.configGen || m.config == 0 {
		return false
	}
	// A resource with no quota in the queue stays so until the configuration
	// changes, which the check above covers.
	if m.permanent {
		return true
	}
	if m.byChange {
		// Victims may appear with any admission: only an unchanged tree
		// that still matches the facts keeps the memo.
		return m.change == r.changeGen && cy.ver[r.idx] == 0
	}
	blocked := m.entries()
	if len(blocked) == 0 {
		return false
	}
	if m.boundFR >= 0 {
		// It could preempt, but what every candidate holds of boundFR
		// cannot cover the shortfall: candidates only come with
		// admissions, the shortfall only shrinks with releases.
		fr := int(m.boundFR)
		if m.boundQty-cy.avail.get(n, cy.sim, fr) <= cy.freeable(s, n, m.prio, fr) {
			return false
		}
	}
	// Entries come grouped by flavor.
	for i := 0; i < len(blocked); {
		flavor, short := blocked[i].flavor, false
		for ; i < len(blocked) && blocked[i].flavor == flavor; i++ {
			b := &blocked[i]
			short = short || b.qty > cy.avail.get(n, cy.sim, int(b.fr))
		}
		if !short {
			return false
		}
	}
	return true
}

// noFitMemo is why a workload was found neither fitting nor able to
// preempt: the short resources of each flavor of the group that failed
// (or, when it could preempt, of the group that must), and for a
// preemptor the flavor/resource no set of victims could free enough of.
type noFitMemo struct {
	config, change uint64
	permanent      bool // a requested resource has no quota in the queue
	byChange       bool // valid only while the tree is unchanged
	// The blocked entries: usually a few, kept inline.
	n      uint8
	inline [4]blockedFlavor
	extra  []blockedFlavor
	// A preemptor's flavor/resource no victims can cover, what it asks of
	// it, and its priority.
	boundFR  int32
	boundQty int64
	prio     int
}

func (m *noFitMemo) entries() []blockedFlavor {
	if m.extra != nil {
		return m.extra
	}
	return m.inline[:m.n]
}

// blockedFlavor is one short resource of a flavor that did not fit:
// flavor indexes the group's flavors, fr is the flavor/resource, qty the
// quantity requested.
type blockedFlavor struct {
	flavor int32
	fr     int32
	qty    int64
}

// remember memoizes a no-fit evaluation. It reports false when the memo
// stands for the facts only (victims that were not found), which the
// caller may record only while the root matches them.
func (s *State) remember(dst *noFitMemo, n *node, w *workload, a assignment, clean bool) bool {
	r := n.root
	m := noFitMemo{config: r.configGen, change: r.changeGen, permanent: a.permanent, boundFR: -1, prio: w.Priority}
	blocked := a.blocked
	switch {
	case a.permanent || len(a.blocked) > 0:
		// Neither fits nor could preempt in any flavor.
	case a.boundFR >= 0 && a.preemptGroups == 1:
		blocked, m.boundFR, m.boundQty = a.preemptBlocked, int32(a.boundFR), a.boundQty
	default:
		if !clean {
			return false
		}
		m.byChange = true
	}
	if len(blocked) <= len(m.inline) {
		m.n = uint8(copy(m.inline[:], blocked))
	} else {
		m.extra = slices.Clone(blocked)
	}
	*dst = m
	return true
}

// cursor walks one ClusterQueue's pending workloads during Schedule.
type cursor struct {
	q       *queue
	strict  bool
	pos     int
	blocked bool
}

// entry is a nominated head: its assignment and, when it must preempt,
// its victims, computed against the simulated usage of version ver of its
// root.
type entry struct {
	c       *cursor
	w       *workload
	a       assignment
	targets []*workload
	ver     int
}

// cycle is the simulation one Schedule call runs on: usage with this
// call's decisions charged, and per root a version counting the changes
// (0: the root still matches the facts, so memos apply).
type cycle struct {
	sim    []int64
	ver    []int // per root node index
	avail  availCache
	chosen map[string]bool // victims decided in this call
}

// evaluate assigns flavors to w and, when it must preempt and is not
// already waiting for victims, finds its victims. A preemptor without
// victims is reported as modeNoFit.
func (s *State) evaluate(cy *cycle, n *node, w *workload) (assignment, []*workload) {
	a := s.assign(n, w, cy.sim, &cy.avail, nil)
	if a.mode != modePreempt || len(w.victims) > 0 {
		return a, nil
	}
	// Before searching victims: if even evicting every candidate could
	// not cover the shortfall of one needed flavor/resource, no victims
	// exist, and the memo can say so exactly (see memoized).
	for _, fr := range a.need {
		q := a.qtyOf(fr)
		if q-cy.avail.get(n, cy.sim, fr) > cy.freeable(s, n, w.Priority, fr) {
			a.mode, a.boundFR, a.boundQty = modeNoFit, fr, q
			return a, nil
		}
	}
	t := s.targets(cy, n, w, a)
	if len(t) == 0 {
		a.mode = modeNoFit
	}
	return a, t
}

// qtyOf is the quantity the assignment charges to fr.
func (a *assignment) qtyOf(fr int) int64 {
	var q int64
	for _, r := range a.frs {
		if r.fr == fr {
			q += r.qty
		}
	}
	return q
}

// nominate finds the cursor's head: the first workload that fits or can
// preempt (or waits for its victims). Workloads that can do neither are
// memoized when the root matches the facts, and skipped (BestEffortFIFO)
// or block the queue (StrictFIFO).
func (s *State) nominate(cy *cycle, c *cursor) (entry, bool) {
	n := c.q.node
	root := n.root
	q := c.q
	// The whole queue is known to hold nothing that fits or can preempt:
	// skip it without looking at one workload. Only BestEffortFIFO queues
	// are summarised; a StrictFIFO queue stops at its first workload anyway.
	if c.pos == 0 && !c.strict && q.memoValid(cy, n) {
		c.blocked = true
		return entry{}, false
	}
	// A BestEffortFIFO scan of the whole queue that finds nothing
	// summarizes its workloads' memos into the queue's.
	summarize := c.pos == 0 && !c.strict
	if summarize {
		q.memo.config, q.memo.factsOnly = 0, false // invalid until the scan completes
		q.memo.minQty = resize(q.memo.minQty, len(s.frs))
	}
	for c.pos < len(q.pending) {
		w := q.pending[c.pos]
		// clean: this call has not changed the tree's usage yet, so what is
		// found now holds for the facts too and may be kept for later calls.
		clean := cy.ver[root.idx] == 0
		m := &q.memos[c.pos]
		if memoized(s, cy, n, m) {
			if c.strict {
				break
			}
			if summarize {
				q.fold(m)
			}
			c.pos++
			continue
		}
		a, t := s.evaluate(cy, n, w)
		if a.mode != modeNoFit {
			return entry{c: c, w: w, a: a, targets: t, ver: cy.ver[root.idx]}, true
		}
		if s.remember(m, n, w, a, clean) && summarize {
			q.fold(m)
		} else {
			summarize = false
		}
		if c.strict {
			break
		}
		c.pos++
	}
	// A summary standing for the facts needs a scan that saw them.
	if summarize && (!q.memo.factsOnly || cy.ver[root.idx] == 0) {
		q.memo.config, q.memo.change, q.memo.seq = root.configGen, root.changeGen, q.seq
		q.memo.availAt = q.memo.availAt[:0]
		for _, fr := range n.cq.frs {
			q.memo.availAt = append(q.memo.availAt, cy.avail.get(n, cy.sim, fr))
		}
	}
	c.blocked = true
	return entry{}, false
}

// queueMemo records that every pending workload of a BestEffortFIFO queue
// was memoized as fitting in no flavor and unable to preempt in any,
// what the queue could use of each of its flavor/resources then, and the
// smallest quantity any workload lacked per flavor/resource. While the
// queue gained no workload, every memo holds if nothing the queue can use
// grew since, or if each of those smallest quantities still exceeds it.
type queueMemo struct {
	config, change, seq uint64
	availAt             []int64 // per n.cq.frs
	minQty              []int64 // per flavor/resource
	// factsOnly: some memo holds for the facts only (a preemptor), so the
	// summary does too: valid while the tree is unchanged and the
	// simulation matches the facts.
	factsOnly bool
}

func (q *queue) memoValid(cy *cycle, n *node) bool {
	m, r := &q.memo, n.root
	if m.config == 0 || m.config != r.configGen || m.seq != q.seq {
		return false
	}
	if m.factsOnly {
		return m.change == r.changeGen && cy.ver[r.idx] == 0
	}
	grew := false
	for i, fr := range n.cq.frs {
		if cy.avail.get(n, cy.sim, fr) > m.availAt[i] {
			grew = true
			break
		}
	}
	if !grew {
		return true
	}
	for fr, v := range m.minQty {
		if v != math.MaxInt64 && v <= cy.avail.get(n, cy.sim, fr) {
			return false
		}
	}
	return true
}

// fold adds a memoized workload to the queue summary being built.
func (q *queue) fold(m *noFitMemo) {
	if m.byChange || m.boundFR >= 0 {
		q.memo.factsOnly = true
	}
	for _, b := range m.entries() {
		q.memo.minQty[b.fr] = min(q.memo.minQty[b.fr], b.qty)
	}
}

// resize returns buf with n elements, all MaxInt64.
func resize(buf []int64, n int) []int64 {
	buf = slices.Grow(buf[:0], n)[:n]
	for i := range buf {
		buf[i] = math.MaxInt64
	}
	return buf
}

func (cy *cycle) charge(n *node, frs []frQty) {
	for _, r := range frs {
		n.addUsage(cy.sim, r.fr, r.qty)
	}
	// The simulation no longer matches the facts in this tree: what is found
	// from here on may not be memoized (clean), and cached availability is
	// stale.
	cy.ver[n.root.idx]++
	cy.avail.epoch++
}

// Schedule decides what to do next, at most max decisions: admissions of
// pending workloads that fit, and preemptions for those that could fit by
// evicting others. It does not change the state's facts (it refreshes
// internal memos only): the caller persists the decisions and applies
// them in order with Admit and Preempt, which then always succeed. A
// larger max extends the decisions of a smaller one.
//
// Like Kueue, each cycle nominates the head of every ClusterQueue, orders
// the heads (not borrowing first, then priority, then age), and admits
// what fits, charging usage as it goes so one cycle never over-admits;
// cycles repeat until nothing moves or max is reached. A head that must
// preempt reserves its request for the rest of the call, so lower-ranked
// heads cannot take the room its victims free. All victims of one
// preemptor come in one call (the only case where a call returns more
// than max decisions: a first preemptor needing more victims than max).
//
// Callers apply the decisions and call again while decisions come. With
// no preemption configured, a call returning fewer than max decisions
// has considered every pending workload and the next call, on the
// applied decisions, decides nothing. With preemption it may: a workload
// just admitted by borrowing can be reclaimed at once by a preemptor that
// had no victim before, as in Kueue, and reservations order differently.
func (s *State) Schedule(now time.Time, max int) []Decision {
	if max <= 0 {
		return nil
	}
	// Decisions are simulated on a copy of the usage: the facts change only
	// when the caller applies the decisions, and a call whose decisions are
	// never recorded leaves no trace.
	cy := &cycle{
		sim: slices.Clone(s.usage), ver: make([]int, len(s.nodes)), chosen: map[string]bool{},
		avail: availCache{epoch: 1, stamp: make([]uint32, len(s.usage)), val: make([]int64, len(s.usage))},
	}
	var cursors []*cursor
	// Queues in name order: the same facts give the same decisions on every
	// replica and in every replay.
	for _, name := range slices.Sorted(maps.Keys(s.queues)) {
		q := s.queues[name]
		if q.node != nil && len(q.pending) > 0 {
			cursors = append(cursors, &cursor{q: q, strict: q.node.cq.spec.QueueingStrategy == StrictFIFO})
		}
	}
	var out []Decision
	var heads []entry
	for {
		heads = heads[:0]
		for _, c := range cursors {
			if !c.blocked {
				if e, ok := s.nominate(cy, c); ok {
					heads = append(heads, e)
				}
			}
		}
		if len(heads) == 0 {
			return out
		}
		slices.SortFunc(heads, func(a, b entry) int {
			if a.a.borrow != b.a.borrow {
				if a.a.borrow {
					return 1
				}
				return -1
			}
			return queueLess(a.w, b.w)
		})
		for i := range heads {
			if len(out) >= max {
				return out
			}
			e := &heads[i]
			n := e.c.q.node
			if e.ver != cy.ver[n.root.idx] {
				// Earlier heads of this cycle changed the usage under it.
				e.a, e.targets = s.evaluate(cy, n, e.w)
			}
			switch {
			case e.a.mode == modeFit:
				out = append(out, Decision{Kind: DecideAdmit, At: now, ID: e.w.ID, Assignment: s.publicAssignment(e.a)})
				cy.charge(n, e.a.frs)
				e.c.pos++
			case e.a.mode == modePreempt && len(e.w.victims) > 0:
				// Its victims are still stopping: wait for them.
				cy.charge(n, e.a.frs)
				e.c.blocked = true
			case e.a.mode == modePreempt:
				// A preemptor's victims come in one call or not at all: part
				// of a set frees too little, and those victims would stop
				// for nothing. The first decision of a call may exceed max,
				// so a preemptor with many victims is never starved.
				if len(out) > 0 && len(out)+len(e.targets) > max {
					return out
				}
				for _, v := range e.targets {
					// Chosen victims are off limits to later preemptors of
					// this call, and their usage stays charged: it is
					// released only once the victim has stopped (Evict).
					cy.chosen[v.ID] = true
					out = append(out, Decision{Kind: DecidePreempt, At: now, Victim: v.ID, Preemptor: e.w.ID})
				}
				cy.charge(n, e.a.frs)
				e.c.blocked = true
			case e.c.strict:
				e.c.blocked = true
			default:
				e.c.pos++
			}
		}
	}
}
