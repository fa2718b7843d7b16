package isolation

import (
	"testing"

	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
)

// A group is lent to one attempt at a time: only that attempt gives it
// back, a late give-back by an earlier one is ignored, and a group known
// only from a spec is not taken back while a loan or the pool holds it.
func TestGroupPoolLendsEachGroupOnce(t *testing.T) {
	p := groupPool{max: 2, lent: map[string]*cgroup.Group{}}
	g := &cgroup.Group{Dirs: []string{"/cg/a"}, MemoryDir: "/cg/a"}
	p.lend(g, "att-1")
	if got := p.giveBack("att-1", nil); got != g {
		t.Fatalf("the lender's give-back: %v", got)
	}
	if !p.keep(g) {
		t.Fatal("a group was not kept in a pool with room")
	}
	if got := p.take("att-2"); got != g {
		t.Fatalf("take: %v", got)
	}
	// att-1 settles again, late, naming the same group from its spec:
	// att-2 holds it.
	if got := p.giveBack("att-1", func() *cgroup.Group { return &cgroup.Group{Dirs: g.Dirs, MemoryDir: g.MemoryDir} }); got != nil {
		t.Errorf("a late give-back of a group lent to another: %v", got)
	}
	if got := p.giveBack("att-2", nil); got != g {
		t.Errorf("the holder's give-back: %v", got)
	}
	p.keep(g)
	// A recovered attempt naming a pooled group does not get it back.
	if got := p.giveBack("att-0", func() *cgroup.Group { return &cgroup.Group{Dirs: g.Dirs, MemoryDir: g.MemoryDir} }); got != nil {
		t.Errorf("a give-back of a pooled group: %v", got)
	}
	// One it knows from its spec alone, held by no one, it does.
	other := &cgroup.Group{Dirs: []string{"/cg/b"}, MemoryDir: "/cg/b"}
	if got := p.giveBack("att-9", func() *cgroup.Group { return other }); got != other {
		t.Errorf("a recovered attempt's own group: %v", got)
	}
	// The pool is bounded, and closed it keeps nothing.
	p.keep(other)
	if p.keep(&cgroup.Group{MemoryDir: "/cg/c"}) {
		t.Error("a full pool kept a group")
	}
	p.spares = nil
	p.closed = true
	if p.keep(other) {
		t.Error("a closed pool kept a group")
	}
}
