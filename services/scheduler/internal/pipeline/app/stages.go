package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"time"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// Content types of what stages write.
const (
	outputContentType = "application/octet-stream"
	logContentType    = "text/plain; charset=utf-8"
)

// queue creates stage s's task for job (creating it again returns the
// first one: its request id is the stage's) and records it. A task the
// scheduler refuses outright (an invalid spec, e.g. a misconfigured
// stage) fails the job; any other error is returned and the
// reconciliation sweep tries again.
func (a *App) queue(ctx context.Context, job domain.Job, s domain.Stage) (domain.Job, task.Task, error) {
	t, err := a.createStage(ctx, job, s)
	if errors.Is(err, task.ErrInvalid) {
		j, ferr := a.cfg.Jobs.Mutate(ctx, job.ID, func(j domain.Job) ([]domain.Record, error) {
			return refusedStage(j, a.now(), s, err), nil
		})
		return j, task.Task{}, ferr
	}
	if err != nil {
		return job, task.Task{}, err
	}
	j, err := a.cfg.Jobs.Mutate(ctx, job.ID, func(j domain.Job) ([]domain.Record, error) {
		return j.QueueStage(a.now(), actor, s, t.ID), nil
	})
	return j, t, err
}

// createStage creates stage s's task for job, or finds the one created
// before under the stage's request id. The scheduler's refusal of the
// task (task.ErrInvalid) is returned as it is.
func (a *App) createStage(ctx context.Context, job domain.Job, s domain.Stage) (task.Task, error) {
	spec, err := a.stageSpec(ctx, job, s)
	if err != nil {
		return task.Task{}, err
	}
	created, err := a.cfg.Tasks.CreateTasks(ctx, sched.Caller{Tenant: job.TenantID, Subject: actor, Pipeline: true}, spec,
		domain.StageRequestID(job.ID, s))
	if errors.Is(err, task.ErrInvalid) {
		return task.Task{}, err
	}
	if err != nil {
		return task.Task{}, fmt.Errorf("pipeline: queueing the %s stage of %s: %w", s, job.ID, err)
	}
	return created[0], nil
}

// refusedStage fails job in stage s, whose task the scheduler refused.
func refusedStage(job domain.Job, now time.Time, s domain.Stage, refusal error) []domain.Record {
	return job.Fail(now, actor, s, "", "the "+string(s)+" stage could not be queued: "+refusal.Error())
}

// stageInputs names the files of stage s's work directory (docs/api/
// pipeline.md, "Stage workers") and the objects they come from.
func stageInputs(job domain.Job, s domain.Stage) [][2]string {
	var in [][2]string
	refs := func() {
		for _, obj := range job.Inputs.RefImages {
			in = append(in, [2]string{"ref_images/" + path.Base(obj), obj})
		}
	}
	switch s {
	case domain.StageONNX:
		in = append(in, [2]string{"model.onnx", job.Inputs.Model})
		refs()
	case domain.StageBIE:
		in = append(in, [2]string{"out.onnx", domain.OutputObject(job.ID, domain.StageONNX)},
			[2]string{"quant.zip", job.Inputs.Quant})
		refs()
	case domain.StageNEF:
		in = append(in, [2]string{"out.bie", domain.OutputObject(job.ID, domain.StageBIE)})
	}
	return in
}

// stageSpec is the task of stage s: the worker command with signed links
// to its inputs, its output and its log, on the stage's pool and queue.
func (a *App) stageSpec(ctx context.Context, job domain.Job, s domain.Stage) (task.SpecInput, error) {
	sc := a.cfg.Stages[s]
	ttl := a.cfg.WorkerLinkTTL
	if len(a.cfg.Worker) == 0 {
		return task.SpecInput{}, errors.New("pipeline: no stage worker command is configured")
	}
	args := append(append([]string{}, a.cfg.Worker[1:]...), "run", "--job", job.ID, "--stage", string(s))
	for _, in := range stageInputs(job, s) {
		u, err := a.cfg.Objects.PresignGet(ctx, in[1], ttl)
		if err != nil {
			return task.SpecInput{}, fmt.Errorf("pipeline: signing %s: %w", in[1], err)
		}
		args = append(args, "--input", in[0]+"="+u)
	}
	out, _, err := a.cfg.Objects.PresignPutUpTo(ctx, domain.OutputObject(job.ID, s), ttl, a.cfg.MaxOutputBytes, outputContentType)
	if err != nil {
		return task.SpecInput{}, fmt.Errorf("pipeline: signing the %s output: %w", s, err)
	}
	logURL, _, err := a.cfg.Objects.PresignPutUpTo(ctx, domain.LogObject(job.ID, s), ttl, a.cfg.MaxLogBytes, logContentType)
	if err != nil {
		return task.SpecInput{}, fmt.Errorf("pipeline: signing the %s log: %w", s, err)
	}
	args = append(args, "--output", out, "--log", logURL, "--log-limit", strconv.FormatInt(a.cfg.MaxLogBytes, 10))
	if len(sc.Program) > 0 {
		prog, _ := json.Marshal(sc.Program)
		args = append(args, "--program", string(prog))
	}
	labels := sc.Labels
	if labels == nil {
		labels = []string{"pool:" + string(s)}
	}
	timeout, retries := sc.Timeout, sc.Retries
	if timeout <= 0 {
		timeout = task.DefaultTimeout
	}
	in := task.SpecInput{
		Name: "pipeline " + string(s) + " " + job.ID, Type: task.TypeShell, Command: a.cfg.Worker[0], Args: args,
		Labels: labels, Timeout: &timeout, MaxRetries: &retries, RetryDelay: sc.RetryDelay, Queue: sc.Queue,
	}
	if sc.Queue != "" && sc.Resource != "" {
		in.Resources = map[string]string{sc.Resource: "1"}
	}
	return in, nil
}
