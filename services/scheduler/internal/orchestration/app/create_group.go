package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// GroupRequest is a group as submitted.
type GroupRequest struct {
	Name, Mode  string
	Tasks       []MemberRequest
	MaxParallel int
	Repeat      *RepeatRequest
	// Start: start the group at once (else it waits for StartGroup).
	Start bool
	// RequestID, when set, makes the create idempotent per tenant.
	RequestID string
	// Webhook is the group's own endpoint, notified when it ends.
	Webhook string
}

// MemberRequest is one member as submitted: a task, or a template of the
// tenant with its variables whose task the fields set in Spec override.
type MemberRequest struct {
	ID         string
	Spec       task.SpecInput
	TemplateID string
	Variables  map[string]any
}

// RepeatRequest is a repeat as submitted; its task is Spec, or a template
// with variables that the fields set in Spec override.
type RepeatRequest struct {
	orch.RepeatInput
	TemplateID string
	Variables  map[string]any
}

// CreateGroup validates a group, stores it and, when asked, starts it:
// nothing is stored when anything is wrong (a member, a dependency, a
// template or its variables, a queue the tenant may not use).
func (a *App) CreateGroup(ctx context.Context, c sched.Caller, r GroupRequest) (orch.State, error) {
	if err := tenantOnly(c); err != nil {
		return orch.State{}, err
	}
	in := orch.Input{Name: r.Name, Mode: r.Mode, MaxParallel: r.MaxParallel, Webhook: r.Webhook}
	for i, m := range r.Tasks {
		spec, err := a.withTemplate(ctx, c, fmt.Sprintf("tasks[%d]", i), m.TemplateID, m.Variables, m.Spec)
		if err != nil {
			return orch.State{}, err
		}
		in.Tasks = append(in.Tasks, orch.MemberInput{ID: m.ID, Spec: spec})
	}
	if r.Repeat != nil {
		rep := r.Repeat.RepeatInput
		spec, err := a.withTemplate(ctx, c, "repeat", r.Repeat.TemplateID, r.Repeat.Variables, rep.Spec)
		if err != nil {
			return orch.State{}, err
		}
		rep.Spec = spec
		in.Repeat = &rep
	}
	def, err := orch.Normalize(in)
	if err != nil {
		return orch.State{}, err
	}
	if err := a.resolveQueues(ctx, c, &def); err != nil {
		return orch.State{}, err
	}
	s, d := orch.Create(a.now(), a.newID(), c.Tenant, c.Subject, r.RequestID, def, r.Start, a.newID)
	s, written, err := a.groups.Create(ctx, NewGroup{State: s, Decision: withIP(d, c.IP)})
	if err != nil {
		return orch.State{}, err
	}
	if s.Group.Deleted {
		// A repeat of a create whose group was deleted since: gone from
		// every read, so not answered as though it waited.
		return orch.State{}, task.ErrNotFound
	}
	a.committed(s, written)
	return s, nil
}

// withTemplate applies a member's (or a repeat's) template: the rendered
// task, then every field spec sets. Without a template it is spec.
func (a *App) withTemplate(ctx context.Context, c sched.Caller, field, templateID string, vars map[string]any, spec task.SpecInput) (task.SpecInput, error) {
	if templateID == "" {
		if len(vars) > 0 {
			return spec, &task.InvalidError{Field: field + ".variables", Reason: "are only for a template (template_id)"}
		}
		return spec, nil
	}
	if spec.Type != "" && spec.Type != task.TypeShell {
		// A template's variables may be in its command: it runs directly,
		// never through a shell.
		return spec, &task.InvalidError{Field: field + ".type", Reason: "a template's task runs its command directly (type shell); it cannot be changed"}
	}
	tpl, err := a.templates.Get(ctx, c.Tenant, templateID)
	if errors.Is(err, task.ErrNotFound) {
		return spec, &task.InvalidError{Field: field + ".template_id", Reason: fmt.Sprintf("no template %q", templateID)}
	}
	if err != nil {
		return spec, err
	}
	base, err := tpl.Render(vars)
	if err != nil {
		var ie *task.InvalidError
		if errors.As(err, &ie) {
			return spec, &task.InvalidError{Field: field + "." + ie.Field, Reason: ie.Reason}
		}
		return spec, err
	}
	return overlay(base, spec), nil
}

// overlay sets on base every field set in over: non-empty strings,
// non-nil numbers, lists and maps.
func overlay(base, over task.SpecInput) task.SpecInput {
	str := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	num := func(dst **int, v *int) {
		if v != nil {
			*dst = v
		}
	}
	str(&base.Name, over.Name)
	str(&base.Type, over.Type)
	str(&base.Command, over.Command)
	str(&base.Workdir, over.Workdir)
	str(&base.MachineID, over.MachineID)
	str(&base.ParentID, over.ParentID)
	str(&base.Queue, over.Queue)
	str(&base.Quota, over.Quota)
	str(&base.Mode, over.Mode)
	str(&base.GroupID, over.GroupID)
	str(&base.Webhook, over.Webhook)
	num(&base.Timeout, over.Timeout)
	num(&base.Priority, over.Priority)
	num(&base.RetryDelay, over.RetryDelay)
	num(&base.MaxRetries, over.MaxRetries)
	num(&base.LeaseTTL, over.LeaseTTL)
	num(&base.RenewInterval, over.RenewInterval)
	num(&base.HeartbeatInterval, over.HeartbeatInterval)
	num(&base.GracePeriod, over.GracePeriod)
	if over.Args != nil {
		base.Args = over.Args
	}
	if over.Env != nil {
		env := maps.Clone(base.Env)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, over.Env)
		base.Env = env
	}
	if over.Labels != nil {
		base.Labels = over.Labels
	}
	if over.Resources != nil {
		base.Resources = over.Resources
	}
	if over.Checkpoint != nil {
		base.Checkpoint = over.Checkpoint
	}
	if over.Artifacts != nil {
		base.Artifacts = over.Artifacts
	}
	base.DependsOn = over.DependsOn
	base.TargetMachines, base.TargetIPs, base.Repeat, base.ScatterCount = over.TargetMachines, over.TargetIPs, over.Repeat, over.ScatterCount
	return base
}

// resolveQueues asks admission once for each distinct queue request of the
// definition (plain members never call it) and records the answers.
func (a *App) resolveQueues(ctx context.Context, c sched.Caller, def *orch.Definition) error {
	cache := map[string]string{}
	resolve := func(field string, spec task.Spec) (string, error) {
		key := spec.Queue + "\x00" + spec.Quota + "\x00" + resourcesKey(spec.Resources)
		if cq, ok := cache[key]; ok {
			return cq, nil
		}
		cq, err := a.tasks.ResolveQueue(ctx, c, spec)
		if err != nil {
			var ie *task.InvalidError
			if errors.As(err, &ie) {
				return "", &task.InvalidError{Field: field + "." + ie.Field, Reason: ie.Reason}
			}
			return "", err
		}
		cache[key] = cq
		return cq, nil
	}
	for i := range def.Members {
		cq, err := resolve(fmt.Sprintf("tasks[%d]", i), def.Members[i].Spec)
		if err != nil {
			return err
		}
		def.Members[i].ClusterQueue = cq
	}
	if def.Repeat != nil {
		cq, err := resolve("repeat.template", def.Repeat.Spec)
		if err != nil {
			return err
		}
		def.Repeat.ClusterQueue = cq
	}
	return nil
}

func resourcesKey(r map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(r)) {
		b.WriteString(k + "=" + r[k] + ";")
	}
	return b.String()
}
