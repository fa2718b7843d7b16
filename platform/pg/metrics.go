package pg

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// observePool exports the pool's statistics (docs/operations.md) under
// pool=name, read from pgxpool at each collection: connections by state,
// the pool's size limit, acquires and the time spent waiting for one. A
// pool that waits a lot for connections is too small for its load.
func observePool(name string, pool *pgxpool.Pool) {
	meter := gotel.Meter("github.com/taskmesh/taskmesh/platform/pg")
	// Instrument errors concern invalid names only; these are constant.
	conns, _ := meter.Int64ObservableGauge("taskmesh.pg.pool.connections",
		metric.WithDescription("Postgres pool connections by state (idle, acquired, constructing)"), metric.WithUnit("{connection}"))
	maxConns, _ := meter.Int64ObservableGauge("taskmesh.pg.pool.max_connections",
		metric.WithDescription("the Postgres pool's size limit"), metric.WithUnit("{connection}"))
	acquires, _ := meter.Int64ObservableCounter("taskmesh.pg.pool.acquires",
		metric.WithDescription("connections acquired from the Postgres pool"), metric.WithUnit("{acquire}"))
	empty, _ := meter.Int64ObservableCounter("taskmesh.pg.pool.empty_acquires",
		metric.WithDescription("acquires that had to wait because no connection was idle"), metric.WithUnit("{acquire}"))
	wait, _ := meter.Float64ObservableCounter("taskmesh.pg.pool.acquire_wait",
		metric.WithDescription("time spent waiting for a Postgres pool connection"), metric.WithUnit("s"))
	p := attribute.String("pool", name)
	set := metric.WithAttributes(p)
	state := func(s string) metric.ObserveOption {
		return metric.WithAttributes(p, attribute.String("state", s))
	}
	_, _ = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := pool.Stat()
		o.ObserveInt64(conns, int64(st.IdleConns()), state("idle"))
		o.ObserveInt64(conns, int64(st.AcquiredConns()), state("acquired"))
		o.ObserveInt64(conns, int64(st.ConstructingConns()), state("constructing"))
		o.ObserveInt64(maxConns, int64(st.MaxConns()), set)
		o.ObserveInt64(acquires, st.AcquireCount(), set)
		o.ObserveInt64(empty, st.EmptyAcquireCount(), set)
		o.ObserveFloat64(wait, st.AcquireDuration().Seconds(), set)
		return nil
	}, conns, maxConns, acquires, empty, wait)
}

// poolName is the pool's label: its application name without the
// "taskmesh-" prefix every service's has.
func poolName(applicationName string) string {
	return strings.TrimPrefix(applicationName, "taskmesh-")
}
