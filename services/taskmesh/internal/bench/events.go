package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/outbox"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
)

// EventsOptions configures the event pipeline benchmark.
type EventsOptions struct {
	Dir        string        // work directory on the disk under test (not tmpfs)
	Runs       int           // repetitions; medians are reported
	Writers    int           // concurrent writing transactions
	Aggregates int           // aggregates the writers spread over
	Events     int           // events per throughput run
	Rate       int           // events/s of the lag run
	LagFor     time.Duration // length of the lag run
	PgbenchFor time.Duration // length of each pgbench run
	Out        io.Writer
}

func (o *EventsOptions) defaults() {
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if o.Writers <= 0 {
		o.Writers = 8
	}
	if o.Aggregates <= 0 {
		o.Aggregates = 10_000
	}
	if o.Events <= 0 {
		o.Events = 40_000
	}
	if o.Rate <= 0 {
		o.Rate = 2000
	}
	if o.LagFor <= 0 {
		o.LagFor = 10 * time.Second
	}
	if o.PgbenchFor <= 0 {
		o.PgbenchFor = 10 * time.Second
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
}

// EventsResult holds the medians.
type EventsResult struct {
	EndToEnd   float64 // events/s appended, relayed and projected
	Appended   float64 // events/s appended (writers alone)
	SingleTx   float64 // end-to-end events/s with one transaction per command
	Pgbench    float64 // pgbench -N tps, same server
	LagP50     time.Duration
	LagP99     time.Duration
	Ratio      float64 // EndToEnd / Pgbench
	TargetsMet bool
}

const benchSchema = "bench"

var benchTables = pg.MigrationSet{Component: "bench", Migrations: []pg.Migration{{Version: 1, Name: "counters", SQL: `
	CREATE TABLE counters (id text PRIMARY KEY, value bigint NOT NULL, version bigint NOT NULL) WITH (fillfactor = 70);
	CREATE TABLE counter_views (id text PRIMARY KEY, value bigint NOT NULL, version bigint NOT NULL) WITH (fillfactor = 70);`}}}

// Events measures the event pipeline: each of Writers transactions appends
// one event to one of Aggregates aggregates and updates its inline
// projection row; the outbox relay publishes to the embedded broker; a
// projection runner builds counter_views from Kafka. Postgres runs at its
// durable defaults (fsync, synchronous_commit on). pgbench -N on the same
// server, interleaved with the runs, gives the ceiling.
func Events(ctx context.Context, o EventsOptions) (*EventsResult, error) {
	o.defaults()
	env, err := startEnv(ctx, o.Dir, "events")
	if err != nil {
		return nil, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "event pipeline: Postgres %s (durable defaults), embedded Kafka %s\n", env.server.URL(""), env.broker.Addrs()[0])

	pool, err := pg.Open(ctx, pg.Config{URL: env.server.URL("postgres"), Schema: benchSchema, MaxConns: int32(o.Writers + 8)})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := pg.Migrate(ctx, pool, benchSchema, eventstore.Migrations(), projection.Migrations(), benchTables); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO counters SELECT 'agg-' || g, 0, 0 FROM generate_series(0, $1 - 1) g`, o.Aggregates); err != nil {
		return nil, err
	}

	p := &pipeline{pool: pool, store: eventstore.New()}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	p.relay = outbox.New(pool, outbox.Config{Name: "bench", Topic: "bench.events", Partitions: 16, Kafka: env.broker.Config()})
	// One batcher worker: eight closed-loop writers fill one batch at a
	// time better than two half-empty ones (measured: about 15% more).
	p.batcher = pg.NewKeyedBatcher[counter, eventstore.Event](pool, counterStore{}, pg.KeyedBatcherOptions{
		Workers: 1, MaxBatch: 256, AfterCommit: p.relay.Notify})
	defer p.batcher.Close()
	runner := projection.NewRunner(pool, projection.Config{Name: "counter_views", Topic: "bench.events", Partitions: 16,
		Kafka: env.broker.Config(), AfterCommit: p.observe}, projection.HandlerFunc(applyCounterViews))
	wg.Add(2)
	go func() { defer wg.Done(); _ = p.relay.Run(runCtx) }()
	go func() { defer wg.Done(); _ = runner.Run(runCtx) }()

	pb, err := newPgbench(ctx, env.server, o.Writers)
	if err != nil {
		return nil, err
	}

	var endToEnd, appended, single, tps []float64
	var rows [][]string
	for run := 1; run <= o.Runs; run++ {
		p.grouped = true
		e2e, app, err := p.throughput(ctx, o)
		if err != nil {
			return nil, err
		}
		p.grouped = false
		one, _, err := p.throughput(ctx, o)
		if err != nil {
			return nil, err
		}
		t, err := pb.run(ctx, o.PgbenchFor)
		if err != nil {
			return nil, err
		}
		endToEnd, appended, single, tps = append(endToEnd, e2e), append(appended, app), append(single, one), append(tps, t)
		rows = append(rows, []string{fmt.Sprint(run), fmt.Sprintf("%.0f", e2e), fmt.Sprintf("%.0f", app),
			fmt.Sprintf("%.0f", one), fmt.Sprintf("%.0f", t), fmt.Sprintf("%.2f", e2e/t)})
	}
	fmt.Fprintf(o.Out, "\nthroughput: %d writers, each command appends one event and updates its inline projection row; %d events per run\n", o.Writers, o.Events)
	fmt.Fprintf(o.Out, "(end-to-end: concurrent commands batched set-based, one pipelined transaction per batch; single-tx: one transaction per command)\n")
	table(o.Out, []string{"run", "end-to-end ev/s", "appended ev/s", "single-tx end-to-end ev/s", "pgbench -N tps", "ratio"}, rows)

	lag, err := p.lagRun(ctx, o)
	if err != nil {
		return nil, err
	}
	r := &EventsResult{EndToEnd: median(endToEnd), Appended: median(appended), SingleTx: median(single), Pgbench: median(tps),
		LagP50: percentile(lag, 50), LagP99: percentile(lag, 99)}
	r.Ratio = r.EndToEnd / r.Pgbench
	r.TargetsMet = r.EndToEnd >= 5000 && r.Ratio >= 0.5 && r.LagP99 < 250*time.Millisecond
	fmt.Fprintf(o.Out, "\nprojection lag at %d events/s for %s (%d events): p50 %s, p99 %s\n", o.Rate, o.LagFor, len(lag), ms(r.LagP50), ms(r.LagP99))
	fmt.Fprintf(o.Out, "\nmedians of %d runs\n", o.Runs)
	table(o.Out, []string{"measure", "value", "target", "verdict"}, [][]string{
		{"end-to-end events/s", fmt.Sprintf("%.0f", r.EndToEnd), ">= 5000", verdict(r.EndToEnd >= 5000)},
		{"ratio to pgbench -N", fmt.Sprintf("%.2f (pgbench %.0f tps)", r.Ratio, r.Pgbench), ">= 0.50", verdict(r.Ratio >= 0.5)},
		{"one tx per command", fmt.Sprintf("%.0f (%.2f of pgbench)", r.SingleTx, r.SingleTx/r.Pgbench), "", ""},
		{"projection lag p50", ms(r.LagP50), "", ""},
		{"projection lag p99", ms(r.LagP99), "< 250 ms", verdict(r.LagP99 < 250*time.Millisecond)},
	})
	return r, nil
}

// pipeline is the system under test.
type pipeline struct {
	pool    *pgxpool.Pool
	store   *eventstore.Store
	relay   *outbox.Relay
	batcher *pg.KeyedBatcher[counter, eventstore.Event]
	grouped bool // run commands through the set-based batcher

	projected atomic.Int64
	mu        sync.Mutex
	lags      []time.Duration
	measure   bool
}

// observe is the projection runner's AfterCommit hook.
func (p *pipeline) observe(records []*kgo.Record) {
	now := time.Now()
	p.mu.Lock()
	if p.measure {
		for _, r := range records {
			p.lags = append(p.lags, now.Sub(r.Timestamp))
		}
	}
	p.mu.Unlock()
	p.projected.Add(int64(len(records)))
}

// write is one command: bump the inline row, append its event, commit.
func (p *pipeline) write(ctx context.Context, agg string) error {
	cmd := func(ctx context.Context, tx pgx.Tx) error {
		var value, version int64
		if err := tx.QueryRow(ctx, `UPDATE counters SET value = value + 1, version = version + 1
			WHERE id = $1 RETURNING value, version`, agg).Scan(&value, &version); err != nil {
			return err
		}
		ev, err := counterEvent(agg, counter{value: value, version: version})
		if err != nil {
			return err
		}
		return p.store.Append(ctx, tx, ev)
	}
	if p.grouped {
		_, err := p.batcher.Do(ctx, agg, func(c counter, found bool) (counter, []eventstore.Event, error) {
			if !found {
				return c, nil, fmt.Errorf("no counter %s", agg)
			}
			c.value++
			c.version++
			ev, err := counterEvent(agg, c)
			return c, []eventstore.Event{ev}, err
		})
		return err
	}
	err := pg.InTx(ctx, p.pool, pgx.TxOptions{}, func(tx pgx.Tx) error { return cmd(ctx, tx) })
	if err == nil {
		p.relay.Notify()
	}
	return err
}

// counter is the inline projection row of one benchmark aggregate.
type counter struct{ value, version int64 }

// counterEvent records c's new value as a task-progress envelope.
func counterEvent(agg string, c counter) (eventstore.Event, error) {
	now := time.Now()
	env := &taskv1.TaskEvent{EventId: uuid.NewString(), AggregateId: agg, Version: c.version,
		OccurredAt: timestamppb.New(now), TenantId: "bench",
		Event: &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{Progress: int32(c.value)}}}
	payload, err := proto.Marshal(env)
	if err != nil {
		return eventstore.Event{}, err
	}
	return eventstore.Event{AggregateType: "counter", AggregateID: agg, Version: c.version,
		Type: "TaskProgressed", EventID: env.EventId, TenantID: "bench", OccurredAt: now, Payload: payload}, nil
}

// counterStore is the pg.KeyedStore of counters: a batch locks its
// counters with one query and writes their events and rows with one
// statement each.
type counterStore struct{}

func (counterStore) Lock(ids []string) (string, []any, func(pgx.Rows) (map[string]counter, error)) {
	return `SELECT id, value, version FROM counters WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, []any{ids},
		func(rows pgx.Rows) (map[string]counter, error) {
			out := map[string]counter{}
			var (
				id string
				c  counter
			)
			_, err := pgx.ForEachRow(rows, []any{&id, &c.value, &c.version}, func() error { out[id] = c; return nil })
			return out, err
		}
}

func (counterStore) Queue(b *pgx.Batch, changes []pg.KeyedChange[counter, eventstore.Event]) (func(error) error, error) {
	var evs []eventstore.Event
	ids := make([]string, len(changes))
	values, versions := make([]int64, len(changes)), make([]int64, len(changes))
	for i, c := range changes {
		evs = append(evs, c.Events...)
		ids[i], values[i], versions[i] = c.Key, c.After.value, c.After.version
	}
	if err := eventstore.New().QueueAppend(b, evs...); err != nil {
		return nil, err
	}
	b.Queue(`UPDATE counters c SET value = x.v, version = x.ve FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS x(id, v, ve)
		WHERE c.id = x.id`, ids, values, versions)
	return func(err error) error { return eventstore.AppendError(err, evs) }, nil
}

// throughput appends o.Events events as fast as o.Writers transactions can
// and returns end-to-end and append-only rates.
func (p *pipeline) throughput(ctx context.Context, o EventsOptions) (endToEnd, appended float64, err error) {
	target := p.projected.Load() + int64(o.Events)
	var next atomic.Int64
	start := time.Now()
	if err := p.writers(ctx, o.Writers, o.Aggregates, func() bool { return next.Add(1) <= int64(o.Events) }); err != nil {
		return 0, 0, err
	}
	appendedIn := time.Since(start)
	if err := p.waitProjected(ctx, target); err != nil {
		return 0, 0, err
	}
	total := time.Since(start)
	return float64(o.Events) / total.Seconds(), float64(o.Events) / appendedIn.Seconds(), nil
}

// lagRun writes at o.Rate for o.LagFor and returns each event's lag from
// its commit-time timestamp to its projection commit.
func (p *pipeline) lagRun(ctx context.Context, o EventsOptions) ([]time.Duration, error) {
	p.grouped = true
	p.mu.Lock()
	p.lags, p.measure = nil, true
	p.mu.Unlock()
	total := int64(o.Rate) * int64(o.LagFor/time.Second)
	target := p.projected.Load() + total
	interval := time.Second / time.Duration(o.Rate)
	start := time.Now()
	var issued atomic.Int64
	err := p.writers(ctx, o.Writers, o.Aggregates, func() bool {
		n := issued.Add(1)
		if n > total {
			return false
		}
		if wait := time.Until(start.Add(time.Duration(n) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if err := p.waitProjected(ctx, target); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.measure = false
	return p.lags, nil
}

// writers runs n writers until more returns false.
func (p *pipeline) writers(ctx context.Context, n, aggregates int, more func() bool) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, seed*31))
			for more() {
				if err := p.write(ctx, fmt.Sprintf("agg-%d", rng.IntN(aggregates))); err != nil {
					errs <- err
					return
				}
			}
		}(uint64(time.Now().UnixNano()) + uint64(i))
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (p *pipeline) waitProjected(ctx context.Context, target int64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for p.projected.Load() < target {
		if time.Now().After(deadline) {
			return fmt.Errorf("projection stuck at %d of %d records", p.projected.Load(), target)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// applyCounterViews projects a batch with one statement: the newest version
// of each counter wins, older or repeated versions are ignored.
func applyCounterViews(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	ids := make([]string, 0, len(records))
	values := make([]int64, 0, len(records))
	versions := make([]int64, 0, len(records))
	for _, r := range records {
		var env taskv1.TaskEvent
		if err := proto.Unmarshal(r.Value, &env); err != nil {
			return err
		}
		ids = append(ids, env.GetAggregateId())
		values = append(values, int64(env.GetProgressed().GetProgress()))
		versions = append(versions, env.GetVersion())
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO counter_views (id, value, version)
		SELECT DISTINCT ON (id) id, value, version
		FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS x(id, value, version)
		ORDER BY id, version DESC
		ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version
		WHERE counter_views.version < EXCLUDED.version`, ids, values, versions)
	return err
}

// env is a durable Postgres server and an embedded broker under dir.
type env struct {
	server *pg.LocalServer
	broker *kafka.Embedded
	dir    string
	lock   *os.File // held while the benchmark runs
}

func startEnv(ctx context.Context, dir, name string) (*env, error) {
	if dir == "" {
		dir = filepath.Join(".taskmesh", "bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Two benchmarks in one work directory would delete each other's
	// servers: hold a lock on it for the whole run.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("another benchmark is running in %s (pass --dir to use another directory)", dir)
	}
	dir = filepath.Join(dir, name)
	if err := os.RemoveAll(dir); err != nil {
		lock.Close()
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		lock.Close()
		return nil, err
	}
	params := map[string]string{"max_connections": "300", "shared_preload_libraries": "pg_stat_statements,auto_explain",
		"pg_stat_statements.track": "all", "pg_stat_statements.track_planning": "on"}
	// TASKMESH_BENCH_EXPLAIN_MS=n logs the plans of statements slower than
	// n ms to the server log (auto_explain), for tuning.
	if ms := os.Getenv("TASKMESH_BENCH_EXPLAIN_MS"); ms != "" {
		params["auto_explain.log_min_duration"] = ms
		params["auto_explain.log_analyze"] = "on"
		params["auto_explain.log_buffers"] = "on"
		params["auto_explain.log_nested_statements"] = "on"
	}
	server := &pg.LocalServer{DataDir: filepath.Join(dir, "pg"), Durable: true, Params: params}
	if err := server.Start(ctx); err != nil {
		lock.Close()
		return nil, err
	}
	broker, err := kafka.StartEmbedded(kafka.EmbeddedOptions{Partitions: 16})
	if err != nil {
		_ = server.Stop()
		lock.Close()
		return nil, err
	}
	return &env{server: server, broker: broker, dir: dir, lock: lock}, nil
}

func (e *env) close() {
	e.broker.Close()
	_ = e.server.Stop()
	_ = os.RemoveAll(e.dir)
	e.lock.Close()
}
