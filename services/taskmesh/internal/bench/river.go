package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// noopArgs is River's job: nothing to do, like Taskmesh's noop tasks.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverInsertBatch is how many jobs one InsertMany carries, as in River's
// own benchmark.
const riverInsertBatch = 5_000

// riverPeer works n no-op jobs with River on the same Postgres server, the
// way River's own benchmark (`river bench`) measures it: the jobs are
// inserted first; the client runs with that benchmark's settings
// (MaxWorkers 2000, FetchCooldown 2 ms, FetchPollInterval 20 ms) on a pool
// opened as River's command line opens it; the clock starts once
// client.Start has returned and stops at the last completion reported by
// River's event subscription (which counts a job only once its completion
// is recorded). It returns jobs/s.
//
// Its database is dropped afterwards and the server checkpointed: the
// peer's dead rows and dirty pages would otherwise be vacuumed and written
// out during whatever Taskmesh measures next, and the submit → start tail
// measured after the peer would be the peer's cleanup (docs/operations.md,
// "Benchmarks on one machine").
func riverPeer(ctx context.Context, env *env, n, run int) (float64, perItem, error) {
	db := fmt.Sprintf("river%d", run)
	if err := env.createDatabase(ctx, db); err != nil {
		return 0, perItem{}, err
	}
	rate, cpu, err := riverWork(ctx, env, db, n)
	if err != nil {
		return 0, perItem{}, err
	}
	return rate, cpu, env.dropDatabase(ctx, db)
}

// riverWork runs River on database db until n jobs completed, and stops it.
// It returns jobs/s and the CPU per job from the start to the last
// completion.
func riverWork(ctx context.Context, env *env, db string, n int) (float64, perItem, error) {
	pool, err := openRiverPool(ctx, env.server.URL(db))
	if err != nil {
		return 0, perItem{}, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return 0, perItem{}, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, perItem{}, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2000}},
		Workers:           workers,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		return 0, perItem{}, err
	}
	for left := n; left > 0; left -= riverInsertBatch {
		params := make([]river.InsertManyParams, min(left, riverInsertBatch))
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return 0, perItem{}, err
		}
	}
	// A channel as large as the run: a full one would drop events, and the
	// count would never arrive.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled}})
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		return 0, perItem{}, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	pgData := filepath.Join(env.dir, "pg")
	began := markNow(pgData)
	rate, err := countRiverCompletions(ctx, events, n, began.at)
	if err != nil {
		return 0, perItem{}, err
	}
	return rate, cpuPer(began, markNow(pgData), n), nil
}

// countRiverCompletions reads n completions and returns n over the time
// from start to the last one. Any other outcome fails the run.
func countRiverCompletions(ctx context.Context, events <-chan *river.Event, n int, start time.Time) (float64, error) {
	deadline := time.After(5 * time.Minute)
	var last time.Time
	for done := 0; done < n; {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-deadline:
			return 0, fmt.Errorf("river completed %d of %d jobs in 5 minutes", done, n)
		case ev, ok := <-events:
			if !ok {
				return 0, fmt.Errorf("river's subscription closed after %d of %d jobs", done, n)
			}
			if ev.Kind != river.EventKindJobCompleted {
				return 0, fmt.Errorf("river job %d: %s", ev.Job.ID, ev.Kind)
			}
			done++
			last = time.Now()
		}
	}
	return float64(n) / last.Sub(start).Seconds(), nil
}

// openRiverPool opens a pool as River's command line does: pgxpool's
// defaults (max(4, CPUs) connections) plus its application name and
// timeouts, none of Taskmesh's own settings (pg.Open: custom plans, JIT
// off, tracing).
func openRiverPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	params := cfg.ConnConfig.RuntimeParams
	params["application_name"] = "river CLI"
	params["idle_in_transaction_session_timeout"] = strconv.Itoa(int((11 * time.Second).Milliseconds()))
	params["statement_timeout"] = strconv.Itoa(int((10 * time.Second).Milliseconds()))
	return pgxpool.NewWithConfig(ctx, cfg)
}
