package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
//     stage request id) is queued for its job, and the committing
//     goroutine never waits.
//  2. A worker applies the job's changes in order, one at a time, while
//     other jobs' changes are applied beside them (at most
//     managerWorkers at once): a job never waits behind another job's
//     hand-off. A change applies to the job: progress, the stage's end
//     with its output (the next stage's task is created at once, then
//     both are recorded), or its failure.
//  3. The reconciliation sweep (Reconcile, at start and every interval)
//     reads the current stage task of every active job and applies it the
//     same way. It covers what Observe cannot: a change committed just
//     before a crash, by another replica that crashed, or dropped from a
//     full queue, and a job recorded without its stage task.
//
// Every step is idempotent (the domain records nothing for an outcome it
// already has; a stage task is created under its stage's request id), so
// the paths may overlap freely.
const (
	// managerWorkers bounds the changes applied at once.
	managerWorkers = 16
	// managerBuffer bounds the changes waiting; beyond it a change is
	// left to the sweep.
	managerBuffer = 4096
	sweepBatch    = 200
)

// change is one committed change of a stage task.
type change struct {
	job   string
	stage domain.Stage
	task  task.Task
}

// changeQueue holds the observed changes: in order per job, and applied
// only while Run runs (start).
type changeQueue struct {
	mu      sync.Mutex
	pending map[string][]change // by job, in the order observed
	busy    map[string]bool     // a worker drains this job's changes
	waiting int
	ctx     context.Context // Run's; nil while the manager is not running
	apply   func(ctx context.Context, c change)
	slots   chan struct{}
	wg      sync.WaitGroup
}

func newChangeQueue(apply func(ctx context.Context, c change)) *changeQueue {
	return &changeQueue{pending: map[string][]change{}, busy: map[string]bool{}, apply: apply,
		slots: make(chan struct{}, managerWorkers)}
}

// add queues c; false when the queue is full.
func (q *changeQueue) add(c change) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting >= managerBuffer {
		return false
	}
	q.pending[c.job] = append(q.pending[c.job], c)
	q.waiting++
	q.startLocked(c.job)
	return true
}

// startLocked starts a worker for job's changes unless one runs or the
// manager does not.
func (q *changeQueue) startLocked(job string) {
	if q.ctx == nil || q.busy[job] {
		return
	}
	q.busy[job] = true
	q.wg.Add(1)
	go q.drain(q.ctx, job)
}

// drain applies job's changes in order until none is left or ctx ends.
func (q *changeQueue) drain(ctx context.Context, job string) {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		cs := q.pending[job]
		if len(cs) == 0 || ctx.Err() != nil {
			delete(q.busy, job)
			q.mu.Unlock()
			return
		}
		c := cs[0]
		if len(cs) == 1 {
			delete(q.pending, job)
		} else {
			q.pending[job] = cs[1:]
		}
		q.waiting--
		q.mu.Unlock()
		select {
		case q.slots <- struct{}{}:
		case <-ctx.Done():
			continue // ends the loop above
		}
		q.apply(ctx, c)
		<-q.slots
	}
}

// run applies queued and arriving changes until ctx is done, then waits
// for the workers.
func (q *changeQueue) run(ctx context.Context) {
	q.mu.Lock()
	q.ctx = ctx
	for job := range q.pending {
		q.startLocked(job)
	}
	q.mu.Unlock()
	<-ctx.Done()
	q.mu.Lock()
	q.ctx = nil
	q.mu.Unlock()
	q.wg.Wait()
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
	if !a.changes.add(change{job: jobID, stage: s, task: t}) {
		// The sweep applies it later.
		a.cfg.Log.Warn("pipeline: change queue full; the sweep will apply the change", "job_id", jobID, "task_id", t.ID)
	}
}

// Run applies observed changes and sweeps every interval until ctx is
// done.
func (a *App) Run(ctx context.Context, interval time.Duration) {
	done := make(chan struct{})
	go func() { a.changes.run(ctx); close(done) }()
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
			<-done
			return
		case <-tick.C:
		}
	}
}

// applyChange applies one observed change; a failure is left to the
// sweep.
func (a *App) applyChange(ctx context.Context, c change) {
	if _, err := a.apply(ctx, c.job, c.stage, c.task); err != nil && ctx.Err() == nil {
		a.cfg.Log.Warn("pipeline: applying a stage change failed; the sweep retries", "job_id", c.job,
			"stage", c.stage, "err", err)
	}
}

