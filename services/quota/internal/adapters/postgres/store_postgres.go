// Package postgres keeps the quota service's events and its inline
// projection (tenants, clusters, quotas, ray_clusters, work_groups) in
// Postgres. A command runs in one transaction: it reads the states it
// decides from, records events, and the events and the states they produce
// commit together. Versions make it optimistic: when another writer
// recorded an event of the same aggregate first, the transaction is
// retried from the start with fresh states.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/quota/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Store runs commands and reads on the quota schema.
type Store struct {
	DB *pgxpool.Pool
	// AfterCommit runs after every transaction that recorded events (the
	// outbox relay's Notify, the process manager's wake-up).
	AfterCommit func(events []capacity.Event)
	events      eventstore.Store
}

var (
	_ app.Store        = (*Store)(nil)
	_ app.ProcessStore = (*Store)(nil)
	_ app.Tx           = (*Tx)(nil)
)

// NewStore returns a Store on db.
func NewStore(db *pgxpool.Pool, afterCommit func([]capacity.Event)) *Store {
	return &Store{DB: db, AfterCommit: afterCommit}
}

// maxAttempts bounds the retries of a command that lost a version race or
// whose transaction Postgres aborted only because of concurrent ones (a
// deadlock, or an event refused because a newer transaction wrote its
// predecessor: platform/eventstore's Append).
const maxAttempts = 8

// Update implements app.Store: fn runs in a transaction, and again (with
// fresh states, in a new transaction) when another writer got in first. The recorded events are
// returned with their versions.
func (s *Store) Update(ctx context.Context, by app.Actor, fn func(app.Tx) error) ([]capacity.Event, error) {
	for attempt := 1; ; attempt++ {
		var recorded []capacity.Event
		err := pg.InTx(ctx, s.DB, pgx.TxOptions{}, func(ptx pgx.Tx) error {
			tx := &Tx{ctx: ctx, tx: ptx, states: map[string]any{}}
			if err := fn(tx); err != nil {
				return err
			}
			if err := tx.flush(&s.events, by); err != nil {
				return err
			}
			recorded = tx.recorded
			return nil
		})
		switch {
		case err == nil:
			if len(recorded) > 0 && s.AfterCommit != nil {
				s.AfterCommit(recorded)
			}
			return recorded, nil
		case (errors.Is(err, eventstore.ErrConflict) || pg.IsSerializationFailure(err)) && attempt < maxAttempts:
			continue
		case pg.IsUniqueViolation(err, "quotas_open_name_idx"):
			return nil, fmt.Errorf("%w: a quota of that name exists", capacity.ErrExists)
		}
		return nil, err
	}
}

// Tx is one command's view: states read in the transaction, and the events
// recorded so far (applied to those states at once).
type Tx struct {
	ctx      context.Context
	tx       pgx.Tx
	states   map[string]any // by aggregate id
	order    []string       // dirty aggregates, in first-record order
	dirty    map[string]bool
	recorded []capacity.Event
}

// Record assigns versions to events, applies them to the states, and queues
// them for commit.
func (t *Tx) Record(events ...capacity.Event) error {
	for _, e := range events {
		cur, err := t.state(e.Aggregate)
		if err != nil {
			return err
		}
		e.Version = capacity.StateVersion(cur) + 1
		next := capacity.Fold(cur, e)
		t.states[e.Aggregate] = next
		if t.dirty == nil {
			t.dirty = map[string]bool{}
		}
		if !t.dirty[e.Aggregate] {
			t.dirty[e.Aggregate] = true
			t.order = append(t.order, e.Aggregate)
		}
		t.recorded = append(t.recorded, e)
	}
	return nil
}

// state returns the aggregate's state in this transaction (zero when new).
func (t *Tx) state(aggregate string) (any, error) {
	if s, ok := t.states[aggregate]; ok {
		return s, nil
	}
	s, err := capacity.ZeroState(aggregate)
	if err != nil {
		return nil, err
	}
	table, key := locate(aggregate)
	var doc []byte
	err = t.tx.QueryRow(t.ctx, `SELECT doc FROM `+table+` WHERE `+key.where, key.args...).Scan(&doc)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("load %s: %w", aggregate, err)
	default:
		if s, err = decode(s, doc); err != nil {
			return nil, fmt.Errorf("load %s: %w", aggregate, err)
		}
	}
	t.states[aggregate] = s
	return s, nil
}

