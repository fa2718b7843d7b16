package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
)

// definitions is a recording in-memory DefinitionStore. A transaction
// works on a copy that replaces the committed state when it succeeds.
type definitions struct {
	mu        sync.Mutex
	state     definitionState
	updates   int // UpdateDefinitions calls
	committed int // of which committed
}

type definitionState struct {
	defs      map[DefinitionKind]map[string]Definition
	versions  map[string]int64
	events    []eventstore.Event
	locks     int
	admitted  map[string]int // admitted workloads by ClusterQueue
	workloads map[string]WorkloadRecord
}

func newDefinitions() *definitions {
	return &definitions{state: definitionState{
		defs:     map[DefinitionKind]map[string]Definition{KindClusterQueue: {}, KindCohort: {}, KindLocalQueue: {}},
		versions: map[string]int64{}, admitted: map[string]int{}, workloads: map[string]WorkloadRecord{}}}
}

func (s definitionState) clone() definitionState {
	out := s
	out.defs = map[DefinitionKind]map[string]Definition{}
	for k, m := range s.defs {
		out.defs[k] = maps.Clone(m)
	}
	out.versions = maps.Clone(s.versions)
	out.events = slices.Clone(s.events)
	return out
}

// events returns the committed events' "<aggregate id> v<version> <type>".
func (d *definitions) events() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []string{}
	for _, e := range d.state.events {
		out = append(out, fmt.Sprintf("%s v%d %s", e.AggregateID, e.Version, e.Type))
	}
	return out
}

// put stores a definition directly (test setup; no event).
func (d *definitions) put(def Definition) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state.defs[def.Kind][def.Name] = def
}

func (d *definitions) setAdmitted(clusterQueue string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state.admitted[clusterQueue] = n
}

