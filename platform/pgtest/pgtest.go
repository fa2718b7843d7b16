// Package pgtest gives each test its own PostgreSQL database, cheaply.
//
// A test package gets one throwaway server (pg.LocalServer, started on first
// use, data on /dev/shm when available, fsync off) and one template
// database migrated once; every New clones the template with CREATE DATABASE
// … STRATEGY FILE_COPY (about 10 ms), so tests start from a migrated schema,
// see nothing of each other, and may run in parallel.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) {
//		pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
//			return pg.Migrate(ctx, pool, "tasks", tasksMigrations)
//		}))
//	}
//
//	func TestSomething(t *testing.T) {
//		pool := pgtest.New(t).Open(t, "tasks")
//		…
//	}
//
// The server is stopped and its data removed when the tests finish. If the
// test binary is killed, the kernel kills the server (Linux) and the next run
// removes the leftover data directory.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// Option configures Main.
type Option struct {
	migrate func(ctx context.Context, pool *pgxpool.Pool) error
	after   func()
}

// WithMigrations registers fn, run once against the template database before
// the first clone (typically pg.Migrate calls for the package's schemas). Main
// may be given several; they run in the order given. The pool fn receives has
// search_path public.
func WithMigrations(fn func(ctx context.Context, pool *pgxpool.Pool) error) Option {
	return Option{migrate: fn}
}

// AfterTests registers fn, run by Main once the tests have ended, before
// the server stops: the removal of what the package's tests shared (a
// binary built once for all of them, say), which no test's Cleanup can do.
func AfterTests(fn func()) Option {
	return Option{after: fn}
}

// Timeouts for work done on behalf of all tests of the package. They are
// generous because a loaded CI machine running many test packages at once
// can be slow; failures normally show up long before.
const (
	startTimeout    = 2 * time.Minute
	templateTimeout = 5 * time.Minute
	adminTimeout    = time.Minute
	// poolCloseTimeout bounds the wait for a test's pool to close.
	poolCloseTimeout = 10 * time.Second
)

// templateName is the database every clone is made from.
const templateName = "pgtest_template"

// state is the package-global server, shared by all tests of the binary.
var state struct {
	mainCalled atomic.Bool
	migrations []func(context.Context, *pgxpool.Pool) error // set by Main before tests run

	serverOnce sync.Once
	server     *pg.LocalServer
	runDir     string // removed by Main
	serverErr  error

	templateOnce sync.Once
	templateErr  error

	counter atomic.Int64 // makes database names unique
}

