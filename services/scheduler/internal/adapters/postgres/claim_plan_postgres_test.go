package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
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

	recs := make([][]domain.Record, 0, 1000)
	for i := range 1000 {
		recs = append(recs, w.submit(fmt.Sprint("t-", i)))
	}
	if _, err := w.store.Create(w.ctx, app.NewTasks{Tenant: "acme", At: w.now, Tasks: recs}); err != nil {
		t.Fatal(err)
	}
	// A history: 100 copies of each task, nine in ten of them completed.
	const cols = `tenant_id, status, priority, type, machine_id, target_ip, labels, depends_on, fanout_id, scatter,
		retry_at, created_at, updated_at, version, deleted, awaiting_admission, awaiting_dependencies, doc`
	if _, err := w.pool.Exec(w.ctx, `INSERT INTO tasks (id, `+cols+`)
		SELECT 'h-' || g || '-' || t.id, t.tenant_id, CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'completed' END,
		       t.priority, t.type, t.machine_id, t.target_ip, t.labels, t.depends_on, t.fanout_id, t.scatter,
		       t.retry_at, t.created_at, t.updated_at, t.version, t.deleted, t.awaiting_admission, t.awaiting_dependencies, t.doc
		FROM tasks t, generate_series(1, 100) g`); err != nil {
		t.Fatal(err)
	}
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
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
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
}
