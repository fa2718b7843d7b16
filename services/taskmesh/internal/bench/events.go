package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/outbox"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
)

// EventsOptions configures the event pipeline benchmark.
type EventsOptions struct {
	Common
	Writers    int           // concurrent writing transactions
	Aggregates int           // aggregates the writers spread over
	Events     int           // events per throughput run
	LagRate    int           // events/s of the lag run
	LagFor     time.Duration // length of the lag run
	PgbenchFor time.Duration // length of each pgbench run
}

func (o *EventsOptions) defaults() {
	o.Common.defaults()
	if o.Writers <= 0 {
		o.Writers = 8
	}
	if o.Aggregates <= 0 {
		o.Aggregates = 10_000
	}
	if o.Events <= 0 {
		o.Events = 40_000
	}
	if o.LagRate <= 0 {
		o.LagRate = 2000
	}
	if o.LagFor <= 0 {
		o.LagFor = 10 * time.Second
	}
	if o.PgbenchFor <= 0 {
		o.PgbenchFor = 10 * time.Second
	}
}

// EventsResult holds the medians of the runs.
type EventsResult struct {
	Batched   float64 // events/s appended, relayed and projected, commands batched
	Appended  float64 // events/s appended (writers alone), commands batched
	BatchSize float64 // mean commands per batched transaction
	SingleTx  float64 // events/s end to end, one transaction per command
	Pgbench   float64 // pgbench -N -M prepared transactions/s, same server
	Ratio     float64 // SingleTx / Pgbench: both one durable commit per command
	LagP50    time.Duration
	LagP99    time.Duration
}

const benchSchema = "bench"

var benchTables = pg.MigrationSet{Component: "bench", Migrations: []pg.Migration{{Version: 1, Name: "counters", SQL: `
	CREATE TABLE counters (id text PRIMARY KEY, value bigint NOT NULL, version bigint NOT NULL) WITH (fillfactor = 70);
	CREATE TABLE counter_views (id text PRIMARY KEY, value bigint NOT NULL, version bigint NOT NULL) WITH (fillfactor = 70);`}}}

// eventsRun is one run's figures.
type eventsRun struct {
	batched, appended, batchSize, single, pgbench float64
	lagP50, lagP99                                time.Duration
}

