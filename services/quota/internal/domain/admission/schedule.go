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
	ver    map[*node]int
	chosen map[string]bool // victims decided in this call
}

// evaluate assigns flavors to w and, when it must preempt and is not
// already waiting for victims, finds its victims. A preemptor without
// victims is reported as modeNoFit.
func (s *State) evaluate(cy *cycle, n *node, w *workload) (assignment, []*workload) {
	a := s.assign(n, w, cy.sim, nil)
	if a.mode != modePreempt || len(w.victims) > 0 {
		return a, nil
	}
	t := s.targets(n, w, a, cy.sim, cy.chosen)
	if len(t) == 0 {
		a.mode = modeNoFit
	}
	return a, t
}

// nominate finds the cursor's head: the first workload that fits or can
// preempt (or waits for its victims). Workloads that can do neither are
// memoized when the root matches the facts, and skipped (BestEffortFIFO)
// or block the queue (StrictFIFO).
func (s *State) nominate(cy *cycle, c *cursor) (entry, bool) {
	n := c.q.node
	root := n.root
	for c.pos < len(c.q.pending) {
		w := c.q.pending[c.pos]
		clean := cy.ver[root] == 0
		if clean && memoized(n, w) {
			if c.strict {
				break
			}
			c.pos++
			continue
		}
		a, t := s.evaluate(cy, n, w)
		if a.mode != modeNoFit {
			return entry{c: c, w: w, a: a, targets: t, ver: cy.ver[root]}, true
		}
		if clean {
			w.noFitRelease, w.noFitChange = root.releaseGen, root.changeGen
		}
		if c.strict {
			break
		}
		c.pos++
	}
	c.blocked = true
	return entry{}, false
}

func (cy *cycle) charge(n *node, frs []frQty) {
	for _, r := range frs {
		n.addUsage(cy.sim, r.fr, r.qty)
	}
	cy.ver[n.root]++
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
// preemptor come in one call.
func (s *State) Schedule(now time.Time, max int) []Decision {
	if max <= 0 {
		return nil
	}
	cy := &cycle{sim: slices.Clone(s.usage), ver: map[*node]int{}, chosen: map[string]bool{}}
	var cursors []*cursor
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
			if e.ver != cy.ver[n.root] {
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
				if len(out) > 0 && len(out)+len(e.targets) > max {
					return out
				}
				for _, v := range e.targets {
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
