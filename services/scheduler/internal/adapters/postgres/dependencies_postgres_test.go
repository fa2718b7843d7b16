package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// depsWorld is a scheduler database with a task store, and helpers that
// write tasks as the store's batches do but in transactions the test
// holds open, to put two writers side by side.
type depsWorld struct {
	t     testing.TB
	ctx   context.Context
	pool  *pgxpool.Pool
	store *postgres.TaskStore
	now   time.Time
}

func newDepsWorld(t testing.TB) *depsWorld {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2})
	t.Cleanup(store.Close)
	return &depsWorld{t: t, ctx: ctx, pool: pool, store: store, now: apptest.T0.Add(time.Minute)}
}

// submit returns the records of a new task depending on deps.
func (w *depsWorld) submit(id string, deps ...string) []domain.Record {
	spec := apptest.Spec(w.t, id)
	spec.DependsOn = deps
	return domain.Submit(apptest.T0, id, "acme", "user", "", "", spec, "")
}

// create commits new tasks through the store.
func (w *depsWorld) create(id string, deps ...string) {
	w.t.Helper()
	if _, err := w.store.Create(w.ctx, app.NewTasks{Tenant: "acme", At: apptest.T0, Tasks: [][]domain.Record{w.submit(id, deps...)}}); err != nil {
		w.t.Fatalf("create %s: %v", id, err)
	}
}

// createMany commits tasks t-0 … t-(n-1) through the store in one
// create, task i depending on deps(i) (nil: none).
func (w *depsWorld) createMany(n int, deps func(i int) []string) {
	w.t.Helper()
	recs := make([][]domain.Record, 0, n)
	for i := range n {
		var d []string
		if deps != nil {
			d = deps(i)
		}
		recs = append(recs, w.submit(fmt.Sprint("t-", i), d...))
	}
	if _, err := w.store.Create(w.ctx, app.NewTasks{Tenant: "acme", At: w.now, Tasks: recs}); err != nil {
		w.t.Fatal(err)
	}
}

// copyTasks inserts copies g = 1 … copies of every task t as a history
// or a backlog, with SQL expressions (of g and t) for each copy's id,
// status and priority; the other columns are t's.
func (w *depsWorld) copyTasks(copies int, id, status, priority string) {
	w.t.Helper()
	const cols = `tenant_id, type, machine_id, target_ip, labels, depends_on, fanout_id, scatter,
		retry_at, created_at, updated_at, version, deleted, awaiting_admission, awaiting_dependencies, doc`
	if _, err := w.pool.Exec(w.ctx, `INSERT INTO tasks (id, status, priority, `+cols+`)
		SELECT `+id+`, `+status+`, `+priority+`, `+cols+`
		FROM tasks t, generate_series(1, $1) g`, copies); err != nil {
		w.t.Fatal(err)
	}
}

// run claims and starts every claimable task.
func (w *depsWorld) run() []string {
	w.t.Helper()
	leased, err := w.store.Claim(w.ctx, "agent-1", fmt.Sprint("claim-", time.Now().UnixNano()),
		app.ClaimFilter{Tenant: "*", Limit: 100, Now: w.now}, func(cs []domain.Task) ([][]domain.Record, error) {
			out := make([][]domain.Record, len(cs))
			for i, c := range cs {
				recs, err := c.Lease(w.now, "attempt-"+c.ID, "agent-1", "m-1", "claim")
				if err != nil {
					return nil, err
				}
				out[i] = recs
			}
			return out, nil
		})
	if err != nil {
		w.t.Fatal(err)
	}
	var ids []string
	for _, l := range leased {
		if _, err := w.store.Mutate(w.ctx, l.ID, func(t domain.Task) ([]domain.Record, error) {
			return t.Start(w.now, t.AgentID, t.AttemptID)
		}); err != nil {
			w.t.Fatal(err)
		}
		ids = append(ids, l.ID)
	}
	return ids
}

// writeIn writes the decisions about ids in tx as the store's batches
// do, without committing.
func (w *depsWorld) writeIn(tx pgx.Tx, ids []string, decide func(t domain.Task, found bool) ([]domain.Record, error)) error {
	return postgres.WriteBatchIn(w.ctx, tx, ids, decide)
}

func (w *depsWorld) complete(t domain.Task, found bool) ([]domain.Record, error) {
	if !found {
		return nil, fmt.Errorf("task not found")
	}
	recs, _, err := t.Complete(w.now, t.AgentID, t.AttemptID, domain.Outcome{EndedAt: w.now})
	return recs, err
}

