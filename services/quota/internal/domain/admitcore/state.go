package admitcore

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Workload is a unit of admission: one task asking its ClusterQueue for
// resources.
type Workload struct {
	ID           string
	ClusterQueue string
	// Priority: a higher value is a higher priority, as in Kueue.
	Priority int
	// Created orders workloads of equal priority (older first).
	Created time.Time
	// Requests maps a resource name to a quantity in the caller's units
	// (milli-units for Kubernetes quantities). Zero requests are ignored.
	Requests map[string]int64
}

// Assignment is where an admitted workload's requests are charged: the
// flavor of each requested resource.
type Assignment struct {
	// Flavors maps each requested resource to the flavor charged.
	Flavors map[string]string
	// Borrowing reports whether, when decided, the admission used quota
	// beyond the ClusterQueue's nominal quota. Informational: Admit
	// recomputes what it needs.
	Borrowing bool
}

// workload is the state's record of a Workload.
type workload struct {
	Workload
	reqs []resQty // sorted by resource name, zero requests dropped

	admitted   bool
	assignment []frQty // when admitted
	flavors    map[string]string
	admitSeq   uint64 // orders admissions: higher is more recent

	// Preemption in progress: a victim names its preemptor while being
	// evicted; a preemptor lists the victims it waits for.
	evictingFor string
	evicting    bool
	victims     []string

	// compiled caches the requests resolved against the resource groups of
	// the ClusterQueue node they were compiled for.
	compiled    *compiledReq
	compiledFor *node
}

type resQty struct {
	res string
	qty int64
}

// clusterQueue is the scheduling side of a ClusterQueue node.
type clusterQueue struct {
	spec     ClusterQueue
	groups   []group
	resGroup map[string]int // resource → index in groups
	frs      []int          // every flavor/resource of its groups
	// canPreempt: some preemption policy is enabled.
	canPreempt bool
}

type group struct {
	resources []string
	flavors   []flavorOpt
}

type flavorOpt struct {
	name string
	frs  []int // fr index per resource of the group
}

// queue holds the pending workloads of one ClusterQueue name, sorted in
// admission order (priority desc, creation asc, id asc), and its admitted
// ones. It survives Reconfigure removing the ClusterQueue, so the pending
// workloads wait for it to come back.
type queue struct {
	name    string
	node    *node // nil while the ClusterQueue is not configured
	pending []*workload
	// memos[i] records why pending[i] neither fit nor could preempt when
	// last evaluated (see memoized), so scans skip it cheaply.
	memos    []noFitMemo
	admitted map[string]*workload
	// victims: the admitted workloads not being evicted, in the order
	// preemption tries them.
	victims []*workload
	// seq counts insertions into pending; memo summarizes its pending
	// workloads for Schedule.
	seq  uint64
	memo queueMemo
}

// State is the admission state: configuration, usage, pending and admitted
// workloads. Mutations are facts that always leave it consistent;
// decisions come from Schedule. It is not safe for concurrent use: the
// caller serializes access (Schedule and Explain change no fact, but
// Schedule updates internal memos and caches that never change a
// decision).
type State struct {
	cfg       Config
	frIndex   map[frKey]int
	frs       []frKey
	nodes     []*node
	cohorts   map[string]*node
	queues    map[string]*queue
	workloads map[string]*workload
	usage     []int64
	gen       uint64 // source of unique generation numbers
	admitSeq  uint64
	// Per-tree cache for preemption, valid while the root's changeGen is
	// the one recorded.
	sums []sumsCache // by node offset + fr, like usage
}

type frKey struct{ flavor, resource string }

// New validates cfg and returns an empty state for it.
func New(cfg Config) (*State, error) {
	cfg = cfg.withImplicitCohorts()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &State{queues: map[string]*queue{}, workloads: map[string]*workload{}}
	s.build(cfg.clone())
	return s, nil
}

