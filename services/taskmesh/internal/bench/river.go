package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// noopArgs is River's job: nothing to do, like Taskmesh's noop tasks.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

// riverPeer inserts n no-op jobs with InsertMany and works them with
// River's own benchmark settings (MaxWorkers 2000, FetchCooldown 2 ms,
// FetchPollInterval 20 ms) on the same Postgres server; it returns jobs/s
// from the client's start until every job is marked completed.
func riverPeer(ctx context.Context, env *env, n, run int) (float64, error) {
	db := fmt.Sprintf("river%d", run)
	admin, err := pg.Open(ctx, pg.Config{URL: env.server.URL("postgres")})
	if err != nil {
		return 0, err
	}
	_, _ = admin.Exec(ctx, `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`)
	_, err = admin.Exec(ctx, `CREATE DATABASE `+db)
	admin.Close()
	if err != nil {
		return 0, err
	}
	pool, err := pg.Open(ctx, pg.Config{URL: env.server.URL(db), MaxConns: 48})
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return 0, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, err
	}
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: &done})
	inserter, err := river.NewClient(driver, &river.Config{})
	if err != nil {
		return 0, err
	}
	for left := n; left > 0; {
		batch := min(left, 10_000)
		params := make([]river.InsertManyParams, batch)
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		if _, err := inserter.InsertMany(ctx, params); err != nil {
			return 0, err
		}
		left -= batch
	}
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2000}},
		Workers:           workers,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var completed int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
			return 0, err
		}
		if completed >= n {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("river completed %d of %d jobs", completed, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
