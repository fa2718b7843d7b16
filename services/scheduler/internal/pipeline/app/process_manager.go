package app

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// The process manager moves each job through its stages:
//
//  1. Observe sees every task change the scheduler committed in this
//     process. A change of a stage task (created by the pipeline with a
//     stage request id) is queued to a shard chosen by its job, so one
//     job's changes are handled in order, and the committing goroutine
//     never waits.
//  2. A shard worker applies the change to the job: progress, the
//     stage's end with its output (the job moves on and the next stage's
//     task is queued at once), or its failure.
//  3. The reconciliation sweep (Reconcile, at start and every interval)
//     reads the current stage task of every active job and applies it the
//     same way. It covers what Observe cannot: a change committed just
//     before a crash, by another replica that crashed, or dropped from a
//     full shard, and a job recorded without its stage task.
//
// Every step is idempotent (the domain records nothing for an outcome it
// already has; a stage task is created under its stage's request id), so
// the paths may overlap freely.
const (
	managerShards = 4
	managerBuffer = 4096
	sweepBatch    = 200
)

// change is one committed change of a stage task.
type change struct {
	job   string
	stage domain.Stage
	task  task.Task
}

// Observe is called with every task after a committed change (the
// scheduler's app.Hub); it must not block.
func (a *App) Observe(t task.Task) {
	if t.CreatedBy != actor {
		return
	}
	jobID, s, ok := domain.ParseStageRequestID(t.RequestID)
	if !ok {
		return
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(jobID))
	select {
	case a.changes[h.Sum32()%managerShards] <- change{job: jobID, stage: s, task: t}:
	default:
		// The sweep applies it later.
		a.cfg.Log.Warn("pipeline: change queue full; the sweep will apply the change", "job_id", jobID, "task_id", t.ID)
	}
}

// Run handles observed changes and sweeps every interval until ctx is
// done.
func (a *App) Run(ctx context.Context, interval time.Duration) {
	done := make(chan struct{})
	for _, ch := range a.changes {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-ctx.Done():
					return
				case c := <-ch:
					if err := a.apply(ctx, c.job, c.stage, c.task); err != nil && ctx.Err() == nil {
						a.cfg.Log.Warn("pipeline: applying a stage change failed; the sweep retries", "job_id", c.job,
							"stage", c.stage, "err", err)
					}
				}
			}
		}()
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if n, err := a.Reconcile(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Log.Warn("pipeline: reconciliation sweep failed", "err", err)
		} else if n > 0 {
			a.cfg.Log.Info("pipeline: reconciliation sweep moved jobs on", "jobs", n)
		}
		select {
		case <-ctx.Done():
			for range a.changes {
				<-done
			}
			return
		case <-tick.C:
		}
	}
}

// apply moves job on by the state of its stage s task t.
func (a *App) apply(ctx context.Context, jobID string, s domain.Stage, t task.Task) error {
	var err error
	switch {
	case t.Deleted:
		err = a.fail(ctx, jobID, s, t.ID, "the "+string(s)+" stage's task was deleted")
	case t.Status == task.StatusCompleted:
		err = a.stageDone(ctx, jobID, s, t)
	case t.Status == task.StatusFailed:
		err = a.fail(ctx, jobID, s, t.ID, failureReason(t))
	case t.Status == task.StatusCancelled:
		err = a.fail(ctx, jobID, s, t.ID, "the "+string(s)+" stage's task was cancelled")
	case t.Status == task.StatusRunning && t.Progress > 0:
		_, err = a.cfg.Jobs.Mutate(ctx, jobID, func(j domain.Job) ([]domain.Record, error) {
			return j.ReportProgress(a.now(), actor, s, t.ID, t.Progress, t.ProgressMessage), nil
		})
	}
	if errors.Is(err, domain.ErrNotFound) {
		return nil // a task of a job that was never recorded
	}
	return err
}

func (a *App) fail(ctx context.Context, jobID string, s domain.Stage, taskID, reason string) error {
	_, err := a.cfg.Jobs.Mutate(ctx, jobID, func(j domain.Job) ([]domain.Record, error) {
		return j.Fail(a.now(), actor, s, taskID, reason), nil
	})
	return err
}

// stageDone records stage s's end once its output is in place and queues
// the next stage.
func (a *App) stageDone(ctx context.Context, jobID string, s domain.Stage, t task.Task) error {
	output := domain.OutputObject(jobID, s)
	switch _, err := a.cfg.Objects.Stat(ctx, output); {
	case errors.Is(err, objectstore.ErrNotFound):
		return a.fail(ctx, jobID, s, t.ID, "the "+string(s)+" stage ended without storing "+domain.OutputFile(s))
	case err != nil:
		return fmt.Errorf("pipeline: %s: %w", output, err)
	}
	j, err := a.cfg.Jobs.Mutate(ctx, jobID, func(j domain.Job) ([]domain.Record, error) {
		return j.StageDone(a.now(), actor, s, t.ID, output), nil
	})
	if err != nil {
		return err
	}
	// Queue the next stage unless that happened already (a repeated
	// outcome finds the job moved on and its task queued).
	if next, ok := s.Next(); ok && j.Status == next.Status() && j.StageTasks[next] == "" {
		_, _, err = a.queue(ctx, j, next)
	}
	return err
}

// failureReason is why a stage task failed: the worker's last line on
// stderr (it ends with its reason), else the task's error, else its exit
// code.
func failureReason(t task.Task) string {
	if t.Result != nil {
		lines := strings.Split(strings.TrimSpace(t.Result.Stderr), "\n")
		if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
			return strings.TrimPrefix(last, "pipeline-stage: ")
		}
	}
	if t.Error != "" {
		return t.Error
	}
	if t.ExitCode != nil {
		return fmt.Sprintf("the stage program exited with code %d", *t.ExitCode)
	}
	return ""
}

// Reconcile applies the current stage task of every active job, queueing
// the stage's task when the job has none recorded. It returns how many
// jobs it changed.
func (a *App) Reconcile(ctx context.Context) (int, error) {
	n, after := 0, ""
	for {
		jobs, err := a.cfg.Jobs.Active(ctx, after, sweepBatch)
		if err != nil {
			return n, err
		}
		for _, j := range jobs {
			after = j.ID
			changed, err := a.reconcile(ctx, j)
			if err != nil {
				if ctx.Err() != nil {
					return n, ctx.Err()
				}
				a.cfg.Log.Warn("pipeline: reconciling a job failed", "job_id", j.ID, "err", err)
				continue
			}
			if changed {
				n++
			}
		}
		if len(jobs) < sweepBatch {
			return n, nil
		}
	}
}

func (a *App) reconcile(ctx context.Context, j domain.Job) (bool, error) {
	s := j.Stage
	var t task.Task
	var err error
	if id := j.StageTasks[s]; id != "" {
		t, err = a.cfg.Tasks.GetTask(ctx, sched.Caller{Tenant: "*"}, id)
		if errors.Is(err, task.ErrNotFound) {
			t, err = task.Task{ID: id, Deleted: true}, nil
		}
	} else {
		// Recorded without its stage task: create it (or find the one
		// created before a crash, by its request id).
		_, t, err = a.queue(ctx, j, s)
	}
	if err != nil || t.ID == "" {
		return false, err
	}
	if err := a.apply(ctx, j.ID, s, t); err != nil {
		return false, err
	}
	after, err := a.cfg.Jobs.Get(ctx, "*", j.ID)
	return err == nil && after.Version != j.Version, err
}
