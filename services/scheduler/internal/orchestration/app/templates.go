package app

import (
	"context"
	"errors"
	"fmt"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// CreateTemplate stores a template of the caller's tenant; without an id
// the server makes one. An id the tenant already uses is ErrExists.
func (a *App) CreateTemplate(ctx context.Context, c sched.Caller, def orch.Template) (orch.Template, error) {
	if err := tenantOnly(c); err != nil {
		return orch.Template{}, err
	}
	if def.ID == "" {
		def.ID = a.newID()
	}
	recs, err := orch.NewTemplate(a.now(), c.Tenant, c.Subject, def)
	if err != nil {
		return orch.Template{}, err
	}
	return a.templates.Create(ctx, c.Tenant, def.ID, templateIP(recs, c.IP))
}

// tenantOnly refuses a caller of no tenant: groups and templates belong
// to one.
func tenantOnly(c sched.Caller) error {
	if c.Tenant == "*" || c.Tenant == "" {
		return fmt.Errorf("%w: groups and templates belong to a tenant; use a tenant's API key", sched.ErrForbidden)
	}
	return nil
}

// GetTemplate returns one of the caller's templates.
func (a *App) GetTemplate(ctx context.Context, c sched.Caller, id string) (orch.Template, error) {
	return a.templates.Get(ctx, c.Tenant, id)
}

// ListTemplates lists the caller's templates by id.
func (a *App) ListTemplates(ctx context.Context, c sched.Caller, f TemplateFilter) ([]orch.Template, string, error) {
	f.Tenant = c.Tenant
	return a.templates.List(ctx, f)
}

// UpdateTemplate changes a template's definition: the fields named take
// def's value, or def replaces the whole definition when none are
// (orch.Template.Update says how).
func (a *App) UpdateTemplate(ctx context.Context, c sched.Caller, id string, def orch.Template, fields []string) (orch.Template, error) {
	return a.templates.Mutate(ctx, c.Tenant, id, func(t orch.Template) ([]orch.Record, error) {
		recs, err := t.Update(a.now(), c.Subject, def, fields)
		return templateIP(recs, c.IP), err
	})
}

// DeleteTemplate removes a template; tasks and groups made from it keep
// what it made.
func (a *App) DeleteTemplate(ctx context.Context, c sched.Caller, id string) error {
	_, err := a.templates.Mutate(ctx, c.Tenant, id, func(t orch.Template) ([]orch.Record, error) {
		recs, err := t.Delete(a.now(), c.Subject)
		return templateIP(recs, c.IP), err
	})
	return err
}

// RunRequest is a template run: the variables' values (string, float64 or
// bool each) and the overrides.
type RunRequest struct {
	Variables map[string]any
	// Priority, when set, replaces the template's.
	Priority *int
	// TargetMachines and TargetIPs fan the run out as CreateTask's
	// targets do.
	TargetMachines, TargetIPs []string
	RequestID                 string
}

// RunTemplate creates the task(s) a template describes with the given
// variables. Every variable problem is a *task.InvalidError naming the
// variable; nothing is created then.
func (a *App) RunTemplate(ctx context.Context, c sched.Caller, id string, r RunRequest) ([]task.Task, error) {
	tpl, err := a.templates.Get(ctx, c.Tenant, id)
	if err != nil {
		return nil, err
	}
	in, err := tpl.Render(r.Variables)
	if err != nil {
		return nil, err
	}
	if r.Priority != nil {
		in.Priority = r.Priority
	}
	in.TargetMachines, in.TargetIPs = r.TargetMachines, r.TargetIPs
	tasks, err := a.tasks.CreateTasks(ctx, c, in, r.RequestID)
	var ie *task.InvalidError
	if errors.As(err, &ie) && ie.Field != "targets" && ie.Field != "targets.machine_ids" && ie.Field != "targets.ips" {
		// The template made a task the task API refuses (a value made an
		// argument too long, say): say so.
		return nil, &task.InvalidError{Field: ie.Field, Reason: ie.Reason + " (after the template's variables were substituted)"}
	}
	return tasks, err
}