type rowKey struct {
	where string
	args  []any
}

// locate names the table and row of an aggregate id.
func locate(aggregate string) (string, rowKey) {
	typ, id, _ := strings.Cut(aggregate, "/")
	switch typ {
	case "tenant":
		return "tenants", rowKey{"id = $1", []any{id}}
	case "cluster":
		return "clusters", rowKey{"name = $1", []any{id}}
	case "quota":
		return "quotas", rowKey{"id = $1", []any{id}}
	case "ray":
		tenant, cluster, _ := strings.Cut(id, "/")
		return "ray_clusters", rowKey{"tenant_id = $1 AND cluster = $2", []any{tenant, cluster}}
	}
	return "work_groups", rowKey{"quota_id = $1", []any{id}}
}

func decode(into any, doc []byte) (any, error) {
	switch into.(type) {
	case capacity.Tenant:
		var v capacity.Tenant
		err := json.Unmarshal(doc, &v)
		return v, err
	case capacity.Cluster:
		var v capacity.Cluster
		err := json.Unmarshal(doc, &v)
		return v, err
	case capacity.Quota:
		var v capacity.Quota
		err := json.Unmarshal(doc, &v)
		return v, err
	case capacity.RayCluster:
		var v capacity.RayCluster
		err := json.Unmarshal(doc, &v)
		return v, err
	case capacity.WorkGroup:
		var v capacity.WorkGroup
		err := json.Unmarshal(doc, &v)
		return v, err
	}
	return nil, fmt.Errorf("unknown state %T", into)
}

// flush appends the recorded events and upserts the states they changed.
func (t *Tx) flush(store *eventstore.Store, by app.Actor) error {
	if len(t.recorded) == 0 {
		return nil
	}
	events := make([]eventstore.Event, 0, len(t.recorded))
	for _, e := range t.recorded {
		id := uuid.NewString()
		payload, typ, err := codec.Marshal(id, by.ID, by.IP, e, nil)
		if err != nil {
			return err
		}
		events = append(events, eventstore.Event{AggregateType: codec.AggregateType(e.Aggregate), AggregateID: e.Aggregate,
			Version: e.Version, Type: typ, EventID: id, TenantID: e.TenantID, OccurredAt: e.At, Payload: payload})
	}
	// Events of one aggregate must be consecutive for the store: group them,
	// keeping each aggregate's order.
	grouped := make([]eventstore.Event, 0, len(events))
	for _, agg := range t.order {
		for _, e := range events {
			if e.AggregateID == agg {
				grouped = append(grouped, e)
			}
		}
	}
	if err := store.Append(t.ctx, t.tx, grouped...); err != nil {
		return err
	}
	for _, agg := range t.order {
		if err := upsert(t.ctx, t.tx, t.states[agg]); err != nil {
			return fmt.Errorf("store %s: %w", agg, err)
		}
	}
	return nil
}

