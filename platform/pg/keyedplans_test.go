package pg_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

// QueryKeyed runs its read on the statement's generic plan, planned once
// per connection, whatever the pool's planning (every execution
// custom-planned); on a connection the settings end with the batch, and
// in a transaction the statements after it get the connection's planning
// back. A read that fails says why and leaves the connection usable.
func TestQueryKeyedRunsOnTheGenericPlan(t *testing.T) {
	ctx := testCtx(t)
	pool := pgtest.New(t).Open(t, "")
	mustExec(t, pool, `CREATE TABLE keyed (id int PRIMARY KEY, v text)`)
	mustExec(t, pool, `INSERT INTO keyed SELECT g, 'v' || g FROM generate_series(1, 100) g`)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	const read = `SELECT v FROM keyed WHERE id = $1`
	get := func(db pg.Batcher, id int) string {
		t.Helper()
		var v string
		if err := pg.QueryKeyed(ctx, db, func(rows pgx.Rows) error {
			var err error
			v, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
			return err
		}, read, id); err != nil {
			t.Fatalf("read %d: %v", id, err)
		}
		return v
	}
	show := func(tx pgx.Tx, name string) string {
		t.Helper()
		var v string
		if err := tx.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for id := 1; id <= 7; id++ { // past the five executions a cached statement may be custom-planned for
		if got := get(conn, id); got != fmt.Sprint("v", id) {
			t.Fatalf("read %d = %q", id, got)
		}
	}
	var generic, custom int64
	if err := conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
		read).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if generic != 7 || custom != 0 {
		t.Fatalf("the read ran on %d generic and %d custom plans, want 7 generic ones", generic, custom)
	}
	var mode string
	if err := conn.QueryRow(ctx, `SHOW plan_cache_mode`).Scan(&mode); err != nil || mode != "force_custom_plan" {
		t.Fatalf("after the reads the connection's plan_cache_mode is %q (%v), want the pool's force_custom_plan", mode, err)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if got := get(tx, 42); got != "v42" {
		t.Fatalf("read 42 in a transaction = %q", got)
	}
	if m, s := show(tx, "plan_cache_mode"), show(tx, "enable_seqscan"); m != "force_custom_plan" || s != "on" {
		t.Fatalf("after the read the transaction plans with plan_cache_mode %s and enable_seqscan %s, want the connection's", m, s)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	err = pg.QueryKeyed(ctx, conn, func(pgx.Rows) error { return nil }, `SELECT v FROM no_such_table WHERE id = $1`, 1)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Fatalf("a read of a missing table: %v, want its error", err)
	}
	if got := get(conn, 3); got != "v3" {
		t.Fatalf("read after a failed one = %q", got)
	}
}