// Reconfigure replaces the configuration. Usage of admitted workloads is
// kept; pending workloads of a ClusterQueue that disappears stay pending
// (Explain says why) until it is configured again. Removing a
// ClusterQueue that still has admitted workloads is refused with
// ErrQueueInUse. On error nothing changes.
func (s *State) Reconfigure(cfg Config) error {
	cfg = cfg.withImplicitCohorts()
	if err := cfg.validate(); err != nil {
		return err
	}
	names := make(map[string]bool, len(cfg.ClusterQueues))
	for _, cq := range cfg.ClusterQueues {
		names[cq.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(s.queues)) {
		if q := s.queues[name]; !names[name] && len(q.admitted) > 0 {
			return &ConfigError{Kind: "ClusterQueue", Name: name, Err: ErrQueueInUse}
		}
	}
	s.build(cfg.clone())
	return nil
}

// build (re)creates the quota tree for cfg and recharges the usage of the
// admitted workloads.
func (s *State) build(cfg Config) {
	s.cfg = cfg
	s.frIndex = map[frKey]int{}
	s.frs = s.frs[:0]
	// Every flavor/resource pair gets a dense index: usage, quotas and
	// limits are flat slices indexed by node offset plus pair, which keeps
	// Schedule's inner loops free of map lookups.
	addFR := func(k frKey) int {
		if i, ok := s.frIndex[k]; ok {
			return i
		}
		s.frIndex[k] = len(s.frs)
		s.frs = append(s.frs, k)
		return len(s.frs) - 1
	}
	for _, ch := range cfg.Cohorts {
		for _, g := range ch.ResourceGroups {
			for _, f := range g.Flavors {
				for _, r := range f.Resources {
					addFR(frKey{f.Name, r.Name})
				}
			}
		}
	}
	for _, cq := range cfg.ClusterQueues {
		for _, g := range cq.ResourceGroups {
			for _, f := range g.Flavors {
				for _, r := range f.Resources {
					addFR(frKey{f.Name, r.Name})
				}
			}
		}
	}
	// Admitted workloads keep their flavors even if a flavor left the
	// configuration: their usage must stay charged somewhere.
	ids := slices.Sorted(maps.Keys(s.workloads))
	for _, id := range ids {
		w := s.workloads[id]
		if w.admitted {
			for _, r := range w.reqs {
				addFR(frKey{w.flavors[r.res], r.res})
			}
		}
	}
	numFR := len(s.frs)

	// Cohorts and ClusterQueues are all nodes of quota trees: a cohort's
	// node holds its own quota, a ClusterQueue's its nominal quota, and what
	// each may lend and borrow is computed along the tree (computeQuotas).
	s.nodes = s.nodes[:0]
	s.cohorts = make(map[string]*node, len(cfg.Cohorts))
	newNode := func(name string, groups []ResourceGroup) *node {
		n := &node{
			name:        name,
			idx:         len(s.nodes),
			off:         len(s.nodes) * numFR,
			nominal:     make([]int64, numFR),
			borrowLimit: make([]int64, numFR),
			lendLimit:   make([]int64, numFR),
		}
		for fr := range numFR {
			// -1 is no limit, like an absent borrowingLimit or lendingLimit
			// in Kueue.
			n.borrowLimit[fr], n.lendLimit[fr] = -1, -1
		}
		for _, g := range groups {
			for _, f := range g.Flavors {
				for _, r := range f.Resources {
					fr := s.frIndex[frKey{f.Name, r.Name}]
					n.nominal[fr] = r.NominalQuota
					if r.BorrowingLimit != nil {
						n.borrowLimit[fr] = *r.BorrowingLimit
					}
					if r.LendingLimit != nil {
						n.lendLimit[fr] = *r.LendingLimit
					}
				}
			}
		}
		s.nodes = append(s.nodes, n)
		return n
	}
	for _, ch := range cfg.Cohorts {
		s.cohorts[ch.Name] = newNode(ch.Name, ch.ResourceGroups)
	}
	for _, ch := range cfg.Cohorts {
		if ch.Parent != "" {
			n, p := s.cohorts[ch.Name], s.cohorts[ch.Parent]
			n.parent = p
			p.cohorts = append(p.cohorts, n)
		}
	}
	// Queues outlive the configuration: a queue whose ClusterQueue is gone
	// keeps its pending workloads, with no node, until it returns.
	for _, q := range s.queues {
		q.node = nil
	}
	for _, spec := range cfg.ClusterQueues {
		n := newNode(spec.Name, spec.ResourceGroups)
		n.cq = newClusterQueue(spec, s.frIndex)
		if spec.Cohort != "" {
			n.parent = s.cohorts[spec.Cohort]
			n.parent.queues = append(n.parent.queues, n)
		}
		s.queue(spec.Name).node = n
	}
	for _, n := range s.nodes {
		// Every node knows its root: a change anywhere in a tree is recorded
		// once, on the root's generations, which is what memos and caches
		// compare against.
		r := n
		for r.parent != nil {
			r = r.parent
		}
		n.root = r
	}
	for _, n := range s.nodes {
		if n.parent == nil {
			// A new configuration is a change for every tree: fresh
			// generations invalidate every memo and cache made under the old
			// one.
			n.computeQuotas(numFR)
			s.gen++
			n.configGen, n.changeGen = s.gen, s.gen
		}
	}
	// Usage is recomputed from the admitted workloads rather than carried
	// over: node offsets and pair indexes may all have moved.
	s.usage = make([]int64, len(s.nodes)*numFR)
	s.sums = make([]sumsCache, len(s.usage))
	for _, id := range ids {
		w := s.workloads[id]
		if !w.admitted {
			continue
		}
		w.assignment = w.assignment[:0]
		for _, r := range w.reqs {
			w.assignment = append(w.assignment, frQty{s.frIndex[frKey{w.flavors[r.res], r.res}], r.qty})
		}
		s.charge(s.queues[w.ClusterQueue].node, w.assignment, 1)
	}
}

func newClusterQueue(spec ClusterQueue, frIndex map[frKey]int) *clusterQueue {
	cq := &clusterQueue{spec: spec, resGroup: map[string]int{}}
	for gi, g := range spec.ResourceGroups {
		cg := group{resources: g.CoveredResources}
		for _, r := range g.CoveredResources {
			cq.resGroup[r] = gi
		}
		for _, f := range g.Flavors {
			fo := flavorOpt{name: f.Name}
			for _, r := range f.Resources {
				fo.frs = append(fo.frs, frIndex[frKey{f.Name, r.Name}])
				cq.frs = append(cq.frs, frIndex[frKey{f.Name, r.Name}])
			}
			cg.flavors = append(cg.flavors, fo)
		}
		cq.groups = append(cq.groups, cg)
	}
	p := spec.Preemption
	// Reclaiming within a cohort needs a cohort; a queue that may preempt in
	// no way skips the preemption search altogether.
	cq.canPreempt = (p.WithinClusterQueue != "" && p.WithinClusterQueue != Never) ||
		(spec.Cohort != "" && p.ReclaimWithinCohort != "" && p.ReclaimWithinCohort != Never)
	return cq
}

func (s *State) queue(name string) *queue {
	q := s.queues[name]
	if q == nil {
		q = &queue{name: name, admitted: map[string]*workload{}}
		s.queues[name] = q
	}
	return q
}

// charge adds (sign 1) or releases (sign -1) an assignment's usage on the
// ClusterQueue node n (nil when the queue is not configured) and bumps the
// root's generations.
func (s *State) charge(n *node, a []frQty, sign int64) {
	if n == nil {
		return
	}
	for _, r := range a {
		n.addUsage(s.usage, r.fr, sign*r.qty)
	}
	s.gen++
	// A usage change anywhere in a tree may change what fits anywhere in it
	// (borrowing crosses queues), so the whole tree's memos go stale.
	n.root.changeGen = s.gen

}

// queueLess is the admission order: priority desc, creation asc, id asc.
func queueLess(a, b *workload) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	// The id breaks ties so the order is total: binary search finds a
	// workload's own position, and a replay orders every queue exactly as
	// before.
	return cmp.Compare(a.ID, b.ID)
}

