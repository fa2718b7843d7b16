package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/pgstats"
)

// ScaleOptions configures the history benchmark.
type ScaleOptions struct {
	Common
	Finished int // finished tasks of the loaded history
	Pending  int // pending tasks of the loaded history (a pool no agent here serves)
	Tenants  int
	Rate     int           // submissions/s of the measured load
	For      time.Duration // length of each measured phase
	// ListEvery is how often each of the two listings is requested
	// during the measured load.
	ListEvery time.Duration
	// Workloads is the admission measurement's size (bench admission's
	// --workloads); AdmissionHistory the finished workloads the loaded
	// admission layer holds.
	Workloads, AdmissionHistory int
}

func (o *ScaleOptions) defaults() {
	o.Common.defaults()
	if o.Finished <= 0 {
		o.Finished = 1_000_000
	}
	if o.Pending <= 0 {
		o.Pending = 100_000
	}
	if o.Tenants <= 0 {
		o.Tenants = 40
	}
	if o.Rate <= 0 {
		o.Rate = 500
	}
	if o.For <= 0 {
		o.For = 20 * time.Second
	}
	if o.ListEvery <= 0 {
		o.ListEvery = 100 * time.Millisecond
	}
	if o.Workloads <= 0 {
		o.Workloads = 10_000
	}
	if o.AdmissionHistory <= 0 {
		// The share of tasks that asked for GPUs through a ClusterQueue.
		o.AdmissionHistory = o.Finished / 5
	}
}

// ScaleResult holds the medians of the runs, loaded and empty, and of the
// runs' loaded/empty ratios.
type ScaleResult struct {
	Load   time.Duration // loading the history (events, rows, relay, statistics)
	Ratios map[string]float64
}

// scaleFigures are one measurement of one database.
type scaleFigures struct {
	StartP99, ClaimP99, ListP99, FilteredP99, LagP99 time.Duration
	Admissions                                       float64 // decisions/s
	Achieved                                         float64 // submissions/s reached
}

// scaleTenant submits the measured tasks and lists them: the tenant with
// the most history.
var scaleTenant = scheduler.HistoryTenant(0)

// The listings measured: the first page of the tenant's tasks, and a
// filtered one a user asks for while work runs (running tasks of the
// default priority), which in a month of history has few matches among
// many rows.
const (
	listFirstPage = "/api/v1/tasks?page_size=50"
	listFiltered  = "/api/v1/tasks?status=running&priority=5&page_size=50"
)

// Scale measures what a month of history costs. It loads Finished
// finished and Pending pending tasks into one database
// (scheduler.LoadHistory: the scheduler's own write path and the
// projection's fold, spread over 30 days and Tenants tenants; the
// relay publishes them and the projection starts at their end), and a
// finished admission history into its admission schema; a second
// database stays empty. Each run measures both, in alternating order,
// under the same open-loop load: submit → start p99, claim p99, the
// first page and a filtered page of GET /api/v1/tasks through the
// gateway (p99), the task_views projection's lag (p99, commit to commit)
// and the admission layer's decisions/s; and prints loaded/empty ratios.
//
// The backlog's pending tasks need labels (scheduler.BacklogLabels) the
// measuring agents lack: they stand for a pool whose machines are busy or
// gone, so the measured tasks never queue behind them — what is measured
// is the cost of their presence (claims must not walk past them), not
// the wait a FIFO queue 100,000 deep would add.
func Scale(ctx context.Context, o ScaleOptions) (*ScaleResult, error) {
	o.defaults()
	env, err := startEnv(ctx, o.Common, "scale", map[string]string{"track_commit_timestamp": "on"})
	if err != nil {
		return nil, err
	}
	defer env.close()
	fmt.Fprintf(o.Out, "scale: Postgres %s (durable defaults), embedded Kafka %s\n", env.server.URL(""), env.broker.Addrs()[0])
	res := &ScaleResult{Ratios: map[string]float64{}}
	if res.Load, err = loadScaleHistory(ctx, env, o); err != nil {
		return nil, err
	}
	if err := env.createDatabase(ctx, "empty"); err != nil {
		return nil, err
	}
	var loaded, empty []scaleFigures
	for run := 1; run <= o.Runs; run++ {
		order := []string{"loaded", "empty"}
		if run%2 == 0 {
			order = []string{"empty", "loaded"}
		}
		for _, db := range order {
			f, err := scaleOnce(ctx, env, o, db, run)
			if err != nil {
				return nil, fmt.Errorf("run %d, %s database: %w", run, db, err)
			}
			fmt.Fprintf(o.Out, "run %d %-6s: submit→start p99 %s, claim p99 %s, list p99 %s, filtered p99 %s, projection lag p99 %s, admissions/s %s (submitted/s %s)\n",
				run, db, ms(f.StartP99), ms(f.ClaimP99), ms(f.ListP99), ms(f.FilteredP99), ms(f.LagP99), perSecond(f.Admissions), perSecond(f.Achieved))
			if db == "loaded" {
				loaded = append(loaded, f)
			} else {
				empty = append(empty, f)
			}
		}
	}
	reportScale(o, res, loaded, empty)
	return res, nil
}