// Events measures the event pipeline: each of Writers transactions appends
// one event to one of Aggregates aggregates and updates its inline
// projection row; the outbox relay publishes to the embedded broker; a
// projection runner builds counter_views from Kafka. Postgres runs at its
// durable defaults (fsync, synchronous_commit on). Each run measures the
// commands batched (many commands per transaction) and one transaction per
// command, pgbench -N -M prepared on the same server, and the projection
// lag at a fixed rate. The ceiling pgbench gives is one durable commit per
// transaction, so it judges the one-transaction-per-command figure; the
// batched figure is reported beside it in events/s with its batch size.
func Events(ctx context.Context, o EventsOptions) (*EventsResult, error) {
	o.defaults()
	env, err := startEnv(ctx, o.Common, "events", nil)
	if err != nil {
		return nil, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "event pipeline: Postgres %s (durable defaults), embedded Kafka %s\n", env.server.URL(""), env.broker.Addrs()[0])
	p, stop, err := startPipeline(ctx, env, o)
	if err != nil {
		return nil, err
	}
	defer stop()
	pb, err := newPgbench(ctx, env.server, o.Writers)
	if err != nil {
		return nil, err
	}
	var runs []eventsRun
	for range o.Runs {
		r, err := p.run(ctx, o, pb)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return reportEvents(o, runs), nil
}

// startPipeline migrates the benchmark's database and starts the relay,
// the batcher and the projection runner; stop ends them.
func startPipeline(ctx context.Context, env *env, o EventsOptions) (*pipeline, func(), error) {
	pool, err := pg.Open(ctx, pg.Config{URL: env.server.URL("postgres"), Schema: benchSchema, MaxConns: int32(o.Writers + 8)})
	if err != nil {
		return nil, nil, err
	}
	if err := pg.Migrate(ctx, pool, benchSchema, eventstore.Migrations(), projection.Migrations(), benchTables); err != nil {
		pool.Close()
		return nil, nil, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO counters SELECT 'agg-' || g, 0, 0 FROM generate_series(0, $1 - 1) g`, o.Aggregates); err != nil {
		pool.Close()
		return nil, nil, err
	}
	p := &pipeline{pool: pool, store: eventstore.New()}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	p.relay = outbox.New(pool, outbox.Config{Name: "bench", Topic: "bench.events", Partitions: 16, Kafka: env.broker.Config()})
	// One batcher worker: eight closed-loop writers fill one batch at a
	// time better than two half-empty ones (measured: about 15% more).
	p.batcher = pg.NewKeyedBatcher[counter, eventstore.Event](pool, counterStore{}, pg.KeyedBatcherOptions{
		Workers: 1, MaxBatch: maxBatch, AfterCommit: func() { p.batches.Add(1); p.relay.Notify() }})
	runner := projection.NewRunner(pool, projection.Config{Name: "counter_views", Topic: "bench.events", Partitions: 16,
		Kafka: env.broker.Config(), AfterCommit: p.observe}, projection.HandlerFunc(applyCounterViews))
	wg.Add(2)
	go func() { defer wg.Done(); _ = p.relay.Run(runCtx) }()
	go func() { defer wg.Done(); _ = runner.Run(runCtx) }()
	return p, func() { cancel(); wg.Wait(); p.batcher.Close(); pool.Close() }, nil
}

// maxBatch bounds the commands of one batched transaction.
const maxBatch = 256

// run takes every figure once.
func (p *pipeline) run(ctx context.Context, o EventsOptions, pb *pgbench) (eventsRun, error) {
	var r eventsRun
	var err error
	p.grouped = true
	batchesBefore := p.batches.Load()
	if r.batched, r.appended, err = p.throughput(ctx, o); err != nil {
		return r, err
	}
	r.batchSize = float64(o.Events) / float64(p.batches.Load()-batchesBefore)
	p.grouped = false
	if r.single, _, err = p.throughput(ctx, o); err != nil {
		return r, err
	}
	if r.pgbench, err = pb.run(ctx, o.PgbenchFor); err != nil {
		return r, err
	}
	lag, err := p.lagRun(ctx, o)
	if err != nil {
		return r, err
	}
	r.lagP50, r.lagP99 = percentile(lag, 50), percentile(lag, 99)
	return r, nil
}

// reportEvents prints every run and the medians, and returns the medians.
func reportEvents(o EventsOptions, runs []eventsRun) *EventsResult {
	var batched, appended, size, single, tps, ratios, p50s, p99s sample
	var rows [][]string
	for i, r := range runs {
		batched, appended, size = append(batched, r.batched), append(appended, r.appended), append(size, r.batchSize)
		single, tps, ratios = append(single, r.single), append(tps, r.pgbench), append(ratios, r.single/r.pgbench)
		p50s, p99s = append(p50s, float64(r.lagP50)), append(p99s, float64(r.lagP99))
		rows = append(rows, []string{fmt.Sprint(i + 1), perSecond(r.batched), perSecond(r.appended), fmt.Sprintf("%.1f", r.batchSize),
			perSecond(r.single), perSecond(r.pgbench), ratio(r.single / r.pgbench), ms(r.lagP50), ms(r.lagP99)})
	}
	fmt.Fprintf(o.Out, "\n%d writers, each command appends one event and updates its inline projection row; %d events per throughput run;\n", o.Writers, o.Events)
	fmt.Fprintf(o.Out, "batched: concurrent commands share one pipelined transaction (at most %d); single-tx: one transaction per command;\n", maxBatch)
	fmt.Fprintf(o.Out, "end to end: appended, relayed to Kafka and projected; projection lag at %d events/s for %s\n", o.LagRate, o.LagFor)
	table(o.Out, []string{"run", "batched ev/s", "appended ev/s", "commands/batch", "single-tx ev/s", "pgbench -N -M prepared tps",
		"single-tx/pgbench", "lag p50", "lag p99"}, rows)
	r := &EventsResult{Batched: batched.median(), Appended: appended.median(), BatchSize: size.median(), SingleTx: single.median(),
		Pgbench: tps.median(), Ratio: ratios.median(), LagP50: time.Duration(p50s.median()), LagP99: time.Duration(p99s.median())}
	summary(o.Out, len(runs), [][]string{
		{"batched end-to-end events/s", batched.format(perSecond), ">= 5000", verdict(r.Batched >= 5000)},
		{"batched: commands per transaction", size.format(func(x float64) string { return fmt.Sprintf("%.1f", x) }), "", ""},
		{"single-tx end-to-end events/s", single.format(perSecond), "", ""},
		{"pgbench -N -M prepared tps", tps.format(perSecond), "", ""},
		{"single-tx / pgbench (both one commit per command)", ratios.format(ratio), ">= 0.50", verdict(r.Ratio >= 0.5)},
		{"projection lag p50", p50s.format(millis), "", ""},
		{"projection lag p99", p99s.format(millis), "< 250 ms", verdict(r.LagP99 < 250*time.Millisecond)},
	})
	return r
}

// pipeline is the system under test.
type pipeline struct {
	pool    *pgxpool.Pool
	store   *eventstore.Store
	relay   *outbox.Relay
	batcher *pg.KeyedBatcher[counter, eventstore.Event]
	grouped bool // run commands through the set-based batcher

	projected atomic.Int64
	batches   atomic.Int64 // batched transactions committed
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

// lagRun writes at o.LagRate for o.LagFor and returns each event's lag from
// its commit-time timestamp to its projection commit.
func (p *pipeline) lagRun(ctx context.Context, o EventsOptions) ([]time.Duration, error) {
	p.grouped = true
	p.mu.Lock()
	p.lags, p.measure = nil, true
	p.mu.Unlock()
	total := max(1, int64(float64(o.LagRate)*o.LagFor.Seconds()))
	target := p.projected.Load() + total
	interval := time.Second / time.Duration(o.LagRate)
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