// upsert writes one state's row.
func upsert(ctx context.Context, tx pgx.Tx, s any) error {
	doc, err := json.Marshal(s)
	if err != nil {
		return err
	}
	switch x := s.(type) {
	case capacity.Tenant:
		_, err = tx.Exec(ctx, `INSERT INTO tenants (id, version, doc) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, doc = EXCLUDED.doc`, x.ID, x.Version, doc)
	case capacity.Cluster:
		_, err = tx.Exec(ctx, `INSERT INTO clusters (name, version, doc) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, doc = EXCLUDED.doc`, x.Name, x.Version, doc)
	case capacity.Quota:
		_, err = tx.Exec(ctx, `INSERT INTO quotas (id, tenant_id, name, kind, cluster, level, parent_id, root_id, status, version, doc)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, version = EXCLUDED.version, doc = EXCLUDED.doc`,
			x.ID, x.TenantID, x.Name, string(x.Kind), x.Cluster, x.Level, x.ParentID, x.RootID, x.Status, x.Version, doc)
	case capacity.RayCluster:
		_, err = tx.Exec(ctx, `INSERT INTO ray_clusters (tenant_id, cluster, status, version, doc) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (tenant_id, cluster) DO UPDATE SET status = EXCLUDED.status, version = EXCLUDED.version, doc = EXCLUDED.doc`,
			x.TenantID, x.Cluster, x.Status, x.Version, doc)
	case capacity.WorkGroup:
		_, err = tx.Exec(ctx, `INSERT INTO work_groups (quota_id, tenant_id, status, version, doc) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (quota_id) DO UPDATE SET status = EXCLUDED.status, version = EXCLUDED.version, doc = EXCLUDED.doc`,
			x.QuotaID, x.TenantID, x.Status, x.Version, doc)
	default:
		return fmt.Errorf("unknown state %T", s)
	}
	return err
}

// Typed reads inside a command.

// Tenant returns the tenant (zero when unknown).
func (t *Tx) Tenant(id string) (capacity.Tenant, error) {
	s, err := t.state(capacity.TenantAggregate(id))
	if err != nil {
		return capacity.Tenant{}, err
	}
	return s.(capacity.Tenant), nil
}

// Cluster returns the cluster (zero when unknown).
func (t *Tx) Cluster(name string) (capacity.Cluster, error) {
	s, err := t.state(capacity.ClusterAggregate(name))
	if err != nil {
		return capacity.Cluster{}, err
	}
	return s.(capacity.Cluster), nil
}

// Quota returns the quota (zero when unknown).
func (t *Tx) Quota(id string) (capacity.Quota, error) {
	s, err := t.state(capacity.QuotaAggregate(id))
	if err != nil {
		return capacity.Quota{}, err
	}
	return s.(capacity.Quota), nil
}

// Ray returns the Ray cluster of ⟨tenant, cluster⟩ (zero when none).
func (t *Tx) Ray(tenant, cluster string) (capacity.RayCluster, error) {
	s, err := t.state(capacity.RayAggregate(tenant, cluster))
	if err != nil {
		return capacity.RayCluster{}, err
	}
	return s.(capacity.RayCluster), nil
}

// WorkGroup returns the WorkGroup of a quota (zero when none).
func (t *Tx) WorkGroup(quotaID string) (capacity.WorkGroup, error) {
	s, err := t.state(capacity.WorkGroupAggregate(quotaID))
	if err != nil {
		return capacity.WorkGroup{}, err
	}
	return s.(capacity.WorkGroup), nil
}

// Children implements app.Tx.
func (t *Tx) Children(parentID string) ([]capacity.Quota, error) {
	return t.quotas(`parent_id = $1`, parentID)
}

// TenantQuotas implements app.Tx.
func (t *Tx) TenantQuotas(tenantID string) ([]capacity.Quota, error) {
	return t.quotas(`tenant_id = $1 AND status <> 'Deleted'`, tenantID)
}

// quotas returns the quotas matching where (a condition on the quotas
// table, never user input): the rows select them, the states come from
// this transaction (and stay cached for later reads).
func (t *Tx) quotas(where string, args ...any) ([]capacity.Quota, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT id FROM quotas WHERE `+where+` ORDER BY level, `+creationOrder+`, id`, args...)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make([]capacity.Quota, 0, len(ids))
	for _, id := range ids {
		q, err := t.Quota(id)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// Subtree implements app.Tx: one query per level.
func (t *Tx) Subtree(q capacity.Quota) ([]capacity.Quota, error) {
	var out []capacity.Quota
	frontier := []string{q.ID}
	for len(frontier) > 0 {
		children, err := t.quotas(`parent_id = ANY($1)`, frontier)
		if err != nil {
			return nil, err
		}
		frontier = frontier[:0]
		for _, c := range children {
			out = append(out, c)
			frontier = append(frontier, c.ID)
		}
	}
	return out, nil
}
