package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
)

// tables by definition kind; never user input.
var tables = map[app.DefinitionKind]string{
	app.KindClusterQueue: "cluster_queues",
	app.KindCohort:       "cohorts",
	app.KindLocalQueue:   "local_queues",
}

// loadDefinitions reads the whole topology: ClusterQueues and cohorts.
func loadDefinitions(ctx context.Context, tx pgx.Tx) (app.Definitions, error) {
	defs := app.Definitions{ClusterQueues: map[string]*quotav1.ClusterQueueSpec{}, Cohorts: map[string]*quotav1.CohortSpec{},
		Closing: map[string]string{}}
	cqs, err := listDefinitions(ctx, tx, app.KindClusterQueue)
	if err != nil {
		return defs, err
	}
	for _, d := range cqs {
		defs.ClusterQueues[d.Name] = d.ClusterQueue
		if d.Closing != "" {
			defs.Closing[d.Name] = d.Closing
		}
	}
	chs, err := listDefinitions(ctx, tx, app.KindCohort)
	if err != nil {
		return defs, err
	}
	for _, d := range chs {
		defs.Cohorts[d.Name] = d.Cohort
	}
	return defs, nil
}

// ListDefinitions implements app.DefinitionStore.
func (s Store) ListDefinitions(ctx context.Context, kind app.DefinitionKind) ([]app.Definition, error) {
	return listDefinitions(ctx, s.DB, kind)
}

// GetDefinition implements app.DefinitionStore.
func (s Store) GetDefinition(ctx context.Context, kind app.DefinitionKind, name string) (app.Definition, bool, error) {
	return getDefinition(ctx, s.DB, kind, name)
}

// UpdateDefinitions implements app.DefinitionStore. A transaction that
// Postgres aborted only because of concurrent ones runs fn again in a new
// one (pg.InTxRetried).
func (s Store) UpdateDefinitions(ctx context.Context, fn func(app.DefinitionTx) error) error {
	return pg.InTxRetried(ctx, s.DB, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return fn(definitionTx{ctx: ctx, tx: tx, events: s.Events})
	})
}

// definitionTx implements app.DefinitionTx in one transaction.
type definitionTx struct {
	ctx    context.Context
	tx     pgx.Tx
	events *eventstore.Store
}

var _ app.DefinitionTx = definitionTx{}

func (t definitionTx) LoadDefinitions() (app.Definitions, error) {
	return loadDefinitions(t.ctx, t.tx)
}

func (t definitionTx) ListDefinitions(kind app.DefinitionKind) ([]app.Definition, error) {
	return listDefinitions(t.ctx, t.tx, kind)
}

func (t definitionTx) GetDefinition(kind app.DefinitionKind, name string) (app.Definition, bool, error) {
	return getDefinition(t.ctx, t.tx, kind, name)
}

// queueColumns reads a ClusterQueue's closing reason and tenant; the
// other tables have neither.
func queueColumns(kind app.DefinitionKind) string {
	if kind == app.KindClusterQueue {
		return "closing, tenant_id"
	}
	return "'', ''"
}

