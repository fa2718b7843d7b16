package pg_test

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

//go:embed testdata/migrations
var testMigrations embed.FS

func loadTestMigrations(t *testing.T) pg.MigrationSet {
	t.Helper()
	set, err := pg.LoadMigrations("widgets", testMigrations, "testdata/migrations")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestLoadMigrations(t *testing.T) {
	set := loadTestMigrations(t)
	if set.Component != "widgets" || len(set.Migrations) != 2 {
		t.Fatalf("loaded %+v", set)
	}
	for i, want := range []struct {
		version int
		name    string
		sql     string
	}{{1, "widgets", "CREATE TABLE widgets"}, {2, "widget_color", "ADD COLUMN color"}} {
		m := set.Migrations[i]
		if m.Version != want.version || m.Name != want.name || !strings.Contains(m.SQL, want.sql) {
			t.Errorf("migration %d = %d %q %q", i, m.Version, m.Name, m.SQL)
		}
	}
}

func TestLoadMigrationsSortsByVersion(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0010_ten.sql":   {Data: []byte("SELECT 10")},
		"m/0002_two.sql":   {Data: []byte("SELECT 2")},
		"m/00001_one.sql":  {Data: []byte("SELECT 1")},
		"m/0003_three.sql": {Data: []byte("SELECT 3")},
	}
	set, err := pg.LoadMigrations("c", fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, m := range set.Migrations {
		got = append(got, m.Version)
	}
	if fmt.Sprint(got) != "[1 2 3 10]" {
		t.Errorf("versions in order %v", got)
	}
}

func TestLoadMigrationsRejectsBadDirectories(t *testing.T) {
	ok := &fstest.MapFile{Data: []byte("SELECT 1")}
	for name, fsys := range map[string]fstest.MapFS{
		"dash instead of underscore": {"m/0001-tasks.sql": ok},
		"too few digits":             {"m/001_tasks.sql": ok},
		"upper case name":            {"m/0001_Tasks.sql": ok},
		"wrong extension":            {"m/0001_tasks.sql.bak": ok},
		"no name":                    {"m/0001_.sql": ok},
		"stray file":                 {"m/0001_tasks.sql": ok, "m/README.md": ok},
		"subdirectory":               {"m/0001_tasks.sql": ok, "m/0002_more.sql/x": ok},
		"duplicate version":          {"m/0001_tasks.sql": ok, "m/0001_jobs.sql": ok},
		"same version, other width":  {"m/0001_tasks.sql": ok, "m/00001_jobs.sql": ok},
		"version zero":               {"m/0000_init.sql": ok},
		"empty file":                 {"m/0001_tasks.sql": {Data: []byte(" \n\t")}},
		"missing directory":          {"other/0001_tasks.sql": ok},
	} {
		if set, err := pg.LoadMigrations("c", fsys, "m"); err == nil {
			t.Errorf("%s: accepted, loaded %+v", name, set.Migrations)
		}
	}
	if _, err := pg.LoadMigrations("", fstest.MapFS{"m/0001_a.sql": ok}, "m"); err == nil {
		t.Error("accepted an empty component name")
	}
}

func migrationRows(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(testCtx(t), `SELECT component || ' ' || version || ' ' || name FROM `+schema+`.schema_migrations ORDER BY component, version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMigrateAppliesIntoSchema(t *testing.T) {
	pool := pgtest.New(t).Open(t, "") // search_path public: Migrate must set its own
	ctx := testCtx(t)
	if err := pg.Migrate(ctx, pool, "inventory", loadTestMigrations(t)); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(migrationRows(t, pool, "inventory")); got != "[widgets 1 widgets widgets 2 widget_color]" {
		t.Errorf("schema_migrations = %s", got)
	}
	mustExec(t, pool, `INSERT INTO inventory.widgets (id, name) VALUES (1, 'w')`)
	if n := queryInt(t, pool, `SELECT count(*) FROM inventory.widgets WHERE color = 'grey'`); n != 1 {
		t.Error("second migration not applied")
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name = 'widgets'`); n != 0 {
		t.Error("migration created its table in public")
	}
	// The pool's connections keep their own search_path: SET LOCAL ended
	// with each migration's transaction.
	var path string
	if err := pool.QueryRow(ctx, `SHOW search_path`).Scan(&path); err != nil || path != "public" {
		t.Errorf("search_path after Migrate = %q, %v", path, err)
	}
}

func TestMigrateIsIdempotentAndIncremental(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	ctx := testCtx(t)
	full := loadTestMigrations(t)
	first := pg.MigrationSet{Component: full.Component, Migrations: full.Migrations[:1]}
	if err := pg.Migrate(ctx, pool, "inv", first); err != nil {
		t.Fatal(err)
	}
	var appliedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT applied_at FROM inv.schema_migrations WHERE version = 1`).Scan(&appliedAt); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := pg.Migrate(ctx, pool, "inv", full); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(migrationRows(t, pool, "inv")); got != 2 {
		t.Errorf("%d migrations recorded, want 2", got)
	}
	var again time.Time
	if err := pool.QueryRow(ctx, `SELECT applied_at FROM inv.schema_migrations WHERE version = 1`).Scan(&again); err != nil {
		t.Fatal(err)
	}
	if !again.Equal(appliedAt) {
		t.Error("migration 1 was re-applied")
	}
	// A replica running older code (fewer migrations) starts fine.
	if err := pg.Migrate(ctx, pool, "inv", first); err != nil {
		t.Errorf("Migrate with a subset of the recorded migrations: %v", err)
	}
}

// TestMigrateConcurrently starts several replicas migrating the same fresh
// database at once: each migration must run exactly once.
func TestMigrateConcurrently(t *testing.T) {
	db := pgtest.New(t)
	set := pg.MigrationSet{Component: "jobs", Migrations: []pg.Migration{
		{Version: 1, Name: "log", SQL: `CREATE TABLE runs (version int NOT NULL)`},
		{Version: 2, Name: "jobs", SQL: `CREATE TABLE jobs (id int PRIMARY KEY); INSERT INTO runs VALUES (2)`},
		{Version: 3, Name: "slow", SQL: `SELECT pg_sleep(0.05); INSERT INTO runs VALUES (3)`},
		{Version: 4, Name: "index", SQL: `CREATE INDEX jobs_id ON jobs (id); INSERT INTO runs VALUES (4)`},
	}}
	const replicas = 8
	pools := make([]*pgxpool.Pool, replicas)
	for i := range pools {
		pools[i] = db.Open(t, "")
	}
	ctx := testCtx(t)
	start := make(chan struct{})
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Go(func() {
			<-start
			errs[i] = pg.Migrate(ctx, pool, "jobs", set)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	if got := fmt.Sprint(migrationRows(t, pools[0], "jobs")); got != "[jobs 1 log jobs 2 jobs jobs 3 slow jobs 4 index]" {
		t.Errorf("schema_migrations = %s", got)
	}
	for v := 2; v <= 4; v++ {
		if n := queryInt(t, pools[0], `SELECT count(*) FROM jobs.runs WHERE version = $1`, v); n != 1 {
			t.Errorf("migration %d ran %d times", v, n)
		}
	}
}

func TestMigrateFailureRollsBack(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	ctx := testCtx(t)
	good := pg.Migration{Version: 1, Name: "base", SQL: `CREATE TABLE base (id int)`}
	broken := pg.Migration{Version: 2, Name: "broken", SQL: `CREATE TABLE half (id int); INSERT INTO base VALUES (1); SELECT 1/0`}
	err := pg.Migrate(ctx, pool, "svc", pg.MigrationSet{Component: "svc", Migrations: []pg.Migration{good, broken}})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22012" || !strings.Contains(err.Error(), "svc 0002_broken") {
		t.Fatalf("Migrate returned %v, want the division by zero naming the migration", err)
	}
	if got := fmt.Sprint(migrationRows(t, pool, "svc")); got != "[svc 1 base]" {
		t.Errorf("schema_migrations = %s, want only the good migration", got)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'half'`); n != 0 {
		t.Error("the failed migration's table exists")
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM svc.base`); n != 0 {
		t.Error("the failed migration's insert is visible")
	}
	// Later migrations are not attempted after a failure, and the fixed
	// migration applies.
	fixed := pg.Migration{Version: 2, Name: "broken", SQL: `CREATE TABLE half (id int)`}
	if err := pg.Migrate(ctx, pool, "svc", pg.MigrationSet{Component: "svc", Migrations: []pg.Migration{good, fixed}}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(migrationRows(t, pool, "svc")); got != "[svc 1 base svc 2 broken]" {
		t.Errorf("schema_migrations = %s", got)
	}
}

func TestMigrateSeveralComponentsInOneSchema(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	ctx := testCtx(t)
	service := pg.MigrationSet{Component: "scheduler", Migrations: []pg.Migration{
		{Version: 1, Name: "queue", SQL: `CREATE TABLE queue (id int)`},
	}}
	events := pg.MigrationSet{Component: "eventstore", Migrations: []pg.Migration{
		{Version: 1, Name: "events", SQL: `CREATE TABLE events (id int)`},
		{Version: 2, Name: "event_index", SQL: `CREATE INDEX events_id ON events (id)`},
	}}
	if err := pg.Migrate(ctx, pool, "scheduler", events, service); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(migrationRows(t, pool, "scheduler")); got != "[eventstore 1 events eventstore 2 event_index scheduler 1 queue]" {
		t.Errorf("schema_migrations = %s", got)
	}
	// Another service's schema has its own record.
	if err := pg.Migrate(ctx, pool, "quota", events); err != nil {
		t.Fatal(err)
	}
	if got := len(migrationRows(t, pool, "quota")); got != 2 {
		t.Errorf("quota schema records %d migrations, want 2", got)
	}
}

func TestMigrateRejectsReplacedMigration(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	ctx := testCtx(t)
	orig := pg.MigrationSet{Component: "c", Migrations: []pg.Migration{{Version: 1, Name: "tasks", SQL: `CREATE TABLE tasks (id int)`}}}
	if err := pg.Migrate(ctx, pool, "s", orig); err != nil {
		t.Fatal(err)
	}
	other := pg.MigrationSet{Component: "c", Migrations: []pg.Migration{{Version: 1, Name: "jobs", SQL: `CREATE TABLE jobs (id int)`}}}
	if err := pg.Migrate(ctx, pool, "s", other); err == nil || !strings.Contains(err.Error(), `recorded as "tasks"`) {
		t.Errorf("Migrate with another migration under an applied version returned %v", err)
	}
}

func TestMigrateRejectsBadInput(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	ctx := testCtx(t)
	m := pg.Migration{Version: 1, Name: "a", SQL: `SELECT 1`}
	for name, c := range map[string]struct {
		schema string
		sets   []pg.MigrationSet
	}{
		"invalid schema":    {`Bad"Schema`, []pg.MigrationSet{{Component: "c", Migrations: []pg.Migration{m}}}},
		"empty schema":      {"", []pg.MigrationSet{{Component: "c", Migrations: []pg.Migration{m}}}},
		"empty component":   {"s", []pg.MigrationSet{{Migrations: []pg.Migration{m}}}},
		"component twice":   {"s", []pg.MigrationSet{{Component: "c"}, {Component: "c"}}},
		"duplicate version": {"s", []pg.MigrationSet{{Component: "c", Migrations: []pg.Migration{m, m}}}},
		"version zero":      {"s", []pg.MigrationSet{{Component: "c", Migrations: []pg.Migration{{Name: "z", SQL: "SELECT 1"}}}}},
	} {
		if err := pg.Migrate(ctx, pool, c.schema, c.sets...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM information_schema.schemata WHERE schema_name = 's'`); n != 0 {
		t.Error("rejected input still created the schema")
	}
}

// TestMigrateAsSchemaOwner runs Migrate as a service role that owns its
// schema but, as usual in production, may not create schemas in the
// database.
func TestMigrateAsSchemaOwner(t *testing.T) {
	ctx := testCtx(t)
	admin, err := pgx.Connect(ctx, pgtest.Server(t).URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	role := fmt.Sprintf("svc_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN`); err != nil {
		t.Fatal(err)
	}
	// Registered before New, so it runs after the database (holding the
	// role's schema) is dropped.
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.Server(t).URL("postgres"))
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), `DROP ROLE `+role); err != nil {
			t.Error(err)
		}
	})

	db := pgtest.New(t)
	super := db.Open(t, "")
	mustExec(t, super, `CREATE SCHEMA billing AUTHORIZATION `+role)
	if n := queryInt(t, super, `SELECT count(*) FROM pg_roles WHERE rolname = $1 AND has_database_privilege(rolname, current_database(), 'CREATE')`, role); n != 0 {
		t.Fatal("role unexpectedly may create schemas")
	}

	url := strings.Replace(db.URL, "postgres@", role+"@", 1)
	pool, err := pg.Open(ctx, pg.Config{URL: url, Schema: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pg.Migrate(ctx, pool, "billing", loadTestMigrations(t)); err != nil {
		t.Fatalf("Migrate as the schema's owner: %v", err)
	}
	if err := pg.Migrate(ctx, pool, "other", loadTestMigrations(t)); err == nil {
		t.Error("Migrate created a schema without the privilege to")
	}
}
