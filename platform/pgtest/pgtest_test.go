package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

// migrationCalls records the WithMigrations functions as they run, to check
// they run once and in order.
var migrationCalls struct {
	sync.Mutex
	names []string
}

func recordCall(name string) {
	migrationCalls.Lock()
	defer migrationCalls.Unlock()
	migrationCalls.names = append(migrationCalls.names, name)
}

var appMigrations = pg.MigrationSet{Component: "app", Migrations: []pg.Migration{
	{Version: 1, Name: "items", SQL: `CREATE TABLE items (id int PRIMARY KEY, label text NOT NULL)`},
}}

// helperEnv selects what TestMain and TestHelperProcess do when the tests in
// process_test.go run this binary as a child.
const helperEnv = "PGTEST_HELPER"

func helperMode() string { return os.Getenv(helperEnv) }

func TestMain(m *testing.M) {
	switch helperMode() {
	case "no-main":
		// A package that forgot pgtest.Main.
		os.Exit(m.Run())
	case "fail-migration":
		pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
			return pg.Migrate(ctx, pool, "app", pg.MigrationSet{Component: "app", Migrations: []pg.Migration{
				{Version: 1, Name: "broken", SQL: `CREATE TABLE items (id int); SELECT no_such_column FROM items`},
			}})
		}))
	case "after-tests":
		pgtest.Main(m, pgtest.AfterTests(func() { fmt.Println(afterTestsMarker) }))
	}
	pgtest.Main(m,
		pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
			recordCall("first")
			return pg.Migrate(ctx, pool, "app", appMigrations)
		}),
		pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
			recordCall("second")
			// Runs after the first: the schema it created is there.
			_, err := pool.Exec(ctx, `INSERT INTO app.items VALUES (0, 'seed')`)
			return err
		}),
	)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctxT(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestNewReturnsMigratedDatabase(t *testing.T) {
	pool := pgtest.New(t).Open(t, "app")
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `INSERT INTO items VALUES (1, 'one')`); err != nil {
		t.Fatalf("insert with unqualified name: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM items`); n != 2 {
		t.Errorf("items has %d rows, want the seed row and ours", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM schema_migrations WHERE component = 'app'`); n != 1 {
		t.Errorf("schema_migrations has %d app rows, want 1", n)
	}
}

func TestMigrationsRunOnceInOrder(t *testing.T) {
	for range 3 {
		pgtest.New(t)
	}
	migrationCalls.Lock()
	defer migrationCalls.Unlock()
	if want := []string{"first", "second"}; !slices.Equal(migrationCalls.names, want) {
		t.Errorf("migration functions ran as %v, want %v", migrationCalls.names, want)
	}
}

func TestClonesAreIsolated(t *testing.T) {
	a, b := pgtest.New(t), pgtest.New(t)
	if a.Name == b.Name || a.URL == b.URL {
		t.Fatalf("two tests share database %s", a.Name)
	}
	pa, pb := a.Open(t, "app"), b.Open(t, "app")
	ctx := ctxT(t)
	if _, err := pa.Exec(ctx, `INSERT INTO items VALUES (1, 'only in a')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pb.Exec(ctx, `DELETE FROM items`); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pa, `SELECT count(*) FROM items`); n != 2 {
		t.Errorf("a has %d items, want 2 (seed and its own)", n)
	}
	if n := count(t, pb, `SELECT count(*) FROM items`); n != 0 {
		t.Errorf("b has %d items, want 0", n)
	}
}

func TestParallelClones(t *testing.T) {
	for i := range 6 {
		t.Run("clone", func(t *testing.T) {
			t.Parallel()
			pool := pgtest.New(t).Open(t, "app")
			if _, err := pool.Exec(ctxT(t), `INSERT INTO items VALUES ($1, 'mine')`, i+1); err != nil {
				t.Fatal(err)
			}
			if n := count(t, pool, `SELECT count(*) FROM items WHERE id > 0`); n != 1 {
				t.Errorf("saw %d rows besides the seed, want only its own", n)
			}
		})
	}
}

var safeName = regexp.MustCompile(`^t_[0-9]+(_[a-z0-9_]*)?$`)

func TestDatabaseNamesAreSafe(t *testing.T) {
	names := []string{
		`Ünïcode / spaces & "quotes"; DROP DATABASE postgres`,
		strings.Repeat("LongName", 20),
		"---",
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			db := pgtest.New(t)
			if len(db.Name) > 63 || !safeName.MatchString(db.Name) {
				t.Errorf("database name %q is not a safe identifier of at most 63 bytes", db.Name)
			}
			// The name PostgreSQL stored is the one we were given (no truncation).
			pool := db.Open(t, "app")
			var current string
			if err := pool.QueryRow(ctxT(t), `SELECT current_database()`).Scan(&current); err != nil {
				t.Fatal(err)
			}
			if current != db.Name {
				t.Errorf("connected to %q, want %q", current, db.Name)
			}
		})
	}
}

func TestDatabaseDroppedOnCleanup(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) {
		db := pgtest.New(t)
		name = db.Name
		// A connection the test forgot to close must not block the drop.
		conn, err := pgx.Connect(ctxT(t), db.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn
	})
	pool := pgtest.New(t).Open(t, "")
	if n := count(t, pool, `SELECT count(*) FROM pg_database WHERE datname = $1`, name); n != 0 {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

func TestTemplateRefusesConnections(t *testing.T) {
	db := pgtest.New(t)
	url := strings.Replace(db.URL, "/"+db.Name+"?", "/pgtest_template?", 1)
	conn, err := pgx.Connect(ctxT(t), url)
	if err == nil {
		conn.Close(context.Background())
		t.Fatal("connected to the template database; a stray session there would make CREATE DATABASE fail")
	}
}

// TestServerKillKeepsCommittedData kills the shared server like a crash and
// restarts it: committed data survives, and later tests keep working.
func TestServerKillKeepsCommittedData(t *testing.T) {
	db := pgtest.New(t)
	pool := db.Open(t, "app")
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `INSERT INTO items VALUES (7, 'committed before the crash')`); err != nil {
		t.Fatal(err)
	}
	srv := pgtest.Server(t)
	port := srv.Port
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err == nil {
		t.Fatal("ping succeeded on a killed server")
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.Port != port {
		t.Errorf("port changed across restart: %d -> %d", port, srv.Port)
	}
	after := db.Open(t, "app")
	var label string
	if err := after.QueryRow(ctx, `SELECT label FROM items WHERE id = 7`).Scan(&label); err != nil {
		t.Fatalf("row committed before the kill: %v", err)
	}
}

func TestServerIsShared(t *testing.T) {
	if first, again := pgtest.Server(t), pgtest.Server(t); first != again {
		t.Error("Server returned two different servers")
	}
	if got := pgtest.Server(t).URL("x"); !strings.HasPrefix(got, "postgres://postgres@127.0.0.1:") {
		t.Errorf("URL %q does not point at 127.0.0.1", got)
	}
}

func TestPoolClosedOnCleanup(t *testing.T) {
	var pool *pgxpool.Pool
	t.Run("inner", func(t *testing.T) {
		pool = pgtest.New(t).Open(t, "app")
	})
	if err := pool.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "closed pool") {
		t.Errorf("pool still usable after its test ended: %v", err)
	}
}