// listDefinitions returns every definition of kind by name.
func listDefinitions(ctx context.Context, q eventstore.Querier, kind app.DefinitionKind) ([]app.Definition, error) {
	rows, err := q.Query(ctx, `SELECT name, spec, origin, `+queueColumns(kind)+` FROM `+tables[kind]+` ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", tables[kind], err)
	}
	defer rows.Close()
	var out []app.Definition
	for rows.Next() {
		var d app.Definition
		var spec []byte
		if err := rows.Scan(&d.Name, &spec, &d.Origin, &d.Closing, &d.TenantID); err != nil {
			return nil, fmt.Errorf("list %s: %w", tables[kind], err)
		}
		d.Kind = kind
		if err := decodeSpec(&d, spec); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// getDefinition reads one definition; ok is false when there is none.
func getDefinition(ctx context.Context, q eventstore.Querier, kind app.DefinitionKind, name string) (app.Definition, bool, error) {
	rows, err := q.Query(ctx, `SELECT spec, origin, `+queueColumns(kind)+` FROM `+tables[kind]+` WHERE name = $1`, name)
	if err != nil {
		return app.Definition{}, false, fmt.Errorf("read %s: %w", tables[kind], err)
	}
	defer rows.Close()
	if !rows.Next() {
		return app.Definition{}, false, rows.Err()
	}
	d := app.Definition{Kind: kind, Name: name}
	var spec []byte
	if err := rows.Scan(&spec, &d.Origin, &d.Closing, &d.TenantID); err != nil {
		return d, false, fmt.Errorf("read %s: %w", tables[kind], err)
	}
	return d, true, decodeSpec(&d, spec)
}

func decodeSpec(d *app.Definition, spec []byte) error {
	var m proto.Message
	switch d.Kind {
	case app.KindClusterQueue:
		d.ClusterQueue = &quotav1.ClusterQueueSpec{}
		m = d.ClusterQueue
	case app.KindCohort:
		d.Cohort = &quotav1.CohortSpec{}
		m = d.Cohort
	case app.KindLocalQueue:
		d.LocalQueue = &quotav1.LocalQueueSpec{}
		m = d.LocalQueue
	}
	if err := proto.Unmarshal(spec, m); err != nil {
		return fmt.Errorf("decode %s %s: %w", d.Kind, d.Name, err)
	}
	return nil
}

// LockDefinitions bumps the definitions generation, holding its row lock
// until the transaction ends: the admission loop waits for the change
// and sees it in its next cycle.
//
// Writers first take turns on an advisory lock, which gives a transaction
// no id. The UPDATE alone would: Postgres gives the transaction its id
// before it waits for the row, so a writer that waited would append its
// events after a newer transaction's, and the event store refuses that
// (docs/decisions/0122-a-command-locks-its-aggregate-before-it-writes.md).
func (t definitionTx) LockDefinitions() error {
	if _, err := t.tx.Exec(t.ctx, `SELECT pg_advisory_xact_lock(hashtextextended('quota.definitions', 0))`); err != nil {
		return fmt.Errorf("lock definitions: %w", err)
	}
	if _, err := t.tx.Exec(t.ctx, `UPDATE definitions_generation SET generation = generation + 1 WHERE id = 1`); err != nil {
		return fmt.Errorf("lock definitions: %w", err)
	}
	return nil
}

// SaveDefinition records d's event and upserts (or, with deleted, removes)
// its row.
func (t definitionTx) SaveDefinition(d app.Definition, deleted bool, at time.Time, ev eventstore.Event) error {
	ctx, tx := t.ctx, t.tx
	if err := t.events.Append(ctx, tx, ev); err != nil {
		return err
	}
	if deleted {
		_, err := tx.Exec(ctx, `DELETE FROM `+tables[d.Kind]+` WHERE name = $1`, d.Name)
		if err != nil {
			return fmt.Errorf("delete %s: %w", tables[d.Kind], err)
		}
		return nil
	}
	var m proto.Message
	switch d.Kind {
	case app.KindClusterQueue:
		m = d.ClusterQueue
	case app.KindCohort:
		m = d.Cohort
	case app.KindLocalQueue:
		m = d.LocalQueue
	}
	spec, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", d.Kind, err)
	}
	if d.Kind == app.KindClusterQueue {
		_, err = tx.Exec(ctx, `INSERT INTO cluster_queues (name, spec, origin, closing, tenant_id, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, origin = EXCLUDED.origin, closing = EXCLUDED.closing,
				tenant_id = EXCLUDED.tenant_id, updated_at = EXCLUDED.updated_at`,
			d.Name, spec, d.Origin, d.Closing, d.TenantID, at)
	} else {
		_, err = tx.Exec(ctx, `INSERT INTO `+tables[d.Kind]+` (name, spec, origin, updated_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, origin = EXCLUDED.origin, updated_at = EXCLUDED.updated_at`,
			d.Name, spec, d.Origin, at)
	}
	if err != nil {
		return fmt.Errorf("save %s: %w", tables[d.Kind], err)
	}
	return nil
}

// AggregateVersion is the last version of an aggregate (0: none yet).
func (t definitionTx) AggregateVersion(aggregateID string) (int64, error) {
	var v int64
	if err := t.tx.QueryRow(t.ctx, `SELECT coalesce(max(version), 0) FROM events WHERE aggregate_id = $1`, aggregateID).Scan(&v); err != nil {
		return 0, fmt.Errorf("read version of %s: %w", aggregateID, err)
	}
	return v, nil
}

// AdmittedIn counts the workloads holding quota in a ClusterQueue.
func (t definitionTx) AdmittedIn(clusterQueue string) (int, error) {
	var n int
	if err := t.tx.QueryRow(t.ctx, `SELECT count(*) FROM workloads WHERE cluster_queue = $1 AND state IN ('admitted', 'evicting')`,
		clusterQueue).Scan(&n); err != nil {
		return 0, fmt.Errorf("count admitted workloads: %w", err)
	}
	return n, nil
}
