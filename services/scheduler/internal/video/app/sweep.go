package app

import (
	"context"
	"errors"
	"time"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
)

// sweepBatch bounds how many tasks one pass of the sweep reads.
const sweepBatch = 200

// Sweep ends the retention of every video task submitted more than 24
// hours ago: a task still waiting or running is cancelled (its agent is
// told to stop), every one is marked expired and removed, and its first
// frame and video are deleted. Queries about it answer UNKNOWN from then
// on (they already did once its 24 hours were over). It returns how many
// tasks it expired.
func (a *App) Sweep(ctx context.Context) (int, error) {
	n := 0
	for {
		tasks, err := a.cfg.Tasks.VideoTasksCreatedBefore(ctx, a.cfg.Now().Add(-domain.Retention), sweepBatch)
		if err != nil {
			return n, err
		}
		for _, t := range tasks {
			done, err := a.cfg.Tasks.ChangeTask(ctx, sched.Caller{Tenant: "*", Subject: actor}, t.ID,
				func(t task.Task, now time.Time) ([]task.Record, error) {
					if t.Deleted {
						return nil, nil // removed meanwhile
					}
					return t.Expire(now, actor)
				})
			if errors.Is(err, task.ErrNotFound) {
				continue
			}
			if err != nil {
				return n, err
			}
			a.removeObjects(ctx, objectKeys(done)...)
			n++
		}
		if len(tasks) < sweepBatch {
			return n, nil
		}
	}
}

// RunSweeper sweeps every interval until ctx is done. Several schedulers
// may sweep at once: expiring a task twice records nothing the second time.
func (a *App) RunSweeper(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if n, err := a.Sweep(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Log.Warn("video retention sweep failed", "err", err)
		} else if n > 0 {
			a.cfg.Log.Info("video retention sweep", "expired", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
