package pgstats

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// A server started with Params traces its statements: after Reset, Print
// lists what ran since (and only that), with the tables written to.
func TestPrintListsTheStatementsRunSinceTheReset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Postgres runs as its own user when this is root: the directory must
	// be reachable by it, which t.TempDir's parent is not.
	dir, err := os.MkdirTemp("", "pgstats")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv := &pg.LocalServer{DataDir: filepath.Join(dir, "pg"), LogPath: filepath.Join(dir, "postgres.log"),
		Params: Params(true, map[string]string{})}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	pool, err := pgxpool.New(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	if _, err := pool.Exec(ctx, `CREATE TABLE before_reset (n int)`); err != nil {
		t.Fatal(err)
	}
	if err := Reset(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// A backend reports its table statistics when it goes idle, at most
	// once a second, unless told to at once.
	if _, err := pool.Exec(ctx, `CREATE TABLE traced (n int); INSERT INTO traced SELECT generate_series(1, 2000);
		SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Print(ctx, pool, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"all statements:", "statements by total time", "INSERT INTO traced SELECT generate_series",
		"table writes since the database was created", "public.traced  2000"} {
		if !strings.Contains(got, want) {
			t.Errorf("the print lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "CREATE TABLE before_reset") {
		t.Errorf("the print shows a statement from before the reset:\n%s", got)
	}
}

// Without statements asked for, the server loads nothing; with both
// tracers, both are preloaded.
func TestParamsPreloadOnlyWhatIsAskedFor(t *testing.T) {
	t.Setenv("TASKMESH_BENCH_EXPLAIN_MS", "")
	if p := Params(false, map[string]string{"max_connections": "10"}); len(p) != 1 || p["max_connections"] != "10" {
		t.Fatalf("Params(false) = %v, want the settings given and nothing else", p)
	}
	t.Setenv("TASKMESH_BENCH_EXPLAIN_MS", "50")
	p := Params(true, map[string]string{})
	if p["shared_preload_libraries"] != "pg_stat_statements,auto_explain" || p["auto_explain.log_min_duration"] != "50" {
		t.Fatalf("Params(true) with TASKMESH_BENCH_EXPLAIN_MS=50 = %v", p)
	}
}