func (q *queue) insert(w *workload) {
	i, _ := slices.BinarySearchFunc(q.pending, w, queueLess)
	q.pending = slices.Insert(q.pending, i, w)
	// memos runs parallel to pending; a new workload has not been evaluated
	// yet.
	q.memos = slices.Insert(q.memos, i, noFitMemo{})
	// seq tells Schedule's queue memo that a workload arrived since it last
	// looked.
	q.seq++
}

func (q *queue) position(w *workload) int {
	i, ok := slices.BinarySearchFunc(q.pending, w, queueLess)
	if !ok {
		return -1
	}
	return i
}

func (q *queue) drop(w *workload) {
	if i := q.position(w); i >= 0 {
		q.pending = slices.Delete(q.pending, i, i+1)
		q.memos = slices.Delete(q.memos, i, i+1)
	}
}

// Enqueue adds a pending workload. Errors: ErrInvalidWorkload,
// ErrDuplicate, ErrUnknownQueue.
func (s *State) Enqueue(w Workload) error {
	if w.ID == "" || w.ClusterQueue == "" {
		return fmt.Errorf("%w: id and cluster queue are required", ErrInvalidWorkload)
	}
	reqs := make([]resQty, 0, len(w.Requests))
	for r, q := range w.Requests {
		if r == "" || q < 0 || q > MaxQuantity {
			return fmt.Errorf("%w: %s: request %q = %d", ErrInvalidWorkload, w.ID, r, q)
		}
		// Zero requests take no quota and need no flavor: dropped here once
		// rather than skipped everywhere.
		if q > 0 {
			reqs = append(reqs, resQty{r, q})
		}
	}
	if _, dup := s.workloads[w.ID]; dup {
		return fmt.Errorf("%w: %s", ErrDuplicate, w.ID)
	}
	q := s.queues[w.ClusterQueue]
	// Only into a configured ClusterQueue, so a workload is admissible in
	// principle when it arrives; once queued it survives the queue's removal
	// (Reconfigure).
	if q == nil || q.node == nil {
		return fmt.Errorf("%w: %s", ErrUnknownQueue, w.ClusterQueue)
	}
	// Sorted by resource: assignments, charges and explanations list
	// resources in one stable order.
	slices.SortFunc(reqs, func(a, b resQty) int { return cmp.Compare(a.res, b.res) })
	// The caller's map is not kept: the state must not change when the
	// caller reuses it.
	w.Requests = maps.Clone(w.Requests)
	rec := &workload{Workload: w, reqs: reqs}
	s.workloads[w.ID] = rec
	q.insert(rec)
	return nil
}

