// Package apptest holds hand-written fakes of the ports the quota use
// cases declare — an in-memory Store and a recording cluster Operator —
// and StoreContract, the behaviour every app.Store implementation must
// have. The fake and the Postgres store both run StoreContract, so app
// tests written against the fake hold for the real store too.
package apptest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Store is an in-memory app.Store and app.ProcessStore. Transactions run
// one at a time, so it never has to retry; everything else (versions, the
// reads a transaction sees, unique open quota names, the orders of lists)
// is the Postgres store's. It records every committed event with its
// actor. Safe for concurrent use.
type Store struct {
	// AfterCommit, if set, runs after every Update that recorded events
	// (as the Postgres store's does).
	AfterCommit func([]capacity.Event)

	mu        sync.Mutex
	states    map[string]any // committed, by aggregate id
	committed []Committed
	updates   int
	// created numbers the quotas in the order their QuotaCreated events
	// committed, as the Postgres store's event positions do.
	created map[string]int
}

// Committed is one recorded event and who recorded it.
type Committed struct {
	Actor app.Actor
	Event capacity.Event
}

var (
	_ app.Store        = (*Store)(nil)
	_ app.ProcessStore = (*Store)(nil)
)

// NewStore returns an empty store.
func NewStore() *Store { return &Store{states: map[string]any{}, created: map[string]int{}} }

// Committed returns every committed event, oldest first.
func (s *Store) Committed() []Committed {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.committed)
}

// Events returns the committed events from the n-th on (0: all), oldest
// first: a test notes len(Events(0)) before a step and reads what the
// step recorded with Events(n).
func (s *Store) Events(n int) []capacity.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]capacity.Event, 0, max(0, len(s.committed)-n))
	for _, c := range s.committed[min(n, len(s.committed)):] {
		out = append(out, c.Event)
	}
	return out
}

// Updates counts the Update calls so far, committed or not.
func (s *Store) Updates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updates
}

// Update implements app.Store.
func (s *Store) Update(ctx context.Context, actor app.Actor, fn func(app.Tx) error) ([]capacity.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	recorded, err := s.update(actor, fn)
	if err == nil && len(recorded) > 0 && s.AfterCommit != nil {
		s.AfterCommit(recorded)
	}
	return recorded, err
}

func (s *Store) update(actor app.Actor, fn func(app.Tx) error) ([]capacity.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updates++
	tx := &tx{committed: s.states, created: s.created, states: map[string]any{}, dirty: map[string]bool{}}
	if err := fn(tx); err != nil {
		return nil, err
	}
	if len(tx.recorded) == 0 {
		return nil, nil
	}
	next := make(map[string]any, len(s.states)+len(tx.dirty))
	for agg, st := range s.states {
		next[agg] = st
	}
	for agg := range tx.dirty {
		next[agg] = tx.states[agg]
	}
	if err := uniqueOpenNames(next); err != nil {
		return nil, err
	}
	s.states = next
	for _, e := range tx.recorded {
		s.committed = append(s.committed, Committed{Actor: actor, Event: e})
		if qc, ok := e.Data.(capacity.QuotaCreated); ok {
			s.created[qc.ID] = len(s.created)
		}
	}
	return tx.recorded, nil
}

// uniqueOpenNames is the Postgres store's unique index on the names of a
// tenant's quotas that are not Deleted.
func uniqueOpenNames(states map[string]any) error {
	seen := map[[2]string]bool{}
	for _, st := range states {
		q, ok := st.(capacity.Quota)
		if !ok || q.Status == capacity.QuotaDeletedStatus {
			continue
		}
		key := [2]string{q.TenantID, q.Name}
		if seen[key] {
			return fmt.Errorf("%w: a quota of that name exists", capacity.ErrExists)
		}
		seen[key] = true
	}
	return nil
}

// tx is one Update's view: the committed states, overlaid with those read
// or changed in the transaction.
type tx struct {
	committed map[string]any
	created   map[string]int
	states    map[string]any
	dirty     map[string]bool
	recorded  []capacity.Event
}

