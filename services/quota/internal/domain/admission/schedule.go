package admission

import (
	"maps"
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
	if w.compiledFor == n {
		return w.compiled
	}
	c := &compiledReq{}
	byGroup := map[int]int{}
	for _, r := range w.reqs {
		gi, ok := n.cq.resGroup[r.res]
		if !ok {
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
func (s *State) assign(n *node, w *workload, u []int64, short *[]Shortage) assignment {
	c := s.compile(n, w)
	if len(c.uncovered) > 0 {
		if short != nil {
			for _, r := range c.uncovered {
				*short = append(*short, Shortage{Resource: r.res, Requested: r.qty})
			}
		}
		return assignment{mode: modeNoFit}
	}
	a := assignment{mode: modeFit}
	for _, rg := range c.groups {
		g := &n.cq.groups[rg.g]
		best, bestF, bestBorrow := modeNoFit, -1, false
		for fi := range g.flavors {
			fo := &g.flavors[fi]
			mode, borrow := modeFit, false
			for k, idx := range rg.idx {
				fr, q := fo.frs[idx], rg.qty[k]
				avail := n.available(u, fr)
				if q <= avail {
					borrow = borrow || n.borrowingWith(u, fr, q)
					continue
				}
				if short != nil {
					own := max(0, n.subtree[fr]-u[n.off+fr])
					*short = append(*short, Shortage{
						Flavor: fo.name, Resource: rg.res[k], Requested: q, Available: avail,
						Nominal: n.nominal[fr], Borrowable: max(0, avail-own),
					})
				}
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
		if best == modeNoFit {
			return assignment{mode: modeNoFit}
		}
		a.mode = max(a.mode, best)
		a.borrow = a.borrow || bestBorrow
		fo := &g.flavors[bestF]
		for k, idx := range rg.idx {
			fr, q := fo.frs[idx], rg.qty[k]
			a.frs = append(a.frs, frQty{fr, q})
			a.res = append(a.res, rg.res[k])
			if best == modePreempt && q > n.available(u, fr) {
				a.need = append(a.need, fr)
			}
		}
	}
	return a
}

func (s *State) publicAssignment(a assignment) Assignment {
	out := Assignment{Flavors: make(map[string]string, len(a.frs)), Borrowing: a.borrow}
	for i, r := range a.frs {
		out.Flavors[a.res[i]] = s.frs[r.fr].flavor
	}
	return out
}

// memoized reports whether w was found neither fitting nor able to
// preempt, and nothing that could change that happened since.
func memoized(n *node, w *workload) bool {
	r := n.root
	return w.noFitRelease == r.releaseGen && (!n.cq.canPreempt || w.noFitChange == r.changeGen)
}

// cursor walks one ClusterQueue's pending workloads during Schedule.
type cursor struct {
	q       *queue
	strict  bool
	pos     int
	blocked bool
}

type entry struct {
	c *cursor
	w *workload
	a assignment
}

// Schedule decides what to do next, at most max decisions: admissions of
// pending workloads that fit, and preemptions for those that could fit by
// evicting others. It does not change the state's facts (it refreshes
// internal memos only): the caller persists the decisions and applies
// them in order with Admit and Preempt, which then always succeed.
//
// Like Kueue, each cycle takes the head of every ClusterQueue, orders the
// heads (not borrowing first, then priority, then age), and admits what
// fits, charging usage as it goes so one cycle never over-admits; cycles
// repeat until nothing moves or max is reached. A head that must preempt
// reserves its request for the rest of the call, so lower-ranked heads
// cannot take the room its victims free.
func (s *State) Schedule(now time.Time, max int) []Decision {
	if max <= 0 {
		return nil
	}
	sim := slices.Clone(s.usage)
	dirty := map[*node]bool{} // roots whose simulated usage differs from the facts
	chosen := map[string]bool{}
	var cursors []*cursor
	for _, name := range slices.Sorted(maps.Keys(s.queues)) {
		q := s.queues[name]
		if q.node != nil && len(q.pending) > 0 {
			cursors = append(cursors, &cursor{q: q, strict: q.node.cq.spec.QueueingStrategy == StrictFIFO})
		}
	}
	var out []Decision
	var heads []entry
	for len(out) < max {
		heads = heads[:0]
		moved := false
		for _, c := range cursors {
			if c.blocked {
				continue
			}
			n := c.q.node
			for c.pos < len(c.q.pending) {
				w := c.q.pending[c.pos]
				if !memoized(n, w) {
					heads = append(heads, entry{c: c, w: w, a: s.assign(n, w, sim, nil)})
					break
				}
				if c.strict {
					c.blocked = true
					break
				}
				c.pos++
			}
			if c.pos >= len(c.q.pending) {
				c.blocked = true
			}
		}
		if len(heads) == 0 {
			break
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
				break
			}
			e := &heads[i]
			n := e.c.q.node
			root := n.root
			if dirty[root] {
				e.a = s.assign(n, e.w, sim, nil)
			}
			switch e.a.mode {
			case modeFit:
				out = append(out, Decision{Kind: DecideAdmit, At: now, ID: e.w.ID, Assignment: s.publicAssignment(e.a)})
				for _, r := range e.a.frs {
					n.addUsage(sim, r.fr, r.qty)
				}
				dirty[root] = true
				e.c.pos++
				moved = true
				continue
			case modePreempt:
				if len(e.w.victims) > 0 {
					// Its victims are still stopping: wait for them.
					s.reserve(n, e.a, sim)
					dirty[root] = true
					e.c.blocked = true
					continue
				}
				targets := s.targets(n, e.w, e.a, sim, chosen)
				if len(targets) > 0 && (len(out) == 0 || len(out)+len(targets) <= max) {
					for _, v := range targets {
						chosen[v.ID] = true
						out = append(out, Decision{Kind: DecidePreempt, At: now, Victim: v.ID, Preemptor: e.w.ID})
					}
					s.reserve(n, e.a, sim)
					dirty[root] = true
					e.c.blocked = true
					moved = true
					continue
				}
				if len(targets) > 0 {
					// No room left in this call for the whole victim set.
					e.c.blocked = true
					continue
				}
			}
			// Neither fits nor can preempt.
			if !dirty[root] {
				e.w.noFitRelease, e.w.noFitChange = root.releaseGen, root.changeGen
			}
			if e.c.strict {
				e.c.blocked = true
			} else {
				e.c.pos++
				moved = true
			}
		}
		if !moved {
			break
		}
	}
	return out
}

// reserve charges a preemptor's request to the simulated usage so heads
// ranked after it in this call cannot take the room being freed for it.
func (s *State) reserve(n *node, a assignment, sim []int64) {
	for _, r := range a.frs {
		n.addUsage(sim, r.fr, r.qty)
	}
}
