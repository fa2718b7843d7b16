package pgtest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// CheckKeyedPlans reads the prepared statements (pgx's statement cache)
// of every idle connection of pool and checks the statements whose text,
// with its whitespace folded, starts with one of keyed: each must have
// run on some connection, only on generic plans, and its generic plan,
// explained under the keyed settings (pg.QueueKeyedPlans), must scan no
// table sequentially. when names the moment in the failures.
func CheckKeyedPlans(t *testing.T, ctx context.Context, pool *pgxpool.Pool, when string, keyed []string) {
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
				prefix := keyedPrefix(strings.TrimSpace(p.text), keyed)
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
	for _, prefix := range keyed {
		if !seen[prefix] {
			t.Errorf("%s: no connection ran %q", when, prefix)
		}
	}
}

func keyedPrefix(text string, keyed []string) string {
	for _, prefix := range keyed {
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
	defer func() { _ = tx.Rollback(ctx) }()
	b := &pgx.Batch{}
	pg.QueueKeyedPlans(b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	nulls := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
	return Explain(t, tx, `EXPLAIN EXECUTE `+pgx.Identifier{name}.Sanitize()+`(`+nulls+`)`, pgx.QueryExecModeSimpleProtocol)
}

// Querier is what Explain runs on: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Explain runs an EXPLAIN statement on q and returns the plan's text.
func Explain(t testing.TB, q Querier, stmt string, args ...any) string {
	t.Helper()
	rows, err := q.Query(context.Background(), stmt, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