// Admit records the admission of a pending workload with the given
// assignment. Errors: ErrUnknownWorkload, ErrNotPending, ErrUnknownQueue
// (its ClusterQueue is not configured), ErrInvalidAssignment, and a
// *QuotaError (ErrQuotaExceeded) when it does not fit. On error nothing
// changes.
func (s *State) Admit(id string, a Assignment) error {
	w := s.workloads[id]
	if w == nil {
		return fmt.Errorf("%w: %s", ErrUnknownWorkload, id)
	}
	if w.admitted {
		return fmt.Errorf("%w: %s", ErrNotPending, id)
	}
	q := s.queues[w.ClusterQueue]
	if q.node == nil {
		return fmt.Errorf("%w: %s", ErrUnknownQueue, w.ClusterQueue)
	}
	// A decision is checked again rather than trusted: it is persisted and
	// applied as a fact, possibly after the configuration or the usage
	// changed.
	frs, err := s.resolve(q.node.cq, w, a)
	if err != nil {
		return err
	}
	// The whole assignment must fit at once: add and check each resource,
	// undoing on the first failure.
	n := q.node
	for i, r := range frs {
		if avail := n.available(s.usage, r.fr); r.qty > avail {
			for _, u := range frs[:i] {
				n.addUsage(s.usage, u.fr, -u.qty)
			}
			k := s.frs[r.fr]
			return &QuotaError{Workload: id, Flavor: k.flavor, Resource: k.resource, Requested: r.qty, Available: avail}
		}
		n.addUsage(s.usage, r.fr, r.qty)
	}
	// Usage is already added; charge only the generations.
	s.charge(n, nil, 1)
	q.drop(w)
	q.admitted[id] = w
	s.admitSeq++
	w.admitted, w.assignment, w.admitSeq = true, frs, s.admitSeq
	q.addVictim(w) // after admitSeq: it orders victims
	w.flavors = make(map[string]string, len(frs))
	for _, r := range frs {
		k := s.frs[r.fr]
		w.flavors[k.resource] = k.flavor
	}
	s.stopWaiting(w)
	return nil
}