// loadScaleHistory fills database "loaded" and returns how long it took.
func loadScaleHistory(ctx context.Context, env *env, o ScaleOptions) (time.Duration, error) {
	began := time.Now()
	if err := env.createDatabase(ctx, "loaded"); err != nil {
		return 0, err
	}
	pool, err := pg.Open(ctx, pg.Config{URL: env.server.URL("loaded"), Schema: scheduler.Schema, MaxConns: 8})
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	if err := pg.Migrate(ctx, pool, scheduler.Schema, scheduler.Migrations()...); err != nil {
		return 0, err
	}
	total := o.Finished + o.Pending
	step := max(1, total/10)
	var mu sync.Mutex
	shown := 0
	rep, err := scheduler.LoadHistory(ctx, pool, scheduler.HistorySpec{Finished: o.Finished, Pending: o.Pending, Tenants: o.Tenants,
		Seed: 1, Progress: func(stored int) {
			mu.Lock()
			defer mu.Unlock()
			if stored/step > shown/step || stored == total {
				shown = stored
				fmt.Fprintf(o.Out, "  loaded %d of %d tasks (%s)\n", stored, total, time.Since(began).Round(time.Second))
			}
		}})
	if err != nil {
		return 0, err
	}
	written := time.Since(began)
	if err := scheduler.PublishHistory(ctx, pool, env.broker.Config(), "bench.loaded", 16, env.log.With("database", "loaded")); err != nil {
		return 0, err
	}
	published := time.Since(began)
	// A database that has run for a month has been vacuumed and analyzed
	// by autovacuum; a bulk load has not yet.
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return 0, err
	}
	vacuumed := time.Since(began)
	admitted, err := loadAdmissionHistory(ctx, env, "loaded", o.AdmissionHistory)
	if err != nil {
		return 0, err
	}
	took := time.Since(began)
	var size string
	if err := pool.QueryRow(ctx, `SELECT pg_size_pretty(pg_database_size(current_database()))`).Scan(&size); err != nil {
		return 0, err
	}
	fmt.Fprintf(o.Out, "history: %d tasks (%d finished, %d pending, %d of them %s's), %d events, %d finished admission workloads; %s in the database\n",
		rep.Tasks, o.Finished, o.Pending, rep.PerTenant[scaleTenant], scaleTenant, rep.Events, admitted, size)
	fmt.Fprintf(o.Out, "load time %s: rows written %s, relayed to Kafka %s, vacuum and analyze %s, admission history %s (%.0f tasks/s overall)\n",
		took.Round(time.Second), written.Round(time.Second), (published - written).Round(time.Second), (vacuumed - published).Round(time.Second),
		(took - vacuumed).Round(time.Second), float64(rep.Tasks)/took.Seconds())
	return took, nil
}

