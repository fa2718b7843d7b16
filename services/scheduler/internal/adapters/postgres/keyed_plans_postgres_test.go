package postgres_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// keyedWrites are the statements a task write sends on keyed plans
// (pg.QueueKeyedPlans), by the start of their text: the batches' lock,
// the event append (its order check first), the inserts and updates of tasks rows, and the
// dependency statements of a task written waiting and of one completed.
var keyedWrites = []string{
	"SELECT doc FROM tasks WHERE id = ANY",
	"WITH in_order AS MATERIALIZED (SELECT events_check_order",
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
	pgtest.CheckKeyedPlans(t, w.ctx, w.pool, "planned on the empty table", keyedWrites)

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
	pgtest.CheckKeyedPlans(t, w.ctx, w.pool, "on 20,000 tasks after ANALYZE", keyedWrites)
}