// resolve checks an assignment against the ClusterQueue's resource groups
// and turns it into flavor/resource indexes, in the order of w.reqs.
func (s *State) resolve(cq *clusterQueue, w *workload, a Assignment) ([]frQty, error) {
	if len(a.Flavors) != len(w.reqs) {
		return nil, fmt.Errorf("%w: %s: %d flavors for %d requested resources", ErrInvalidAssignment, w.ID, len(a.Flavors), len(w.reqs))
	}
	groupFlavor := map[int]string{}
	out := make([]frQty, 0, len(w.reqs))
	for _, r := range w.reqs {
		f, ok := a.Flavors[r.res]
		if !ok {
			return nil, fmt.Errorf("%w: %s: no flavor for %s", ErrInvalidAssignment, w.ID, r.res)
		}
		gi, ok := cq.resGroup[r.res]
		if !ok {
			return nil, fmt.Errorf("%w: %s: cluster queue %s has no quota for %s", ErrInvalidAssignment, w.ID, cq.spec.Name, r.res)
		}
		// The resources of one group are charged to one flavor together, as
		// in Kueue: GPUs and the memory that comes with them on the same
		// kind of node.
		if prev, seen := groupFlavor[gi]; seen && prev != f {
			return nil, fmt.Errorf("%w: %s: flavors %s and %s in one resource group", ErrInvalidAssignment, w.ID, prev, f)
		}
		groupFlavor[gi] = f
		fr, ok := s.frIndex[frKey{f, r.res}]
		// The pair may exist in the configuration (another queue offers it)
		// without this queue offering it.
		offered := false
		for _, fo := range cq.groups[gi].flavors {
			offered = offered || fo.name == f
		}
		if !ok || !offered {
			return nil, fmt.Errorf("%w: %s: cluster queue %s does not offer flavor %s for %s", ErrInvalidAssignment, w.ID, cq.spec.Name, f, r.res)
		}
		out = append(out, frQty{fr, r.qty})
	}
	return out, nil
}