// scaleOnce measures one database under the load.
func scaleOnce(ctx context.Context, env *env, o ScaleOptions, db string, run int) (scaleFigures, error) {
	var f scaleFigures
	s, err := openScheduler(ctx, env, db, "bench."+db, scheduler.Timing{})
	if err != nil {
		return f, err
	}
	defer s.stop()
	base, key, stopGateway, err := scaleGateway(ctx, env, s, db)
	if err != nil {
		return f, err
	}
	defer stopGateway()

	// --pg-stats: the statements of the first run's loaded measurement.
	stats := o.PGStats && db == "loaded" && run == 1
	if stats {
		if err := pgstats.Reset(ctx, s.pool); err != nil {
			return f, err
		}
	}
	tr := newStartTracker(scaleTenant)
	actx, cancelAgents := context.WithCancel(ctx)
	var agents sync.WaitGroup
	for a := range startAgents {
		agents.Add(1)
		go func() { defer agents.Done(); tr.agent(actx, s, fmt.Sprintf("scale-agent-%d", a)) }()
	}
	stopAgents := func() { cancelAgents(); agents.Wait() }
	defer stopAgents()

	// The listings run beside the load, each every ListEvery.
	client := &http.Client{}
	defer client.CloseIdleConnections()
	lctx, stopLists := context.WithCancel(ctx)
	var lists sync.WaitGroup
	var listMu sync.Mutex
	latencies := map[string][]time.Duration{}
	var listErr error
	for _, path := range []string{listFirstPage, listFiltered} {
		lists.Add(1)
		go func() {
			defer lists.Done()
			tick := time.NewTicker(o.ListEvery)
			defer tick.Stop()
			for {
				select {
				case <-lctx.Done():
					return
				case <-tick.C:
				}
				began := time.Now()
				err := restCall(lctx, client, http.MethodGet, base+path, key, nil, nil)
				took := time.Since(began)
				listMu.Lock()
				if err != nil && lctx.Err() == nil && listErr == nil {
					listErr = err
				}
				if err == nil {
					latencies[path] = append(latencies[path], took)
				}
				listMu.Unlock()
			}
		}()
	}
	total := max(1, int(float64(o.Rate)*o.For.Seconds()))
	f.Achieved = tr.generate(ctx, s, total, o.Rate)
	stopLists()
	lists.Wait()
	if listErr != nil {
		return f, fmt.Errorf("list: %w", listErr)
	}
	// Until every task completed, not only started: the projection lag
	// is measured to each task's completion.
	deadline := time.Now().Add(time.Minute)
	for !tr.done() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stopAgents()
	tr.mu.Lock()
	failures, firstErr, submitted, started, completed := tr.failures, tr.firstErr, len(tr.submitted), len(tr.started), tr.completed
	ids := make([]string, 0, len(tr.submitted))
	for id := range tr.submitted {
		ids = append(ids, id)
	}
	f.StartP99, f.ClaimP99 = percentile(tr.lat, 99), percentile(tr.claims, 99)
	tr.mu.Unlock()
	if failures > 0 {
		return f, fmt.Errorf("%d failed calls (first: %v)", failures, firstErr)
	}
	if submitted < total || completed < submitted {
		return f, fmt.Errorf("%d of %d submissions answered, %d of them started and %d completed within a minute",
			submitted, total, started, completed)
	}
	f.ListP99, f.FilteredP99 = percentile(latencies[listFirstPage], 99), percentile(latencies[listFiltered], 99)
	if f.LagP99, err = projectionLag(ctx, s.pool, ids); err != nil {
		return f, err
	}
	if stats {
		fmt.Fprintf(o.Out, "\nrun %d, loaded database, the measured load:", run)
		if err := pgstats.Print(ctx, s.pool, o.Out); err != nil {
			return f, err
		}
	}
	f.Admissions, err = scaleAdmission(ctx, env, o, db, run)
	return f, err
}