func (t *tx) state(aggregate string) (any, error) {
	if st, ok := t.states[aggregate]; ok {
		return st, nil
	}
	st, ok := t.committed[aggregate]
	if !ok {
		var err error
		if st, err = capacity.ZeroState(aggregate); err != nil {
			return nil, err
		}
	}
	t.states[aggregate] = st
	return st, nil
}

func typed[T any](t *tx, aggregate string) (T, error) {
	st, err := t.state(aggregate)
	if err != nil {
		var zero T
		return zero, err
	}
	return st.(T), nil
}

func (t *tx) Tenant(id string) (capacity.Tenant, error) {
	return typed[capacity.Tenant](t, capacity.TenantAggregate(id))
}

func (t *tx) Cluster(name string) (capacity.Cluster, error) {
	return typed[capacity.Cluster](t, capacity.ClusterAggregate(name))
}

func (t *tx) Quota(id string) (capacity.Quota, error) {
	return typed[capacity.Quota](t, capacity.QuotaAggregate(id))
}

func (t *tx) Ray(tenant, cluster string) (capacity.RayCluster, error) {
	return typed[capacity.RayCluster](t, capacity.RayAggregate(tenant, cluster))
}

func (t *tx) WorkGroup(quotaID string) (capacity.WorkGroup, error) {
	return typed[capacity.WorkGroup](t, capacity.WorkGroupAggregate(quotaID))
}

// quotas selects among the committed quotas, like the Postgres store's
// queries, and returns each one's state in the transaction.
func (t *tx) quotas(match func(capacity.Quota) bool) ([]capacity.Quota, error) {
	var ids []capacity.Quota
	for _, st := range t.committed {
		if q, ok := st.(capacity.Quota); ok && match(q) {
			ids = append(ids, q)
		}
	}
	slices.SortFunc(ids, func(a, b capacity.Quota) int {
		return cmp.Or(cmp.Compare(a.Level, b.Level), cmp.Compare(t.created[a.ID], t.created[b.ID]), cmp.Compare(a.ID, b.ID))
	})
	out := make([]capacity.Quota, 0, len(ids))
	for _, q := range ids {
		cur, err := t.Quota(q.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, cur)
	}
	return out, nil
}

func (t *tx) Children(parentID string) ([]capacity.Quota, error) {
	return t.quotas(func(q capacity.Quota) bool { return q.ParentID == parentID })
}

func (t *tx) TenantQuotas(tenantID string) ([]capacity.Quota, error) {
	return t.quotas(func(q capacity.Quota) bool {
		return q.TenantID == tenantID && q.Status != capacity.QuotaDeletedStatus
	})
}

func (t *tx) Subtree(q capacity.Quota) ([]capacity.Quota, error) {
	var out []capacity.Quota
	frontier := map[string]bool{q.ID: true}
	for len(frontier) > 0 {
		level, err := t.quotas(func(x capacity.Quota) bool { return frontier[x.ParentID] })
		if err != nil {
			return nil, err
		}
		frontier = map[string]bool{}
		for _, c := range level {
			out = append(out, c)
			frontier[c.ID] = true
		}
	}
	return out, nil
}

func (t *tx) Record(events ...capacity.Event) error {
	for _, e := range events {
		cur, err := t.state(e.Aggregate)
		if err != nil {
			return err
		}
		e.Version = capacity.StateVersion(cur) + 1
		t.states[e.Aggregate] = capacity.Fold(cur, e)
		t.dirty[e.Aggregate] = true
		t.recorded = append(t.recorded, e)
	}
	return nil
}

// Reads of committed state.

// committedOf returns the committed states of type T that match, sorted.
func committedOf[T any](s *Store, match func(T) bool, compare func(a, b T) int) []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []T{}
	for _, st := range s.states {
		if x, ok := st.(T); ok && match(x) {
			out = append(out, x)
		}
	}
	slices.SortFunc(out, compare)
	return out
}

func committedOne[T any](s *Store, aggregate, what, id string) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.states[aggregate].(T); ok {
		return st, nil
	}
	var zero T
	return zero, capacity.NotFound(what, id)
}

func all[T any](T) bool { return true }

