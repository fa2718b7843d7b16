package app

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/taskmesh/taskmesh/platform/domain/cmdline"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// UpdateTask changes a pending task. Fields left out (nil numbers, empty
// strings and lists) keep their current value.
//
// The new spec's queue is resolved first (a call to the quota service,
// which must not happen inside the task's batch) against the task as read;
// should a concurrent update change what admission depends on before this
// one lands, it starts over.
func (a *App) UpdateTask(ctx context.Context, c Caller, id string, in domain.SpecInput) (domain.Task, error) {
	for attempt := 0; ; attempt++ {
		t, err := a.updateTask(ctx, c, id, in)
		if !errors.Is(err, errResolvedStale) || attempt == 2 {
			return t, err
		}
	}
}

// errResolvedStale: the queue was resolved for a spec that changed since.
var errResolvedStale = errors.New("task changed while its queue was resolved")

func (a *App) updateTask(ctx context.Context, c Caller, id string, in domain.SpecInput) (domain.Task, error) {
	cur, err := a.GetTask(ctx, c, id)
	if err != nil {
		return domain.Task{}, err
	}
	want, err := domain.NormalizeSpec(merge(cur.Spec, in))
	if err != nil {
		return domain.Task{}, err
	}
	cq, err := a.resolveQueue(ctx, c, want)
	if err != nil {
		return domain.Task{}, err
	}
	return a.mutate(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		spec, err := domain.NormalizeSpec(merge(t.Spec, in))
		if err != nil {
			return nil, err
		}
		if spec.Queue != want.Queue || spec.Quota != want.Quota || !maps.Equal(spec.Resources, want.Resources) {
			return nil, errResolvedStale
		}
		return t.Update(now, c.Subject, spec, cq)
	})
}

// merge overlays the fields set in in on the current spec.
func merge(s domain.Spec, in domain.SpecInput) domain.SpecInput {
	str := func(v, cur string) string {
		if v != "" {
			return v
		}
		return cur
	}
	num := func(v *int, cur int) *int {
		if v != nil {
			return v
		}
		return &cur
	}
	list := func(v, cur []string) []string {
		if v != nil {
			return v
		}
		return cur
	}
	out := domain.SpecInput{
		Name: str(in.Name, s.Name), Type: str(in.Type, s.Type), Command: str(in.Command, s.Command),
		Workdir: str(in.Workdir, s.Workdir), Args: list(in.Args, s.Args), Env: in.Env,
		Timeout: num(in.Timeout, s.Timeout), Priority: num(in.Priority, s.Priority),
		RetryDelay: num(in.RetryDelay, s.RetryDelay), MaxRetries: num(in.MaxRetries, s.MaxRetries),
		MachineID: str(in.MachineID, s.MachineID), GroupID: str(in.GroupID, s.GroupID), ParentID: str(in.ParentID, s.ParentID),
		Queue: str(in.Queue, s.Queue), DependsOn: list(in.DependsOn, s.DependsOn), Mode: str(in.Mode, s.Mode),
		Labels: list(in.Labels, s.Labels), ScatterCount: s.ScatterCount,
		LeaseTTL: num(in.LeaseTTL, s.LeaseTTL), RenewInterval: num(in.RenewInterval, s.RenewInterval),
		HeartbeatInterval: num(in.HeartbeatInterval, s.HeartbeatInterval), GracePeriod: num(in.GracePeriod, s.GracePeriod),
		Resources: in.Resources, Quota: str(in.Quota, s.Quota), Video: in.Video, Webhook: str(in.Webhook, s.Webhook),
	}
	if in.Resources == nil {
		out.Resources = s.Resources
	}
	if in.Video == nil {
		out.Video = s.Video
	}
	if in.ScatterCount != 0 {
		out.ScatterCount = in.ScatterCount
	}
	if in.Env == nil {
		out.Env = s.Env
	}
	// A new command line without args brings its own arguments: the old
	// args went with the old command (docs/api/tasks.md, "A command line").
	// A new one-word command keeps them, as any field left out does.
	if t := out.Type; in.Command != "" && in.Args == nil && (t == domain.TypeShell || t == domain.TypePython) {
		if cmd, words, err := cmdline.Resolve(in.Command, nil); err != nil {
			out.Args = nil // NormalizeSpec refuses the line, naming command
		} else if len(words) > 0 {
			out.Command, out.Args = cmd, words
		} else {
			out.Command = cmd
		}
	}
	return out
}

// DeleteTask removes a task no attempt holds.
func (a *App) DeleteTask(ctx context.Context, c Caller, id string) error {
	_, err := a.mutate(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Delete(now, c.Subject)
	})
	return err
}

// CancelTask cancels a task that is not final; its agent is told to stop
// the attempt at its next heartbeat.
func (a *App) CancelTask(ctx context.Context, c Caller, id, reason string) (domain.Task, error) {
	return a.mutate(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Cancel(now, c.Subject, reason)
	})
}

// RetryTask puts a failed or cancelled task back to pending.
func (a *App) RetryTask(ctx context.Context, c Caller, id string) (domain.Task, error) {
	return a.mutate(ctx, c, id, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		return t.Retry(now, c.Subject)
	})
}
