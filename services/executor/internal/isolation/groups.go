package isolation

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
)

// Cgroups are reused (docs/executor.md, "Cgroups are reused"): making a
// task's cgroup and removing it again (on cgroup v1 one directory per
// controller, each with the kernel's per-group memory accounting to set up
// and tear down) cost a short task more than everything else the agent
// does with cgroups. The group of a settled attempt, emptied by its shim,
// is kept when it is idle and given to a later attempt with that
// attempt's limits written over its own.
//
// Invariant: a group is lent to at most one attempt at a time. It enters
// the pool only through Recycle by the attempt it was lent to (or by an
// attempt recovered after a restart, whose loan this process never made,
// when no loan of this process names the group), only when it holds no
// process, and take hands each pooled group out once.

// maxChargedSpare is the most memory a group may still be charged with
// to be kept (cgroup.Group.Idle): what a short task leaves in the page
// cache and the kernel's caches, which the kernel reclaims from the next
// task's group when it needs to.
const maxChargedSpare = 16 << 20

// groupPool holds the spare groups and the loans.
type groupPool struct {
	max int

	mu     sync.Mutex
	spares []*cgroup.Group
	lent   map[string]*cgroup.Group // by the attempt it is lent to
	closed bool
}

// take lends a spare to attemptID, nil when there is none.
func (p *groupPool) take(attemptID string) *cgroup.Group {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.spares)
	if n == 0 {
		return nil
	}
	g := p.spares[n-1]
	p.spares = p.spares[:n-1]
	p.lent[attemptID] = g
	return g
}

// lend records a new group's loan to attemptID.
func (p *groupPool) lend(g *cgroup.Group, attemptID string) {
	if p.max <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lent[attemptID] = g
}

// giveBack ends attemptID's loan and returns the group lent. Without a
// loan (an attempt a previous run of the agent started) the group is
// unknown's, unless another attempt holds it or it is in the pool
// already: then it is nil.
func (p *groupPool) giveBack(attemptID string, unknown func() *cgroup.Group) *cgroup.Group {
	p.mu.Lock()
	g, ok := p.lent[attemptID]
	delete(p.lent, attemptID)
	p.mu.Unlock()
	if ok {
		return g
	}
	if unknown == nil {
		return nil
	}
	if g = unknown(); g == nil || len(g.Dirs) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	same := func(o *cgroup.Group) bool { return o.MemoryDir == g.MemoryDir }
	for _, o := range p.lent {
		if same(o) {
			return nil
		}
	}
	if slices.ContainsFunc(p.spares, same) {
		return nil
	}
	return g
}

// keep pools g and says whether it did: not when the pool is full or
// closed.
func (p *groupPool) keep(g *cgroup.Group) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.spares) >= p.max {
		return false
	}
	p.spares = append(p.spares, g)
	return true
}

// close removes the spares, and the lent groups that are empty: those of
// attempts whose task has ended (its shim emptied the group) but whose
// outcome was not settled before the agent stopped. The next agent would
// find such a group only through the attempt's spec; a group removed here
// it does not miss. A lent group with a process in it (a task that goes
// on with its shim) is not removed: rmdir refuses it and nothing is
// killed.
func (p *groupPool) close() {
	p.mu.Lock()
	spares := p.spares
	lent := make([]*cgroup.Group, 0, len(p.lent))
	for _, g := range p.lent {
		lent = append(lent, g)
	}
	p.spares, p.closed = nil, true
	p.mu.Unlock()
	for _, g := range spares {
		_ = cgroup.Remove(g.Dirs)
	}
	for _, g := range lent {
		for _, d := range g.Dirs {
			_ = syscall.Rmdir(d)
		}
	}
}

// ReusesGroups reports whether settled attempts' cgroups are kept: a
// task's shim then empties its group at the end instead of removing it,
// and Recycle takes it back.
func (l *Limiter) ReusesGroups() bool {
	return l != nil && l.hier != nil && l.groups.max > 0
}

// SpareGroups is how many idle groups are kept now.
func (l *Limiter) SpareGroups() int {
	if l == nil {
		return 0
	}
	l.groups.mu.Lock()
	defer l.groups.mu.Unlock()
	return len(l.groups.spares)
}

// Recycle takes back the group of attempt attemptID, settled: kept for a
// later attempt when idle and the pool has room, else removed with
// whatever is left in it. unknown gives the group of an attempt this
// process did not lend one to (recovered after a restart: the group its
// spec names); it is not called for one it did.
func (l *Limiter) Recycle(attemptID string, unknown func() *cgroup.Group) {
	if !l.ReusesGroups() {
		return // the shims remove the groups
	}
	g := l.groups.giveBack(attemptID, unknown)
	if g == nil {
		return
	}
	if g.Idle(maxChargedSpare) && l.groups.keep(g) {
		return
	}
	_ = cgroup.Remove(g.Dirs)
}

// RemoveStaleGroups removes the empty groups an earlier run of the agent
// left under its parents, kept for reuse when it stopped without Close:
// those named after an attempt that stale says is over, and not named in
// held (the groups of the attempts it resumes). Nothing is killed: a
// group with a process in it is not removed.
func (l *Limiter) RemoveStaleGroups(stale func(name string) bool, held map[string]bool) {
	if l == nil || l.hier == nil {
		return
	}
	for _, parent := range l.hier.Parents {
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			dir := filepath.Join(parent, e.Name())
			if !e.IsDir() || held[dir] || !stale(e.Name()) {
				continue
			}
			_ = syscall.Rmdir(dir)
		}
	}
}
