package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Reads outside commands: straight from the inline projection, so they
// reflect every committed write.

// readDoc decodes the doc column of the one row sql selects; no row is
// capacity.ErrNotFound naming what and id.
func readDoc[T any](ctx context.Context, s *Store, what, id, sql string, args ...any) (T, error) {
	var (
		v   T
		doc []byte
	)
	err := s.DB.QueryRow(ctx, sql, args...).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return v, capacity.NotFound(what, id)
	}
	if err != nil {
		return v, fmt.Errorf("read %s %s: %w", what, id, err)
	}
	return v, json.Unmarshal(doc, &v)
}

// readDocs decodes the doc column of every row sql selects, in its order.
func readDocs[T any](ctx context.Context, s *Store, sql string, args ...any) ([]T, error) {
	rows, err := s.DB.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(docs))
	for _, d := range docs {
		var v T
		if err := json.Unmarshal(d, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Tenant returns a tenant.
func (s *Store) Tenant(ctx context.Context, id string) (capacity.Tenant, error) {
	return readDoc[capacity.Tenant](ctx, s, "tenant", id, `SELECT doc FROM tenants WHERE id = $1`, id)
}

// Tenants lists every tenant by id.
func (s *Store) Tenants(ctx context.Context) ([]capacity.Tenant, error) {
	return readDocs[capacity.Tenant](ctx, s, `SELECT doc FROM tenants ORDER BY id`)
}

// Cluster returns a cluster.
func (s *Store) Cluster(ctx context.Context, name string) (capacity.Cluster, error) {
	return readDoc[capacity.Cluster](ctx, s, "cluster", name, `SELECT doc FROM clusters WHERE name = $1`, name)
}

// Clusters lists every cluster by name.
func (s *Store) Clusters(ctx context.Context) ([]capacity.Cluster, error) {
	return readDocs[capacity.Cluster](ctx, s, `SELECT doc FROM clusters ORDER BY name`)
}

// Quota returns a quota (deleted ones too).
func (s *Store) Quota(ctx context.Context, id string) (capacity.Quota, error) {
	return readDoc[capacity.Quota](ctx, s, "quota", id, `SELECT doc FROM quotas WHERE id = $1`, id)
}

// creationOrder orders rows of quotas as they were created: by the
// position in the event store of each one's first event (QuotaCreated),
// appended in the order the production recorded them.
var creationOrder = `(SELECT e.id FROM events e WHERE e.aggregate_id = '` + capacity.QuotaAggregate("") + `' || quotas.id AND e.version = 1)`

// Quotas lists quotas by id, or in creation order.
func (s *Store) Quotas(ctx context.Context, f app.QuotaFilter) ([]capacity.Quota, error) {
	sql := `SELECT doc FROM quotas WHERE id > $1`
	args := []any{f.After}
	add := func(cond string, v any) {
		args = append(args, v)
		sql += " AND " + cond + " = $" + strconv.Itoa(len(args))
	}
	if f.TenantID != "" {
		add("tenant_id", f.TenantID)
	}
	if f.Cluster != "" {
		add("cluster", f.Cluster)
	}
	if f.Kind != "" {
		add("kind", f.Kind)
	}
	if f.Status != "" {
		add("status", f.Status)
	}
	if f.RootID != "" {
		add("root_id", f.RootID)
	}
	if f.RootsOnly {
		sql += " AND level = 1"
	}
	if f.CreationOrder {
		sql += " ORDER BY " + creationOrder + ", id"
	} else {
		sql += " ORDER BY id"
	}
	if f.Limit > 0 {
		sql += " LIMIT " + strconv.Itoa(f.Limit)
	}
	return readDocs[capacity.Quota](ctx, s, sql, args...)
}

// WorkGroup returns the WorkGroup of a quota.
func (s *Store) WorkGroup(ctx context.Context, quotaID string) (capacity.WorkGroup, error) {
	return readDoc[capacity.WorkGroup](ctx, s, "WorkGroup of quota", quotaID, `SELECT doc FROM work_groups WHERE quota_id = $1`, quotaID)
}

// WorkGroups lists WorkGroups by quota id; empty filters match everything.
func (s *Store) WorkGroups(ctx context.Context, tenant, status string) ([]capacity.WorkGroup, error) {
	return readDocs[capacity.WorkGroup](ctx, s, `SELECT doc FROM work_groups
		WHERE ($1 = '' OR tenant_id = $1) AND ($2 = '' OR status = $2) ORDER BY quota_id`, tenant, status)
}

// Ray returns the Ray cluster of ⟨tenant, cluster⟩.
func (s *Store) Ray(ctx context.Context, tenant, cluster string) (capacity.RayCluster, error) {
	return readDoc[capacity.RayCluster](ctx, s, "Ray cluster of", tenant+"/"+cluster,
		`SELECT doc FROM ray_clusters WHERE tenant_id = $1 AND cluster = $2`, tenant, cluster)
}

// Pending reads the Ray clusters being created, WorkGroups being created or
// deleted, and quotas producing, failed or being unsubscribed.
func (s *Store) Pending(ctx context.Context) (app.Pending, error) {
	var (
		p   app.Pending
		err error
	)
	if p.Rays, err = readDocs[capacity.RayCluster](ctx, s, `SELECT doc FROM ray_clusters WHERE status = 'Creating' ORDER BY tenant_id, cluster`); err != nil {
		return p, err
	}
	if p.WorkGroups, err = readDocs[capacity.WorkGroup](ctx, s, `SELECT doc FROM work_groups WHERE status IN ('Creating', 'Deleting') ORDER BY quota_id`); err != nil {
		return p, err
	}
	p.Quotas, err = readDocs[capacity.Quota](ctx, s, `SELECT doc FROM quotas WHERE status IN ('Provisioning', 'Failed', 'Unsubscribing') ORDER BY level DESC, id`)
	return p, err
}
