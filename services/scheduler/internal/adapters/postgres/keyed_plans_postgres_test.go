package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// keyedWrites are the statements a task write sends on keyed plans
// (pg.QueueKeyedPlans), by the start of their text: the batches' lock,
// the event append, the inserts and updates of tasks rows, and the
// dependency statements of a task written waiting and of one completed.
var keyedWrites = []string{
	"SELECT doc FROM tasks WHERE id = ANY",
	"INSERT INTO events",
	"INSERT INTO tasks",
	"UPDATE tasks t SET status",
	"SELECT 1 FROM tasks WHERE id = ANY",
	"UPDATE tasks t SET awaiting_dependencies = false WHERE t.id = ANY",
	"SELECT 1 FROM tasks t WHERE t.awaiting_dependencies",
	"UPDATE tasks t SET awaiting_dependencies = false WHERE t.awaiting_dependencies",
}

// The task writes run on generic plans, planned once per connection, and
// those plans read indexes, never the tasks or events tables whole:
// planned on an empty table, and again once the table holds a history and
// was analyzed (which makes Postgres plan them afresh).
func TestTaskWritesRunOnKeyedPlans(t *testing.T) {
	w := newDepsWorld(t)
	round := func(n int) {
		t.Helper()
		// A task with a dependency is written waiting; completing the
		// dependency releases it. Creations and claims write in the
		// group-committed transactions, starts and completions in the
		// batches.
		parent, child := fmt.Sprint("p-", n), fmt.Sprint("c-", n)
		w.create(parent)
		w.create(child, parent)
		// The previous round's child is claimable too.
		if ids := w.run(); !slices.Contains(ids, parent) || slices.Contains(ids, child) {
			t.Fatalf("round %d: ran %v, want %s and not %s", n, ids, parent, child)
		}
		if _, err := w.store.Mutate(w.ctx, parent, func(t domain.Task) ([]domain.Record, error) {
			return w.complete(t, true)
		}); err != nil {
			t.Fatal(err)
		}
		if w.awaiting(child) {
			t.Fatalf("round %d: %s still waits for its completed dependency", n, child)
		}
	}
	round(0)
	checkKeyedPlans(t, w.ctx, w.pool, "planned on the empty table")

	const cols = `tenant_id, status, priority, type, machine_id, target_ip, labels, depends_on, fanout_id, scatter,
		retry_at, created_at, updated_at, version, deleted, awaiting_admission, awaiting_dependencies, doc`
	if _, err := w.pool.Exec(w.ctx, `INSERT INTO tasks (id, `+cols+`)
		SELECT 'h-' || g || '-' || t.id, t.tenant_id, 'completed', t.priority, t.type, t.machine_id, t.target_ip,
		       t.labels, '{}', t.fanout_id, t.scatter, t.retry_at, t.created_at, t.updated_at, t.version, t.deleted,
		       false, false, t.doc
		FROM tasks t, generate_series(1, 20000) g WHERE t.id = 'p-0'`); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(w.ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	round(1)
	checkKeyedPlans(t, w.ctx, w.pool, "on 20,000 tasks after ANALYZE")
}

// checkKeyedPlans reads every connection's prepared statements (pgx's
// statement cache): each keyed write must have run, only on generic
// plans, and its generic plan, explained as the writes run it, must scan
// no table sequentially.
func checkKeyedPlans(t *testing.T, ctx context.Context, pool *pgxpool.Pool, when string) {
	t.Helper()
	seen := map[string]bool{}
	for _, conn := range pool.AcquireAllIdle(ctx) {
		func() {
			defer conn.Release()
			rows, err := conn.Query(ctx, `SELECT name, regexp_replace(statement, '\s+', ' ', 'g'), generic_plans, custom_plans,
				cardinality(parameter_types) FROM pg_prepared_statements`)
			if err != nil {
				t.Fatal(err)
			}
			type prepared struct {
				name, text      string
				generic, custom int64
				params          int
			}
			var list []prepared
			var p prepared
			if _, err := pgx.ForEachRow(rows, []any{&p.name, &p.text, &p.generic, &p.custom, &p.params}, func() error {
				list = append(list, p)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for _, p := range list {
				prefix := keyedPrefix(strings.TrimSpace(p.text))
				if prefix == "" || p.generic+p.custom == 0 {
					continue
				}
				seen[prefix] = true
				if p.custom != 0 {
					t.Errorf("%s: %q ran on %d custom plans (and %d generic), want only generic ones", when, prefix, p.custom, p.generic)
				}
				if plan := explainKeyed(t, ctx, conn.Conn(), p.name, p.params); strings.Contains(plan, "Seq Scan") {
					t.Errorf("%s: the generic plan of %q scans a table:\n%s", when, prefix, plan)
				}
			}
		}()
	}
	for _, prefix := range keyedWrites {
		if !seen[prefix] {
			t.Errorf("%s: no connection ran %q", when, prefix)
		}
	}
}

func keyedPrefix(text string) string {
	for _, prefix := range keyedWrites {
		if strings.HasPrefix(text, prefix) {
			return prefix
		}
	}
	return ""
}

// explainKeyed explains a prepared statement under the keyed settings.
// The parameters are NULL: a generic plan does not depend on them.
func explainKeyed(t *testing.T, ctx context.Context, conn *pgx.Conn, name string, params int) string {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	b := &pgx.Batch{}
	pg.QueueKeyedPlans(b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	nulls := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
	return explain(t, tx, `EXPLAIN EXECUTE `+pgx.Identifier{name}.Sanitize()+`(`+nulls+`)`, pgx.QueryExecModeSimpleProtocol)
}