// apply moves job on by the state of its stage s task t. recorded says
// whether this call stored anything: false when the job already had it
// (the other path, observed changes or the sweep, got there first).
func (a *App) apply(ctx context.Context, jobID string, s domain.Stage, t task.Task) (recorded bool, err error) {
	switch {
	case t.Deleted:
		recorded, err = a.fail(ctx, jobID, s, t.ID, "the "+string(s)+" stage's task was deleted")
	case t.Status == task.StatusCompleted:
		recorded, err = a.stageDone(ctx, jobID, s, t)
	case t.Status == task.StatusFailed:
		recorded, err = a.fail(ctx, jobID, s, t.ID, failureReason(t))
	case t.Status == task.StatusCancelled:
		recorded, err = a.fail(ctx, jobID, s, t.ID, "the "+string(s)+" stage's task was cancelled")
	case t.Status == task.StatusRunning && t.Progress > 0:
		recorded, err = a.mutate(ctx, jobID, func(j domain.Job) []domain.Record {
			return j.ReportProgress(a.now(), actor, s, t.ID, t.Progress, t.ProgressMessage)
		})
	}
	if errors.Is(err, domain.ErrNotFound) {
		return false, nil // a task of a job that was never recorded
	}
	return recorded, err
}

// mutate is Jobs.Mutate that says whether decide's records were stored:
// not when decide found nothing to record.
func (a *App) mutate(ctx context.Context, jobID string, decide func(j domain.Job) []domain.Record) (recorded bool, err error) {
	_, err = a.cfg.Jobs.Mutate(ctx, jobID, func(j domain.Job) ([]domain.Record, error) {
		recs := decide(j)
		recorded = len(recs) > 0 // Mutate decides again after a lost race: the last decision counts
		return recs, nil
	})
	return recorded && err == nil, err
}

func (a *App) fail(ctx context.Context, jobID string, s domain.Stage, taskID, reason string) (bool, error) {
	return a.mutate(ctx, jobID, func(j domain.Job) []domain.Record {
		return j.Fail(a.now(), actor, s, taskID, reason)
	})
}

// stageDone records stage s's end once its output is in place, with the
// next stage's task. That task is created first: it is what the stage
// hand-off waits for, and creating it is idempotent (the stage's request
// id), so a crash between the two leaves the job in s with its task
// completed, which the sweep applies again, finding the same next task.
func (a *App) stageDone(ctx context.Context, jobID string, s domain.Stage, t task.Task) (bool, error) {
	output := domain.OutputObject(jobID, s)
	switch _, err := a.cfg.Objects.Stat(ctx, output); {
	case errors.Is(err, objectstore.ErrNotFound):
		return a.fail(ctx, jobID, s, t.ID, "the "+string(s)+" stage ended without storing "+domain.OutputFile(s))
	case err != nil:
		return false, fmt.Errorf("pipeline: %s: %w", output, err)
	}
	j, err := a.cfg.Jobs.Get(ctx, "*", jobID)
	if err != nil {
		return false, err
	}
	done := j.StageDone(a.now(), actor, s, t.ID, output)
	if len(done) == 0 {
		return false, nil // recorded already, or not the stage's own task
	}
	next, ok := s.Next()
	var queued task.Task
	var refused error
	if after := fold(j, done); ok && after.StageTasks[next] == "" {
		queued, err = a.createStage(ctx, after, next)
		switch {
		case errors.Is(err, task.ErrInvalid):
			refused, err = err, nil
		case err != nil:
			return false, err
		}
	}
	return a.mutate(ctx, jobID, func(j domain.Job) []domain.Record {
		now := a.now()
		recs := j.StageDone(now, actor, s, t.ID, output)
		if len(recs) == 0 || !ok {
			return recs
		}
		after := fold(j, recs)
		if refused != nil {
			return append(recs, refusedStage(after, now, next, refused)...)
		}
		if queued.ID != "" {
			recs = append(recs, after.QueueStage(now, actor, next, queued.ID)...)
		}
		return recs
	})
}

// fold is j after recs.
func fold(j domain.Job, recs []domain.Record) domain.Job {
	for _, r := range recs {
		j = domain.Apply(j, r)
	}
	return j
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

// reconcile applies job j's current stage task. changed says whether the
// sweep itself recorded anything; what the observed changes recorded
// meanwhile does not count.
func (a *App) reconcile(ctx context.Context, j domain.Job) (changed bool, err error) {
	s := j.Stage
	var t task.Task
	if id := j.StageTasks[s]; id != "" {
		t, err = a.cfg.Tasks.GetTask(ctx, sched.Caller{Tenant: "*"}, id)
		if errors.Is(err, task.ErrNotFound) {
			t, err = task.Task{ID: id, Deleted: true}, nil
		}
	} else {
		// Recorded without its stage task: create it (or find the one
		// created before a crash, by its request id). Queueing it is a
		// change of the sweep's own.
		var queued domain.Job
		queued, t, err = a.queue(ctx, j, s)
		changed = err == nil && queued.Version != j.Version
	}
	if err != nil || t.ID == "" {
		return changed, err
	}
	recorded, err := a.apply(ctx, j.ID, s, t)
	return changed || recorded, err
}