// Main runs the package's tests: m.Run(), then stops the server if one was
// started and removes its data, and os.Exit with the code. Use from TestMain.
func Main(m *testing.M, opts ...Option) {
	for _, o := range opts {
		if o.migrate != nil {
			state.migrations = append(state.migrations, o.migrate)
		}
	}
	state.mainCalled.Store(true)
	code := m.Run()
	for _, o := range opts {
		if o.after != nil {
			o.after()
		}
	}
	if err := shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// DB is one test's database.
type DB struct {
	URL  string // connection URL (superuser postgres)
	Name string // database name
}

// New returns a fresh database for this test, cloned from the migrated
// template and dropped in t.Cleanup. The first call starts the server and
// migrates the template; if either fails, this and every later New fails the
// test with that error. Missing PostgreSQL binaries fail the test (with
// instructions to install them) rather than skip it, so a machine without
// them cannot pass silently.
func New(t testing.TB) *DB {
	t.Helper()
	srv := Server(t)
	state.templateOnce.Do(func() { state.templateErr = migrateTemplate(srv) })
	if state.templateErr != nil {
		t.Fatalf("pgtest: preparing the template database: %v", state.templateErr)
	}

	name := databaseName(state.counter.Add(1), t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	// FILE_COPY copies the template's files instead of WAL-logging every
	// block (PostgreSQL 15's default), which is much faster for small
	// databases.
	err := adminExec(ctx, srv, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+
		" TEMPLATE "+templateName+" STRATEGY FILE_COPY")
	if err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		// FORCE ends sessions the test left open (its own pgx.Conns,
		// goroutines still running), which would otherwise block the drop.
		if err := adminExec(ctx, srv, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return &DB{URL: srv.URL(name), Name: name}
}

// Open opens a pool on this database with the given schema first in
// search_path (pg.Open), closed in t.Cleanup. Cleanups run last-in first-out,
// so the pool is closed before the database is dropped.
func (d *DB) Open(t testing.TB, schema string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	pool, err := pg.Open(ctx, pg.Config{URL: d.URL, Schema: schema, ApplicationName: applicationName(t.Name())})
	if err != nil {
		t.Fatalf("pgtest: open %s: %v", d.Name, err)
	}
	t.Cleanup(func() {
		// Close waits for every acquired connection to be released; a test
		// that leaked one (unclosed rows, an unreleased Lock) would hang
		// here instead of failing.
		closed := make(chan struct{})
		go func() {
			pool.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(poolCloseTimeout):
			t.Errorf("pgtest: a connection of the pool on %s was still in use %v after the test ended (unclosed rows? unreleased lock?)", d.Name, poolCloseTimeout)
		}
	})
	return pool
}

// Server returns the package's LocalServer, starting it if needed, for tests
// that need to kill or restart PostgreSQL itself. Such tests must not run in
// parallel with others of the package, and must leave the server running
// (Start it again after Kill or Stop) for the tests that follow.
func Server(t testing.TB) *pg.LocalServer {
	t.Helper()
	if !state.mainCalled.Load() {
		t.Fatal("pgtest: the test package must run its tests through pgtest.Main: add\n\tfunc TestMain(m *testing.M) { pgtest.Main(m) }\nso the server is stopped and its data removed afterwards")
	}
	state.serverOnce.Do(func() { state.server, state.runDir, state.serverErr = startServer() })
	if state.serverErr != nil {
		t.Fatalf("pgtest: %v", state.serverErr)
	}
	return state.server
}

func startServer() (*pg.LocalServer, string, error) {
	runDir, err := makeRunDir()
	if err != nil {
		return nil, "", err
	}
	srv := &pg.LocalServer{
		DataDir: runDir + "/data",
		// Unlike pg.LocalServer's non-durable default, keep commits
		// synchronous: with fsync off they cost only a write to the OS
		// (tmpfs here), and it keeps Kill faithful for crash tests, since
		// a killed server then loses no committed transaction.
		Params: map[string]string{"synchronous_commit": "on"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		os.RemoveAll(runDir)
		return nil, "", err
	}
	return srv, runDir, nil
}

func migrateTemplate(srv *pg.LocalServer) error {
	ctx, cancel := context.WithTimeout(context.Background(), templateTimeout)
	defer cancel()
	if err := adminExec(ctx, srv, "CREATE DATABASE "+templateName); err != nil {
		return err
	}
	pool, err := pg.Open(ctx, pg.Config{URL: srv.URL(templateName), ApplicationName: "pgtest template"})
	if err != nil {
		return err
	}
	for _, fn := range state.migrations {
		if err := fn(ctx, pool); err != nil {
			pool.Close()
			return err
		}
	}
	pool.Close()
	// CREATE DATABASE … TEMPLATE fails while anyone is connected to the
	// template; forbid connections so a stray one cannot break the clones.
	return adminExec(ctx, srv, "ALTER DATABASE "+templateName+" WITH ALLOW_CONNECTIONS false")
}

// adminExec runs one statement on the postgres database over a fresh
// connection: CREATE and DROP DATABASE are rare, and a fresh connection keeps
// working after a test restarted the server.
func adminExec(ctx context.Context, srv *pg.LocalServer, sql string) error {
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

func shutdown() error {
	if state.server == nil {
		return nil
	}
	err := state.server.Stop()
	if rerr := os.RemoveAll(state.runDir); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// databaseName builds t_<n>_<test name>: lower-case letters, digits and
// underscores only, at most 63 bytes (PostgreSQL's limit, beyond which it
// silently truncates and two long names could collide). The counter keeps
// names unique; the test name only helps whoever looks at the server.
func databaseName(n int64, testName string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "t_%d_", n)
	underscore := true
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 63 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	return strings.TrimRight(b.String(), "_")
}

// applicationName shows the test in pg_stat_activity; PostgreSQL keeps 63
// bytes of printable ASCII.
func applicationName(testName string) string {
	b := []byte(testName)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b[:min(len(b), 63)])
}