// Preempt records that victim is being evicted to make room for
// preemptor: the victim keeps its usage until Evict (or Remove), and the
// preemptor does not ask for more victims meanwhile. Errors:
// ErrUnknownWorkload, ErrNotAdmitted (victim), ErrAlreadyEvicting,
// ErrNotPending (preemptor).
func (s *State) Preempt(victim, preemptor string) error {
	v, p := s.workloads[victim], s.workloads[preemptor]
	if v == nil {
		return fmt.Errorf("%w: %s", ErrUnknownWorkload, victim)
	}
	if p == nil {
		return fmt.Errorf("%w: %s", ErrUnknownWorkload, preemptor)
	}
	if !v.admitted {
		return fmt.Errorf("%w: victim %s", ErrNotAdmitted, victim)
	}
	if v.evicting {
		return fmt.Errorf("%w: %s", ErrAlreadyEvicting, victim)
	}
	if p.admitted {
		return fmt.Errorf("%w: preemptor %s", ErrNotPending, preemptor)
	}
	// A victim being evicted is no candidate for another preemptor: two
	// preemptors must never count the same resources as freed.
	s.queues[v.ClusterQueue].dropVictim(v)
	v.evicting, v.evictingFor = true, preemptor
	p.victims = append(p.victims, victim)
	// A preemptor waiting for its victims is always nominated: forget
	// why it could not preempt before.
	if pq := s.queues[p.ClusterQueue]; pq != nil {
		if i := pq.position(p); i >= 0 {
			pq.memos[i] = noFitMemo{}
		}
	}
	s.gen++
	// Choosing a victim changes no usage, but it changes who can still be
	// preempted in the tree: memoized "cannot preempt" answers go stale.
	s.queues[v.ClusterQueue].touch(s.gen)
	return nil
}

// touch marks a change in the queue's tree that is not a usage change
// (e.g. a victim chosen), so memoized decisions are re-evaluated.
func (q *queue) touch(gen uint64) {
	if q.node != nil {
		q.node.root.changeGen = gen
	}
}

// Evict records that an admitted workload went back to pending (preempted
// or requeued): its usage is freed. Errors: ErrUnknownWorkload,
// ErrNotAdmitted.
func (s *State) Evict(id string) error {
	w := s.workloads[id]
	if w == nil {
		return fmt.Errorf("%w: %s", ErrUnknownWorkload, id)
	}
	if !w.admitted {
		return fmt.Errorf("%w: %s", ErrNotAdmitted, id)
	}
	s.release(w)
	// Back into its queue in admission order: an evicted workload keeps its
	// priority and creation time, and so its place.
	s.queues[w.ClusterQueue].insert(w)
	return nil
}

// Remove drops a workload (finished, cancelled or deleted), freeing its
// usage when admitted. Errors: ErrUnknownWorkload.
func (s *State) Remove(id string) error {
	w := s.workloads[id]
	if w == nil {
		return fmt.Errorf("%w: %s", ErrUnknownWorkload, id)
	}
	q := s.queues[w.ClusterQueue]
	if w.admitted {
		s.release(w)
	} else {
		// A pending workload frees no quota when it leaves, but a leaving
		// preemptor gives up its claim on its victims and the queue's head
		// may change: the tree's memos go stale.
		q.drop(w)
		s.stopWaiting(w)
		s.gen++
		q.touch(s.gen)
	}
	delete(s.workloads, id)
	return nil
}

// release frees an admitted workload's usage and ends its eviction.
func (s *State) release(w *workload) {
	q := s.queues[w.ClusterQueue]
	s.charge(q.node, w.assignment, -1)
	delete(q.admitted, w.ID)
	// A workload being evicted left the victim list when it was chosen.
	if !w.evicting {
		q.dropVictim(w)
	}
	w.admitted, w.assignment, w.flavors = false, nil, nil
	if w.evicting {
		// Its preemptor waits for one victim fewer; once it waits for none
		// it may be admitted.
		if p := s.workloads[w.evictingFor]; p != nil {
			p.victims = slices.DeleteFunc(p.victims, func(v string) bool { return v == w.ID })
		}
		w.evicting, w.evictingFor = false, ""
	}
}

// stopWaiting forgets the victims a preemptor waited for (it was admitted
// or removed); they are still evicted, as recorded.
func (s *State) stopWaiting(p *workload) {
	for _, id := range p.victims {
		if v := s.workloads[id]; v != nil && v.evictingFor == p.ID {
			v.evictingFor = ""
		}
	}
	p.victims = nil
}