func (d *definitions) UpdateDefinitions(ctx context.Context, fn func(DefinitionTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.updates++
	// fn runs once on a copy thrown away, as a transaction aborted by
	// concurrent writers would be, and then for real: a use case that
	// changed anything but tx in the first run shows it in the second.
	if err := fn(&definitionsTx{s: d.state.clone()}); err != nil {
		return err
	}
	tx := &definitionsTx{s: d.state.clone()}
	if err := fn(tx); err != nil {
		return err
	}
	d.state = tx.s
	d.committed++
	return nil
}

func (d *definitions) ListDefinitions(_ context.Context, kind DefinitionKind) ([]Definition, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return list(d.state, kind), nil
}

func (d *definitions) GetDefinition(_ context.Context, kind DefinitionKind, name string) (Definition, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	def, ok := d.state.defs[kind][name]
	return def, ok, nil
}

func (d *definitions) Workload(_ context.Context, taskID string) (WorkloadRecord, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.state.workloads[taskID]
	return r, ok, nil
}

func list(s definitionState, kind DefinitionKind) []Definition {
	var out []Definition
	for _, name := range slices.Sorted(maps.Keys(s.defs[kind])) {
		out = append(out, s.defs[kind][name])
	}
	return out
}

type definitionsTx struct{ s definitionState }

func (t *definitionsTx) LockDefinitions() error { t.s.locks++; return nil }

func (t *definitionsTx) LoadDefinitions() (Definitions, error) {
	defs := Definitions{ClusterQueues: map[string]*quotav1.ClusterQueueSpec{}, Cohorts: map[string]*quotav1.CohortSpec{},
		Closing: map[string]string{}}
	for name, d := range t.s.defs[KindClusterQueue] {
		defs.ClusterQueues[name] = proto.CloneOf(d.ClusterQueue)
		if d.Closing != "" {
			defs.Closing[name] = d.Closing
		}
	}
	for name, d := range t.s.defs[KindCohort] {
		defs.Cohorts[name] = proto.CloneOf(d.Cohort)
	}
	return defs, nil
}

func (t *definitionsTx) ListDefinitions(kind DefinitionKind) ([]Definition, error) {
	return list(t.s, kind), nil
}

func (t *definitionsTx) GetDefinition(kind DefinitionKind, name string) (Definition, bool, error) {
	d, ok := t.s.defs[kind][name]
	return d, ok, nil
}

func (t *definitionsTx) AggregateVersion(aggregateID string) (int64, error) {
	return t.s.versions[aggregateID], nil
}

func (t *definitionsTx) AdmittedIn(clusterQueue string) (int, error) {
	return t.s.admitted[clusterQueue], nil
}

func (t *definitionsTx) SaveDefinition(d Definition, deleted bool, _ time.Time, ev eventstore.Event) error {
	if ev.Version != t.s.versions[ev.AggregateID]+1 {
		return eventstore.ErrConflict
	}
	t.s.versions[ev.AggregateID] = ev.Version
	t.s.events = append(t.s.events, ev)
	if deleted {
		delete(t.s.defs[d.Kind], d.Name)
	} else {
		t.s.defs[d.Kind][d.Name] = d
	}
	return nil
}

// errCohortCycle is the fake validator's refusal.
var errCohortCycle = errors.New("cohort cycle")

// validate stands in for the core's checks: a cohort may not be its own
// ancestor. (A cohort a queue or cohort names without defining it exists
// by being named, as in the core.)
func validate(defs Definitions) error {
	for name := range defs.Cohorts {
		for p, steps := defs.Cohorts[name].GetParent(), 0; p != ""; steps++ {
			if p == name || steps > len(defs.Cohorts) {
				return fmt.Errorf("cohort %s: parent %s: %w", name, p, errCohortCycle)
			}
			next := defs.Cohorts[p]
			if next == nil {
				break
			}
			p = next.GetParent()
		}
	}
	return nil
}

// guQuotas is a recording fake of GUQuotas: it answers every check with
// wg, or err when set.
type guQuotas struct {
	calls []string
	wg    WorkGroup
	err   error
}

func (g *guQuotas) CheckGUQuota(_ context.Context, tenantID, quota string) (WorkGroup, error) {
	g.calls = append(g.calls, tenantID+"/"+quota)
	if g.err != nil {
		return WorkGroup{}, g.err
	}
	return g.wg, nil
}

// core is a fake Core for explanations: it explains the workloads in
// explained and fails for any other.
type core struct {
	Core      // the loop's other calls are not used by these tests
	explained map[string]Explanation
}

func (c *core) Explain(id string) (Explanation, error) {
	if e, ok := c.explained[id]; ok {
		return e, nil
	}
	return Explanation{}, fmt.Errorf("workload %s unknown to the core", id)
}

// fixture is the use cases over the fakes; the loop is a standby until a
// test gives it a core.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	store   *definitions
	gu      *guQuotas
	loop    *Loop
	app     *App
	written int // AfterWrite calls
}

var now = time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, ctx: context.Background(), store: newDefinitions(), gu: &guQuotas{}}
	log := slog.New(slog.DiscardHandler)
	clock := func() time.Time { return now }
	f.loop = NewLoop(nil, nil, clock, log, LoopConfig{})
	f.app = New(Options{Store: f.store, Validate: validate, Loop: f.loop, GUQuotas: f.gu,
		TierQueues: map[string]string{"premium": "lq-high", "": "lq-low"}, Now: clock, Logger: log,
		AfterWrite: func() { f.written++ }})
	return f
}

var (
	operator = Caller{Operator: true, Actor: "ops", IP: "192.0.2.7"}
	premium  = Caller{TenantID: "acme", Tier: "premium", Actor: "acme-key"}
	standard = Caller{TenantID: "beta", Tier: "standard", Actor: "beta-key"}
)

func gpuQueue(cohort, gpus string) *quotav1.ClusterQueueSpec {
	return &quotav1.ClusterQueueSpec{Cohort: cohort, ResourceGroups: []*quotav1.ResourceGroup{{CoveredResources: []string{GPUResource},
		Flavors: []*quotav1.FlavorQuotas{{Name: "a100", Resources: []*quotav1.ResourceQuota{{Name: GPUResource, NominalQuota: gpus}}}}}}}
}

func localQueue(name, clusterQueue string, tenants, tiers []string) Definition {
	return Definition{Kind: KindLocalQueue, Name: name,
		LocalQueue: &quotav1.LocalQueueSpec{ClusterQueue: clusterQueue, Tenants: tenants, Tiers: tiers}}
}

func wantStrings(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s\n got %q\nwant %q", what, got, want)
	}
}