// scaleGateway starts a gateway beside s (in-process calls, as `taskmesh
// dev` runs it) on db's gateway schema and returns its address and an
// API key of scaleTenant, made on the first call for db.
func scaleGateway(ctx context.Context, env *env, s *schedulerUnderTest, db string) (string, string, func(), error) {
	gpool, err := pg.Open(ctx, pg.Config{URL: env.server.URL(db), Schema: "gateway", MaxConns: 16})
	if err != nil {
		return "", "", nil, err
	}
	if err := pg.Migrate(ctx, gpool, "gateway", gateway.Migrations()...); err != nil {
		gpool.Close()
		return "", "", nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	g, err := gateway.New(runCtx, gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", SchedulerTarget: s.addr,
		SchedulerLocal: s.local, InternalToken: benchToken, DB: gpool, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		cancel()
		gpool.Close()
		return "", "", nil, err
	}
	var done sync.WaitGroup
	done.Add(1)
	go func() { defer done.Done(); _ = g.Run(runCtx) }()
	stop := func() { cancel(); done.Wait(); gpool.Close() }
	key, err := scaleKey(ctx, gpool, g.Credentials())
	if err != nil {
		stop()
		return "", "", nil, err
	}
	return "http://" + g.HTTPAddr(), key, stop, nil
}

// scaleKey returns an API key of scaleTenant, adding the tenant (with
// limits the load never reaches) and the key when the schema has none.
func scaleKey(ctx context.Context, gpool *pgxpool.Pool, creds *gateway.Credentials) (string, error) {
	var db string
	if err := gpool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		return "", err
	}
	if k, ok := keyOf[db]; ok {
		return k, nil
	}
	if _, err := creds.AddTenant(ctx, gateway.TenantSpec{ID: scaleTenant, Name: scaleTenant, Tier: gateway.TierPremium,
		Limits: gateway.Limits{RPM: gateway.MaxLimit, TPM: gateway.MaxLimit}}); err != nil {
		return "", err
	}
	_, key, err := creds.CreateAPIKey(ctx, scaleTenant, "bench", nil)
	if err != nil {
		return "", err
	}
	keyOf[db] = key
	return key, nil
}

// keyOf is the API key made in each database (a key's secret is shown
// only when it is made).
var keyOf = map[string]string{}

// projectionLag is the p99 over the tasks ids of the time from the commit
// of a task's last event to the commit of the task_views row showing it
// (the server runs with track_commit_timestamp), once every one is shown
// completed.
func projectionLag(ctx context.Context, pool *pgxpool.Pool, ids []string) (time.Duration, error) {
	// Generous: a projection minutes behind is a figure to report, not a
	// failed run.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM task_views WHERE id = ANY($1) AND status = 'completed'`, ids).Scan(&n); err != nil {
			return 0, err
		}
		if n == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("projection: %d of %d measured tasks shown completed after five minutes", n, len(ids))
		}
		time.Sleep(50 * time.Millisecond)
	}
	rows, err := pool.Query(ctx, `
		SELECT (extract(epoch FROM pg_xact_commit_timestamp(v.xmin) - pg_xact_commit_timestamp(e.xmin)) * 1e6)::bigint
		FROM task_views v JOIN events e ON e.aggregate_id = v.id AND e.version = v.version
		WHERE v.id = ANY($1)`, ids)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var lags []time.Duration
	for rows.Next() {
		var us *int64
		if err := rows.Scan(&us); err != nil {
			return 0, err
		}
		if us == nil {
			return 0, fmt.Errorf("projection lag: no commit timestamp (is track_commit_timestamp on?)")
		}
		lags = append(lags, time.Duration(*us)*time.Microsecond)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return percentile(lags, 99), nil
}

