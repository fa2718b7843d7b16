package pg

import (
	"context"
	"fmt"
	"regexp"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config describes a connection pool.
type Config struct {
	URL      string // postgres://…
	Schema   string // the service's schema; the pool's search_path is "<Schema>, public". Empty = public.
	MaxConns int32  // 0 = pgxpool default
	// ApplicationName names the connections in pg_stat_activity and,
	// without its "taskmesh-" prefix, the pool in the pool metrics
	// (taskmesh_pg_pool_*{pool="scheduler"}); a pool without one exports
	// none.
	ApplicationName string
}

// Open returns a pool (with the otelpgx tracer installed so queries become
// spans, children of the span in the query's context; otelpgx records nothing
// outside a recording span) whose connections use cfg.Schema first in
// search_path. The tracer reports to the global TracerProvider and
// MeterProvider (otel.SetTracerProvider). The path is
// sent as a startup parameter (RuntimeParams) rather than set per query, so it
// holds for every connection the pool ever opens, including ones replaced after
// a failure, and costs no round trip.
//
// Open pings before returning, so a wrong URL, password or unreachable server
// is reported here rather than on the first query. The schema does not have to
// exist yet (Migrate creates it); until it does, PostgreSQL skips it in the
// search_path and unqualified names resolve in public.
func Open(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// ParseConfig's error can echo the URL; it is the caller's own input.
		return nil, fmt.Errorf("pg: parse URL: %w", err)
	}
	searchPath := "public"
	if cfg.Schema != "" {
		if err := validateSchema(cfg.Schema); err != nil {
			return nil, err
		}
		searchPath = pgx.Identifier{cfg.Schema}.Sanitize() + ", public"
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = searchPath
	// Taskmesh's queries are short OLTP statements. Their generic plans can
	// carry pessimistic cost estimates (a claim scanning for rows that match
	// many parameters looks like a full scan), which makes PostgreSQL
	// JIT-compile them: 100–600 ms of compilation for a 1 ms query. A URL
	// that sets jit (options=-c jit=on) wins over this default.
	//
	// For the same reason every execution gets a custom plan: a generic plan
	// made while a queue table was nearly empty (a fresh deployment, a
	// benchmark) keeps its sequential scans long after the table grew,
	// because nothing re-plans it until the table is analyzed. Taskmesh
	// batches its writes, so planning happens per batch, not per command.
	// A statement whose generic plan is the same at every table size may
	// ask for it for itself, as the claim does
	// (docs/decisions/0089-the-claim-runs-on-its-generic-plan.md), and so
	// may keyed statements, with sequential scans disabled (QueueKeyedPlans;
	// for read-model writers' transactions ReadModelTx, for a relay's
	// connection KeyedSession).
	for param, value := range map[string]string{"jit": "off", "plan_cache_mode": "force_custom_plan"} {
		if _, set := pcfg.ConnConfig.RuntimeParams[param]; !set {
			pcfg.ConnConfig.RuntimeParams[param] = value
		}
	}
	if cfg.ApplicationName != "" {
		pcfg.ConnConfig.RuntimeParams["application_name"] = cfg.ApplicationName
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	pcfg.ConnConfig.Tracer = otelpgx.NewTracer()

	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("pg: create pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pg: ping %s:%d/%s: %w", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, pcfg.ConnConfig.Database, err)
	}
	// Only a named pool is a service's: tools and tests open unnamed ones,
	// and their short lives would leave callbacks behind.
	if cfg.ApplicationName != "" {
		observePool(poolName(cfg.ApplicationName), pool)
	}
	return pool, nil
}

// schemaPattern is deliberately stricter than what PostgreSQL accepts as a
// quoted identifier: lower case so that the quoted name used here and the
// unquoted name a migration or a psql user types denote the same schema, at
// most 63 bytes so PostgreSQL does not silently truncate it, and no "pg_"
// prefix, which PostgreSQL reserves for system schemas.
var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func validateSchema(schema string) error {
	if !schemaPattern.MatchString(schema) || len(schema) >= 3 && schema[:3] == "pg_" {
		return fmt.Errorf("pg: invalid schema name %q: want 1-63 characters of a-z, 0-9 and _, not starting with a digit or pg_", schema)
	}
	return nil
}