// awaiting reads a task's awaiting_dependencies.
func (w *depsWorld) awaiting(id string) bool {
	w.t.Helper()
	var v bool
	if err := w.pool.QueryRow(w.ctx, `SELECT awaiting_dependencies FROM tasks WHERE id = $1`, id).Scan(&v); err != nil {
		w.t.Fatal(err)
	}
	return v
}

// claimable reports whether a fresh claim would get the task.
func (w *depsWorld) claimable(id string) bool {
	w.t.Helper()
	tx, err := w.pool.Begin(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	defer tx.Rollback(w.ctx)
	got, err := postgres.ClaimCandidates(w.ctx, tx, app.ClaimFilter{Tenant: "*", Limit: 100, Now: w.now})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, c := range got {
		if c.ID == id {
			return true
		}
	}
	return false
}

// beside runs second in a transaction of its own while first's
// transaction is open, then commits first and then second: second must
// wait for first (it is blocked on a lock first holds when first
// commits), or it decides without seeing first's writes.
func (w *depsWorld) beside(first, second func(tx pgx.Tx) error) {
	w.t.Helper()
	tx1, err := w.pool.Begin(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	defer tx1.Rollback(w.ctx)
	if err := first(tx1); err != nil {
		w.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		tx2, err := w.pool.Begin(w.ctx)
		if err != nil {
			done <- err
			return
		}
		defer tx2.Rollback(w.ctx)
		if err := second(tx2); err != nil {
			done <- err
			return
		}
		done <- tx2.Commit(w.ctx)
	}()
	select {
	case err := <-done:
		// Not blocked: it decided without first's writes. The test's
		// assertions tell whether that went wrong.
		if err != nil {
			w.t.Fatal(err)
		}
		if err := tx1.Commit(w.ctx); err != nil {
			w.t.Fatal(err)
		}
		return
	case <-time.After(500 * time.Millisecond):
	}
	if err := tx1.Commit(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	if err := <-done; err != nil {
		w.t.Fatal(err)
	}
}

// A task written with dependencies waits out of the claim indexes until
// the transaction that completes its last dependency releases it.
func TestWaitingDependentsLeaveTheClaimPathUntilTheirLastDependencyCompletes(t *testing.T) {
	w := newDepsWorld(t)
	w.create("a1")
	w.create("a2")
	w.create("b", "a1", "a2")
	if !w.awaiting("b") || w.claimable("b") {
		t.Fatal("a task whose dependencies are pending is not waiting")
	}
	w.run()
	if _, err := w.store.Mutate(w.ctx, "a1", func(t domain.Task) ([]domain.Record, error) { return w.complete(t, true) }); err != nil {
		t.Fatal(err)
	}
	if !w.awaiting("b") {
		t.Fatal("released after one of two dependencies completed")
	}
	if _, err := w.store.Mutate(w.ctx, "a2", func(t domain.Task) ([]domain.Record, error) { return w.complete(t, true) }); err != nil {
		t.Fatal(err)
	}
	if w.awaiting("b") || !w.claimable("b") {
		t.Fatal("still waiting after both dependencies completed")
	}
	// A task written after its dependencies completed never waits.
	w.create("c", "a1", "a2")
	if w.awaiting("c") || !w.claimable("c") {
		t.Fatal("a task whose dependencies had completed waits")
	}
}

// The last two dependencies of a task completed in two transactions at
// once: the second waits for the first (each locks the dependent before
// its check) and then sees both completed.
func TestDependentsOfTwoConcurrentCompletionsAreReleased(t *testing.T) {
	w := newDepsWorld(t)
	w.create("a1")
	w.create("a2")
	w.create("b", "a1", "a2")
	w.run()
	w.beside(
		func(tx pgx.Tx) error { return w.writeIn(tx, []string{"a1"}, w.complete) },
		func(tx pgx.Tx) error { return w.writeIn(tx, []string{"a2"}, w.complete) },
	)
	if w.awaiting("b") || !w.claimable("b") {
		t.Fatal("b still waits after both its dependencies completed side by side")
	}
}

// A task created while its dependency completes: the creation waits for
// the completion's commit (it locks its dependencies) and sees it.
func TestTaskCreatedBesideItsDependencysCompletionIsReleased(t *testing.T) {
	w := newDepsWorld(t)
	w.create("a")
	w.run()
	w.beside(
		func(tx pgx.Tx) error { return w.writeIn(tx, []string{"a"}, w.complete) },
		func(tx pgx.Tx) error {
			return w.writeIn(tx, []string{"b"}, func(domain.Task, bool) ([]domain.Record, error) { return w.submit("b", "a"), nil })
		},
	)
	if w.awaiting("b") || !w.claimable("b") {
		t.Fatal("b waits for a dependency that completed as it was created")
	}
}

// A claim does not walk the tasks waiting for dependencies: with many of
// them ahead of a claimable task in priority order, the claim's index
// scan reads only the claimable one.
func TestClaimsDoNotWalkWaitingDependents(t *testing.T) {
	w := newDepsWorld(t)
	w.create("root")
	recs := make([][]domain.Record, 0, 500)
	for i := range 500 {
		recs = append(recs, w.submit(fmt.Sprint("child-", i), "root"))
	}
	if _, err := w.store.Create(w.ctx, app.NewTasks{Tenant: "acme", At: apptest.T0, Tasks: recs}); err != nil {
		t.Fatal(err)
	}
	w.run() // the root runs
	w.create("free")
	if _, err := w.pool.Exec(w.ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	tx, err := w.pool.Begin(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(w.ctx)
	rows, err := tx.Query(w.ctx, `EXPLAIN (ANALYZE, FORMAT TEXT) `+postgres.ClaimSQL, w.now, "*", "m-1", "", []string{}, []string{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	var line string
	if _, err := pgx.ForEachRow(rows, []any{&line}, func() error { plan = append(plan, line); return nil }); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	scan := -1
	for i, l := range plan {
		if strings.Contains(l, "Index Scan using tasks_claim_open_idx") {
			scan = i
			break
		}
	}
	if scan < 0 {
		t.Fatalf("the claim does not use tasks_claim_open_idx:\n%s", text)
	}
	// The scan node's own lines: deeper than its line, up to its first
	// child node or subplan.
	depth := len(plan[scan]) - len(strings.TrimLeft(plan[scan], " "))
	for _, l := range plan[scan+1:] {
		trimmed := strings.TrimLeft(l, " ")
		if len(l)-len(trimmed) <= depth || strings.HasPrefix(trimmed, "->") || strings.HasPrefix(trimmed, "SubPlan") {
			break
		}
		if strings.HasPrefix(trimmed, "Rows Removed by Filter") && trimmed != "Rows Removed by Filter: 0" {
			t.Fatalf("the claim's index scan filtered rows out (waiting dependents walked):\n%s", text)
		}
	}
	if !strings.Contains(plan[scan], "rows=1 loops=1") {
		t.Fatalf("the claim's index scan read more than the claimable task:\n%s", text)
	}
	if err := tx.Rollback(w.ctx); err != nil { // the explained claim locked it
		t.Fatal(err)
	}
	if !w.claimable("free") {
		t.Fatal("the claimable task is not a candidate")
	}
}

// BenchmarkClaimBehindWaitingDependents is one claim's candidates query
// with 10,000 tasks waiting for a running root ahead of a claimable task
// in priority order: held out of the claim indexes (decision 0087), and,
// beside it, in them, as before that decision, where the claim checks
// each one's dependencies and passes it by.
func BenchmarkClaimBehindWaitingDependents(b *testing.B) {
	w := newDepsWorld(b)
	ctx, pool := w.ctx, w.pool
	w.create("root")
	if got := w.run(); len(got) != 1 {
		b.Fatalf("ran %v, want the root", got)
	}
	for i := 0; i < 10_000; i += 500 {
		batch := make([][]domain.Record, 0, 500)
		for j := i; j < i+500; j++ {
			batch = append(batch, w.submit(fmt.Sprint("child-", j), "root"))
		}
		if _, err := w.store.Create(ctx, app.NewTasks{Tenant: "acme", At: apptest.T0, Tasks: batch}); err != nil {
			b.Fatal(err)
		}
	}
	w.create("free")
	claim := func(b *testing.B) {
		if _, err := pool.Exec(ctx, `ANALYZE tasks`); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			tx, err := pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			got, err := postgres.ClaimCandidates(ctx, tx, app.ClaimFilter{Tenant: "*", Limit: 1, Now: w.now})
			if err != nil || len(got) != 1 || got[0].ID != "free" {
				b.Fatalf("candidates %v, %v: want the free task", len(got), err)
			}
			if err := tx.Rollback(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("held-out", claim)
	if _, err := pool.Exec(ctx, `UPDATE tasks SET awaiting_dependencies = false`); err != nil {
		b.Fatal(err)
	}
	b.Run("in-the-claim-index", claim)
}