// Tenant implements app.Queries.
func (s *Store) Tenant(_ context.Context, id string) (capacity.Tenant, error) {
	return committedOne[capacity.Tenant](s, capacity.TenantAggregate(id), "tenant", id)
}

// Tenants implements app.Queries.
func (s *Store) Tenants(context.Context) ([]capacity.Tenant, error) {
	return committedOf(s, all, func(a, b capacity.Tenant) int { return cmp.Compare(a.ID, b.ID) }), nil
}

// Cluster implements app.Queries.
func (s *Store) Cluster(_ context.Context, name string) (capacity.Cluster, error) {
	return committedOne[capacity.Cluster](s, capacity.ClusterAggregate(name), "cluster", name)
}

// Clusters implements app.Queries.
func (s *Store) Clusters(context.Context) ([]capacity.Cluster, error) {
	return committedOf(s, all, func(a, b capacity.Cluster) int { return cmp.Compare(a.Name, b.Name) }), nil
}

// Quota implements app.Queries.
func (s *Store) Quota(_ context.Context, id string) (capacity.Quota, error) {
	return committedOne[capacity.Quota](s, capacity.QuotaAggregate(id), "quota", id)
}

// Quotas implements app.Queries.
func (s *Store) Quotas(_ context.Context, f app.QuotaFilter) ([]capacity.Quota, error) {
	eq := func(want, got string) bool { return want == "" || want == got }
	out := committedOf(s, func(q capacity.Quota) bool {
		return q.ID > f.After && eq(f.TenantID, q.TenantID) && eq(f.Cluster, q.Cluster) && eq(f.Kind, string(q.Kind)) &&
			eq(f.Status, q.Status) && eq(f.RootID, q.RootID) && (!f.RootsOnly || q.Level == 1)
	}, func(a, b capacity.Quota) int {
		if f.CreationOrder {
			return cmp.Or(cmp.Compare(s.created[a.ID], s.created[b.ID]), cmp.Compare(a.ID, b.ID))
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// WorkGroup implements app.Queries.
func (s *Store) WorkGroup(_ context.Context, quotaID string) (capacity.WorkGroup, error) {
	return committedOne[capacity.WorkGroup](s, capacity.WorkGroupAggregate(quotaID), "WorkGroup of quota", quotaID)
}

// WorkGroups implements app.Queries.
func (s *Store) WorkGroups(_ context.Context, tenant, status string) ([]capacity.WorkGroup, error) {
	return committedOf(s, func(w capacity.WorkGroup) bool {
		return (tenant == "" || w.TenantID == tenant) && (status == "" || w.Status == status)
	}, byQuotaID), nil
}

func byQuotaID(a, b capacity.WorkGroup) int { return cmp.Compare(a.QuotaID, b.QuotaID) }

// Ray implements app.Queries.
func (s *Store) Ray(_ context.Context, tenant, cluster string) (capacity.RayCluster, error) {
	return committedOne[capacity.RayCluster](s, capacity.RayAggregate(tenant, cluster), "Ray cluster of", tenant+"/"+cluster)
}

// Pending implements app.ProcessStore.
func (s *Store) Pending(context.Context) (app.Pending, error) {
	in := func(status string, set ...string) bool { return slices.Contains(set, status) }
	return app.Pending{
		Rays: committedOf(s, func(r capacity.RayCluster) bool { return r.Status == capacity.StatusCreating },
			func(a, b capacity.RayCluster) int {
				return cmp.Or(cmp.Compare(a.TenantID, b.TenantID), cmp.Compare(a.Cluster, b.Cluster))
			}),
		WorkGroups: committedOf(s, func(w capacity.WorkGroup) bool {
			return in(w.Status, capacity.StatusCreating, capacity.StatusDeleting)
		}, byQuotaID),
		Quotas: committedOf(s, func(q capacity.Quota) bool {
			return in(q.Status, capacity.QuotaProvisioning, capacity.QuotaFailed, capacity.QuotaUnsubscribing)
		}, func(a, b capacity.Quota) int { return cmp.Or(cmp.Compare(b.Level, a.Level), cmp.Compare(a.ID, b.ID)) }),
	}, nil
}