// reportScale prints the medians of both databases and of the runs'
// loaded/empty ratios against the target.
func reportScale(o ScaleOptions, res *ScaleResult, loaded, empty []scaleFigures) {
	type measure struct {
		name string
		of   func(scaleFigures) float64
		unit func(float64) string
		// higherBetter: the ratio judged is empty/loaded (a rate).
		higherBetter bool
	}
	dur := func(d func(scaleFigures) time.Duration) func(scaleFigures) float64 {
		return func(f scaleFigures) float64 { return float64(d(f)) }
	}
	measures := []measure{
		{"submit → start p99", dur(func(f scaleFigures) time.Duration { return f.StartP99 }), millis, false},
		{"claim p99", dur(func(f scaleFigures) time.Duration { return f.ClaimP99 }), millis, false},
		{"GET /api/v1/tasks first page p99", dur(func(f scaleFigures) time.Duration { return f.ListP99 }), millis, false},
		{"GET /api/v1/tasks?status=running&priority=5 p99", dur(func(f scaleFigures) time.Duration { return f.FilteredP99 }), millis, false},
		{"projection lag p99", dur(func(f scaleFigures) time.Duration { return f.LagP99 }), millis, false},
		{"admission decisions/s", func(f scaleFigures) float64 { return f.Admissions }, perSecond, true},
	}
	fmt.Fprintf(o.Out, "\nloaded: %d finished and %d pending tasks over 30 days, %d tenants; empty: a fresh database. Load: %d submissions/s for %s as %s,\n",
		o.Finished, o.Pending, o.Tenants, o.Rate, o.For, scaleTenant)
	fmt.Fprintf(o.Out, "%d long-polling agents without labels; the backlog needs labels %v, so it waits for a pool these agents are not (see docs/operations.md)\n",
		startAgents, scheduler.BacklogLabels)
	fmt.Fprintf(o.Out, "claim: from the later of the claim sent and its newest task created to the answer; lag: event commit → task_views commit\n")
	var rows [][]string
	ok := true
	for _, m := range measures {
		var l, e, r sample
		for i := range loaded {
			lv, ev := m.of(loaded[i]), m.of(empty[i])
			l, e = append(l, lv), append(e, ev)
			if m.higherBetter {
				r = append(r, ev/lv) // the cost of history: how many times slower
			} else {
				r = append(r, lv/ev)
			}
		}
		res.Ratios[m.name] = r.median()
		pass := r.median() <= 1.5
		ok = ok && pass
		label := "loaded/empty"
		if m.higherBetter {
			label = "empty/loaded"
		}
		rows = append(rows, []string{m.name, l.format(m.unit), e.format(m.unit), label + " " + r.format(ratio), "<= 1.5", verdict(pass)})
	}
	if len(loaded) == 1 {
		fmt.Fprintf(o.Out, "\none run (a median of one; pass --runs for more)\n")
	} else {
		fmt.Fprintf(o.Out, "\nmedians of %d runs (min–max over the runs); ratios per run, side by side\n", len(loaded))
	}
	table(o.Out, []string{"measure", "loaded", "empty", "ratio", "target", "verdict"}, rows)
	fmt.Fprintf(o.Out, "load time %s\n", res.Load.Round(time.Second))
}

// scaleAdmissionOptions is bench admission's setup with o's size.
func scaleAdmissionOptions(o ScaleOptions, workloads int) AdmissionOptions {
	a := AdmissionOptions{Common: o.Common, Workloads: workloads}
	a.PGStats = false
	a.defaults()
	return a
}

// loadAdmissionHistory runs n workloads through the admission layer of
// db (each admitted, then finished by its task's end, as bench admission
// does) and returns n: the admission history of a month, recorded by the
// layer itself.
func loadAdmissionHistory(ctx context.Context, env *env, db string, n int) (int, error) {
	// In chunks of bench admission's size: the history did not arrive all
	// at once either.
	const chunk = 10_000
	for i := 0; i*chunk < n; i++ {
		size := min(chunk, n-i*chunk)
		if _, err := admissionOn(ctx, env, scaleAdmissionOptions(ScaleOptions{}, size), db, fmt.Sprintf("h%d-", i)); err != nil {
			return 0, fmt.Errorf("admission history: %w", err)
		}
	}
	return n, nil
}

// scaleAdmission measures the admission layer of db: decisions/s of
// bench admission's flow.
func scaleAdmission(ctx context.Context, env *env, o ScaleOptions, db string, run int) (float64, error) {
	a := scaleAdmissionOptions(o, o.Workloads)
	// --pg-stats: the first run's statements of both databases, to read
	// side by side.
	if a.PGStats = o.PGStats && run == 1; a.PGStats {
		fmt.Fprintf(o.Out, "\nrun %d, %s database, the admission measurement:", run, db)
	}
	r, err := admissionOn(ctx, env, a, db, fmt.Sprintf("r%d-", run))
	if err != nil {
		return 0, fmt.Errorf("admission: %w", err)
	}
	return r.Decisions, nil
}
