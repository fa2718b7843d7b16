package pg

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migration is one forward-only schema change. Once applied its SQL must never
// change: fix mistakes with a new migration.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// MigrationSet is the ordered migrations of one component (a service, or a
// platform package such as the event store). Components version their
// migrations independently, so several packages can contribute tables to one
// service schema.
type MigrationSet struct {
	Component  string
	Migrations []Migration
}

// migrationFile matches NNNN_name.sql: at least four digits, then a lower-case
// name. The name is recorded in schema_migrations.
var migrationFile = regexp.MustCompile(`^([0-9]{4,})_([a-z0-9][a-z0-9_]*)\.sql$`)

// LoadMigrations reads files named NNNN_name.sql (e.g. 0001_tasks.sql) from dir
// in fsys (use with embed.FS) and returns them ordered by version.
//
// Every entry of dir must be such a file: a stray README, a subdirectory or a
// misspelt name (0001-tasks.sql, 1_tasks.sql) is an error rather than silently
// ignored, because an ignored migration surfaces much later as a missing table.
// Two files with the same version (typically from two branches merged), a
// version 0 and an empty file are errors too.
func LoadMigrations(component string, fsys fs.FS, dir string) (MigrationSet, error) {
	set := MigrationSet{Component: component}
	if component == "" {
		return set, errors.New("pg: LoadMigrations: empty component name")
	}
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return set, fmt.Errorf("pg: load %s migrations: %w", component, err)
	}
	seen := map[int]string{}
	for _, e := range entries {
		m := migrationFile.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			return set, fmt.Errorf("pg: load %s migrations: %q in %s is not a migration file named NNNN_name.sql (lower-case name)", component, e.Name(), dir)
		}
		version, err := strconv.Atoi(m[1])
		if err != nil || version == 0 {
			return set, fmt.Errorf("pg: load %s migrations: %q: version must be a positive integer", component, e.Name())
		}
		if prev, ok := seen[version]; ok {
			return set, fmt.Errorf("pg: load %s migrations: %q and %q both have version %d", component, prev, e.Name(), version)
		}
		seen[version] = e.Name()
		sql, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return set, fmt.Errorf("pg: load %s migrations: %w", component, err)
		}
		if strings.TrimSpace(string(sql)) == "" {
			return set, fmt.Errorf("pg: load %s migrations: %q is empty", component, e.Name())
		}
		set.Migrations = append(set.Migrations, Migration{Version: version, Name: m[2], SQL: string(sql)})
	}
	// fs.ReadDir sorts by name, which is not version order once a version
	// has more digits than another (10000_x sorts before 9999_y).
	slices.SortFunc(set.Migrations, func(a, b Migration) int { return a.Version - b.Version })
	return set, nil
}

// migrateLockKey is the advisory lock Migrate holds while it changes anything.
// It is one key per database, not per schema: migrations may create extensions
// or touch shared objects, and serializing a few startup transactions costs
// nothing.
var migrateLockKey = lockKey("taskmesh/pg.Migrate")

// Migrate creates schema if missing and applies, in order, every migration of
// every set not yet recorded in <schema>.schema_migrations(component, version,
// name, applied_at). Sets are applied in the order given, each set's
// migrations by ascending version.
//
// Each migration runs in its own transaction with `SET LOCAL search_path TO
// <schema>, public` (so migration SQL uses unqualified names) and records
// itself in the same transaction: a failing migration leaves neither partial
// changes nor a record, and Migrate returns its error naming the migration.
// Because of the transaction, statements that refuse to run inside one (CREATE
// INDEX CONCURRENTLY, ALTER TYPE … ADD VALUE before PostgreSQL 12) cannot be
// used.
//
// Concurrent Migrate calls (several replicas starting at once) serialize on
// pg_advisory_xact_lock and re-check what is recorded after taking it, so each
// migration is applied exactly once; running Migrate twice is a no-op.
// Migrations recorded in the database but unknown to the caller are ignored,
// so an older replica still starts after a newer one migrated. A recorded
// version whose name differs from the caller's is an error: two different
// migrations claim the same version.
//
// The schema name must be a valid identifier (see Open); it is quoted with
// pgx.Identifier.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string, sets ...MigrationSet) error {
	if err := validateSchema(schema); err != nil {
		return err
	}
	plan, err := planMigrations(sets)
	if err != nil {
		return err
	}
	qschema := pgx.Identifier{schema}.Sanitize()
	table := qschema + ".schema_migrations"

	// CREATE SCHEMA/TABLE IF NOT EXISTS are not safe against each other when
	// run concurrently (both sessions may pass the existence check and one
	// then fails on a unique index of the catalog), hence the lock here too.
	err = InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
			return err
		}
		// CREATE SCHEMA checks the CREATE privilege on the database even
		// with IF NOT EXISTS, which a service role that merely owns its
		// existing schema lacks; so look first.
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA "+qschema); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
			component  text        NOT NULL,
			version    int         NOT NULL,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (component, version)
		)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("pg: migrate %s: create schema_migrations: %w", schema, err)
	}

	// Recorded migrations are never removed, so what is recorded now is
	// skipped without taking the lock; the rest is re-checked under it.
	applied, err := appliedMigrations(ctx, pool, table)
	if err != nil {
		return fmt.Errorf("pg: migrate %s: %w", schema, err)
	}
	// In order, stopping at the first failure or name mismatch: a later
	// version of a component may depend on an earlier one, so nothing after
	// a failed migration is applied.
	for _, p := range plan {
		key := migrationKey{p.component, p.Version}
		if name, ok := applied[key]; ok {
			if name != p.Name {
				return nameMismatch(schema, p, name)
			}
			continue
		}
		if err := applyMigration(ctx, pool, schema, table, p); err != nil {
			return err
		}
	}
	return nil
}

