// Package pgstats traces the statements of a Postgres server a benchmark
// or the chaos suite runs: pg_stat_statements (and auto_explain, on
// request) loaded at the server's start, its figures cleared before what
// is measured and printed after it. Tracing every statement costs the
// server time, so it is off unless asked for.
package pgstats

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Params adds to params the server settings that trace statements:
// pg_stat_statements with statements, auto_explain when
// TASKMESH_BENCH_EXPLAIN_MS=n is set (the plans of statements slower than
// n ms, logged to the server's log). It returns params.
func Params(statements bool, params map[string]string) map[string]string {
	var preload []string
	if statements {
		preload = append(preload, "pg_stat_statements")
		params["pg_stat_statements.track"] = "all"
		params["pg_stat_statements.track_planning"] = "on"
	}
	if ms := os.Getenv("TASKMESH_BENCH_EXPLAIN_MS"); ms != "" {
		preload = append(preload, "auto_explain")
		params["auto_explain.log_min_duration"] = ms
		params["auto_explain.log_analyze"] = "on"
		params["auto_explain.log_buffers"] = "on"
		params["auto_explain.log_nested_statements"] = "on"
	}
	if len(preload) > 0 {
		params["shared_preload_libraries"] = strings.Join(preload, ",")
	}
	return params
}

// Reset loads pg_stat_statements into the database's public schema, which
// a service's pool may not reach (each has its search path on its own
// schema) but Print names, and clears its figures: Print then shows what
// ran since, in every database of the server.
func Reset(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public; SELECT public.pg_stat_statements_reset()`)
	return err
}

// Print lists the statements with the most total time, executing and
// planning (15, or TASKMESH_BENCH_STATEMENTS), after the totals of all of
// them, and the tables of pool's database with the most rows written.
func Print(ctx context.Context, pool *pgxpool.Pool, w io.Writer) error {
	limit := 15
	if n, err := strconv.Atoi(os.Getenv("TASKMESH_BENCH_STATEMENTS")); err == nil && n > 0 {
		limit = n
	}
	var calls, exec, planning int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint, coalesce(round(sum(total_exec_time)), 0)::bigint,
		coalesce(round(sum(total_plan_time)), 0)::bigint FROM public.pg_stat_statements`).Scan(&calls, &exec, &planning); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	// Planning counts: a prepared statement that gets a custom plan on
	// every execution spends its time there, not in the executor.
	statements, err := rowsOf(ctx, pool, `SELECT calls::text, round(total_exec_time)::text, round(total_plan_time)::text,
		round(mean_exec_time::numeric, 3)::text, rows::text, regexp_replace(left(query, 110), '\s+', ' ', 'g')
		FROM public.pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT $1`, limit)
	if err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	// HOT updates write no index entry: the share of them says what a
	// table's indexes cost its updates.
	tables, err := rowsOf(ctx, pool, `SELECT schemaname || '.' || relname, n_tup_ins::text, n_tup_upd::text, n_tup_hot_upd::text,
		(SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid)::text FROM pg_stat_user_tables s
		WHERE n_tup_ins + n_tup_upd > 1000 ORDER BY n_tup_ins + n_tup_upd DESC`)
	if err != nil {
		return fmt.Errorf("table statistics: %w", err)
	}
	fmt.Fprintf(w, "\nall statements: %d calls, %d ms executing, %d ms planning\n", calls, exec, planning)
	fmt.Fprintln(w, "\ntable writes since the database was created")
	if err := table(w, []string{"table", "inserts", "updates", "hot updates", "indexes"}, tables); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nstatements by total time (pg_stat_statements)")
	return table(w, []string{"calls", "total ms", "planning ms", "mean ms", "rows", "query"}, statements)
}

// rowsOf reads every row of a query whose columns are all text.
func rowsOf(ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) ([][]string, error) {
	rows, err := pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = fmt.Sprint(v)
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// table writes rows under header, columns aligned.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}
