package postgres_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// The claim runs on its generic plan (claimCandidates): planned once per
// connection, on an empty table, that plan must read the four claim
// indexes and go on doing so after the table holds a large history and a
// backlog, before and after ANALYZE. The transaction's other statements
// keep the pool's custom plans.
func TestClaimRunsOnItsGenericPlan(t *testing.T) {
	w := newDepsWorld(t)
	conn, err := w.pool.Acquire(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	filter := app.ClaimFilter{Tenant: "*", Machine: "m-1", Labels: []string{"gpu"}, Limit: 8, Now: w.now}
	claim := func(want int) {
		t.Helper()
		tx, err := conn.Begin(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(w.ctx)
		got, err := postgres.ClaimCandidates(w.ctx, tx, filter)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Fatalf("the claim found %d candidates, want %d", len(got), want)
		}
		var mode string
		if err := tx.QueryRow(w.ctx, `SHOW plan_cache_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if mode != "force_custom_plan" {
			t.Fatalf("after the claim the transaction's plan_cache_mode is %s, want the pool's force_custom_plan", mode)
		}
	}
	claim(0) // planned on the empty table
	checkClaimPlan(t, w.ctx, conn, "on the empty table")

	w.createMany(1000, nil)
	// A history: 100 copies of each task, nine in ten of them completed.
	w.copyTasks(100, `'h-' || g || '-' || t.id`, `CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'completed' END`, `t.priority`)
	claim(8)
	checkClaimPlan(t, w.ctx, conn, "on 101,000 tasks, planned on the empty table")
	if _, err := w.pool.Exec(w.ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	claim(8)
	checkClaimPlan(t, w.ctx, conn, "on 101,000 tasks after ANALYZE")

	var generic, custom int64
	if err := conn.QueryRow(w.ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement = $1`, postgres.ClaimSQL).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	// Three claims and three EXPLAINs, all on the generic plan.
	if generic < 3 || custom != 0 {
		t.Fatalf("the claim ran on %d generic and %d custom plans, want only generic ones", generic, custom)
	}
	// So did the lookup of the agent, lost or not, in the same batch.
	if err := conn.QueryRow(w.ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement = 'SELECT EXISTS (SELECT 1 FROM agents WHERE agent_id = $1 AND lost)'`).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if generic < 3 || custom != 0 {
		t.Fatalf("the claim's lookup of its agent ran on %d generic and %d custom plans, want only generic ones", generic, custom)
	}
}

// The generic plan made over a backlog keeps walking the claim indexes in
// their order. Made with the statistics of a table whose backlog is a few
// thousand tasks among finished ones (an ANALYZE of it, as autovacuum
// runs), it read each branch's candidates from a bitmap and sorted them,
// the whole backlog on every claim, until the claim ran without bitmap
// scans (claimPlansOn).
func TestClaimWalksItsIndexesInOrderOverABacklog(t *testing.T) {
	w := newDepsWorld(t)
	w.createMany(100, nil)
	// 60 copies of each task, 17 of them pending: 1,700 pending among
	// 6,100, at priorities 0–7 that lie in no order of the table's rows.
	w.copyTasks(60, `'b-' || g || '-' || t.id`, `CASE WHEN g <= 17 THEN 'pending' ELSE 'completed' END`, `hashtext(g || t.id) & 7`)
	if _, err := w.pool.Exec(w.ctx, `UPDATE tasks SET status = 'completed' WHERE id LIKE 't-%'`); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(w.ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	conn, err := w.pool.Acquire(w.ctx) // no claim ran before: its first plans the claim now
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := postgres.ClaimCandidates(w.ctx, tx, app.ClaimFilter{Tenant: "*", Machine: "m-1", Limit: 2, Now: w.now})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("the claim found %d candidates, want 2", len(got))
	}
	var bitmaps string
	if err := tx.QueryRow(w.ctx, `SHOW enable_bitmapscan`).Scan(&bitmaps); err != nil {
		t.Fatal(err)
	}
	if bitmaps != "on" {
		t.Fatalf("after the claim the transaction's enable_bitmapscan is %s, want the pool's on", bitmaps)
	}
	if err := tx.Rollback(w.ctx); err != nil {
		t.Fatal(err)
	}
	checkClaimPlan(t, w.ctx, conn, "over a backlog of 1,700 among 6,100 tasks, planned after ANALYZE")
}

// seqScanOfCandidates is a sequential scan of a claim branch's tasks
// (aliases t, t_1, ...), not of a subplan's.
var seqScanOfCandidates = regexp.MustCompile(`Seq Scan on tasks t(_\d+)?\s`)

// checkClaimPlan explains the claim's generic plan as it stands in the
// connection's plan cache: the statement the claims prepared (pgx's
// statement cache), not a new one.
func checkClaimPlan(t *testing.T, ctx context.Context, conn *pgxpool.Conn, when string) {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, postgres.ClaimPlansOn); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := tx.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement = $1`, postgres.ClaimSQL).Scan(&name); err != nil {
		t.Fatal(err)
	}
	plan := explain(t, tx, `EXPLAIN EXECUTE `+pgx.Identifier{name}.Sanitize()+`('`+time.Now().UTC().Format(time.RFC3339Nano)+`', '*', 'm-1', '', '{gpu}', '{}', 8)`)
	for _, idx := range []string{"tasks_claim_open_idx", "tasks_claim_machine_idx", "tasks_claim_address_idx", "tasks_claim_labelled_idx"} {
		if !strings.Contains(plan, "using "+idx+" on tasks t") {
			t.Errorf("%s the claim's generic plan does not read %s:\n%s", when, idx, plan)
		}
	}
	if seqScanOfCandidates.MatchString(plan) {
		t.Errorf("%s the claim's generic plan scans the tasks table:\n%s", when, plan)
	}
	if strings.Contains(plan, "Seq Scan") {
		t.Errorf("%s the claim's generic plan scans a table:\n%s", when, plan)
	}
	if strings.Contains(plan, "Bitmap Heap Scan on tasks t") {
		t.Errorf("%s the claim's generic plan reads a branch's candidates from a bitmap, to sort them:\n%s", when, plan)
	}
	if !strings.Contains(plan, "using tasks_fanout_idx on tasks s") {
		t.Errorf("%s the claim's generic plan does not read tasks_fanout_idx for a scatter's tasks:\n%s", when, plan)
	}
}