type migrationKey struct {
	component string
	version   int
}

type plannedMigration struct {
	component string
	Migration
}

func (p plannedMigration) String() string {
	return fmt.Sprintf("%s %04d_%s", p.component, p.Version, p.Name)
}

// planMigrations validates sets built by hand as strictly as LoadMigrations
// validates files, and flattens them into application order.
func planMigrations(sets []MigrationSet) ([]plannedMigration, error) {
	var plan []plannedMigration
	components := map[string]bool{}
	for _, set := range sets {
		if set.Component == "" {
			return nil, errors.New("pg: migrate: migration set with empty component name")
		}
		if components[set.Component] {
			return nil, fmt.Errorf("pg: migrate: component %q given twice", set.Component)
		}
		components[set.Component] = true
		ms := slices.Clone(set.Migrations)
		slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
		for i, m := range ms {
			if m.Version <= 0 {
				return nil, fmt.Errorf("pg: migrate: %s migration %q has version %d, want > 0", set.Component, m.Name, m.Version)
			}
			if i > 0 && ms[i-1].Version == m.Version {
				return nil, fmt.Errorf("pg: migrate: %s has two migrations with version %d", set.Component, m.Version)
			}
			plan = append(plan, plannedMigration{set.Component, m})
		}
	}
	return plan, nil
}

func appliedMigrations(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, table string) (map[migrationKey]string, error) {
	rows, err := db.Query(ctx, "SELECT component, version, name FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	applied := map[migrationKey]string{}
	var k migrationKey
	var name string
	_, err = pgx.ForEachRow(rows, []any{&k.component, &k.version, &name}, func() error {
		applied[k] = name
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	return applied, nil
}

func applyMigration(ctx context.Context, pool *pgxpool.Pool, schema, table string, p plannedMigration) error {
	err := InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
			return err
		}
		// Another replica may have applied it while we waited for the lock.
		var name string
		err := tx.QueryRow(ctx, "SELECT name FROM "+table+" WHERE component = $1 AND version = $2", p.component, p.Version).Scan(&name)
		switch {
		case err == nil:
			if name != p.Name {
				return nameMismatch(schema, p, name)
			}
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		// LOCAL: the search path reverts when the transaction ends, so the
		// pooled connection goes back as it came.
		if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+pgx.Identifier{schema}.Sanitize()+", public"); err != nil {
			return err
		}
		// No arguments: pgx sends the SQL with the simple protocol, which
		// allows several statements in one migration file.
		if _, err := tx.Exec(ctx, p.SQL); err != nil {
			return err
		}
		// Recorded in the migration's own transaction: it is applied and
		// recorded, or neither.
		_, err = tx.Exec(ctx, "INSERT INTO "+table+" (component, version, name) VALUES ($1, $2, $3)", p.component, p.Version, p.Name)
		return err
	})
	if err != nil {
		var mismatch *nameMismatchError
		if errors.As(err, &mismatch) {
			return err
		}
		return fmt.Errorf("pg: migrate %s: %s: %w", schema, p, err)
	}
	return nil
}

type nameMismatchError struct {
	schema   string
	p        plannedMigration
	recorded string
}

func (e *nameMismatchError) Error() string {
	return fmt.Sprintf("pg: migrate %s: %s: version %d of %s is recorded as %q; applied migrations must not be renamed or replaced (add a new version instead)",
		e.schema, e.p, e.p.Version, e.p.component, e.recorded)
}

func nameMismatch(schema string, p plannedMigration, recorded string) error {
	return &nameMismatchError{schema, p, recorded}
}

// lockKey maps a name to a 64-bit advisory lock key with FNV-64a. The hash is
// computed here rather than with PostgreSQL's hashtext, which is only 32 bits
// (collisions become likely with tens of thousands of names) and is not
// guaranteed stable across PostgreSQL major versions.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}
