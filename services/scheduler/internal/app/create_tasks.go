package app

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// MaxFanout bounds how many tasks one submission may create.
const MaxFanout = 10000

// CreateTasks submits a task. Targets, broadcast and scatter fan it out
// into several tasks that share a fan-out id and a group (a new group
// unless the spec names one). With requestID, a repeated create by the same
// tenant returns the tasks of the first instead of creating more.
func (a *App) CreateTasks(ctx context.Context, c Caller, in domain.SpecInput, requestID string) ([]domain.Task, error) {
	return a.createTasks(ctx, c, in, requestID, false)
}

// CreateNamedTasks submits a task the client names (a task file's id):
// the name is the create's idempotency key while a task of the earlier
// create with it has not ended, and runs the task file again once every
// one has (docs/api/tasks.md#the-clients-id).
func (a *App) CreateNamedTasks(ctx context.Context, c Caller, in domain.SpecInput, name string) ([]domain.Task, error) {
	return a.createTasks(ctx, c, in, name, true)
}

func (a *App) createTasks(ctx context.Context, c Caller, in domain.SpecInput, requestID string, rerunnable bool) ([]domain.Task, error) {
	spec, err := domain.NormalizeSpec(in)
	if err != nil {
		return nil, err
	}
	if spec.ParentID != "" {
		parent, err := a.dependencies(ctx, c, "parent_id", []string{spec.ParentID})
		if err != nil {
			return nil, err
		}
		spec.ParentID = parent[0]
		spec = spec.WithParent()
	}
	if len(spec.DependsOn) > 0 {
		if spec.DependsOn, err = a.dependencies(ctx, c, "depends_on", spec.DependsOn); err != nil {
			return nil, err
		}
	}
	cq, err := a.resolveQueue(ctx, c, spec)
	if err != nil {
		return nil, err
	}
	specs, err := a.fanOut(ctx, c, spec, in)
	if err != nil {
		return nil, err
	}
	// A broadcast or a scatter is a fan-out however many tasks it makes
	// (one machine may match): its tasks are a group either way. Targets
	// and repeat_count fan out only with a second task, so that a single
	// distinct target stays a plain task.
	fanout := ""
	if len(specs) > 1 || spec.Mode == domain.ModeBroadcast || spec.Mode == domain.ModeScatter {
		fanout = uuid.NewString()
		for i := range specs {
			if specs[i].GroupID == "" {
				specs[i].GroupID = fanout
			}
		}
	}
	ids := make([]string, len(specs))
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	if in.Repeat > 1 {
		// Each repetition waits for the previous one on its placement to
		// complete; a failed one cancels the rest there (the sweeper's
		// dependency rule). fanOut lists a placement's repetitions together.
		for i := 1; i < len(specs); i++ {
			if i%in.Repeat != 0 {
				specs[i].DependsOn = append(append([]string(nil), spec.DependsOn...), ids[i-1])
			}
		}
	}

	now := a.now()
	n := NewTasks{Tenant: c.Tenant, RequestID: requestID, Rerunnable: rerunnable, At: now, Tasks: make([][]domain.Record, len(specs))}
	for i, s := range specs {
		n.Tasks[i] = withIP(domain.Submit(now, ids[i], c.Tenant, c.Subject, requestID, fanout, s, cq), c.IP)
	}
	created, err := a.tasks.Create(ctx, n)
	if err != nil {
		return nil, err
	}
	// A repeat returns the first create's tasks, and those deleted since
	// are gone from every read: a deleted task (a tombstone, status as it
	// was) is not answered as though it waited.
	created = slices.DeleteFunc(created, func(t domain.Task) bool { return t.Deleted })
	if len(created) == 0 {
		return nil, domain.ErrNotFound
	}
	a.hub.TasksAppeared(created)
	a.admitAtOnce(ctx, created)
	for _, t := range created {
		if t.HeldForDependencies {
			// Completions must look for it from now on, and its
			// dependencies may have completed before it was written.
			a.heldMayExist.Store(true)
			a.releaseHeldSoon()
			break
		}
	}
	return created, nil
}

// dependencies checks that each of deps (the spec's field) is a task of
// the caller, named by its id or by a name (byClientID), and returns them
// as task ids, each once: a task depends on ids, whatever the client
// calls them.
func (a *App) dependencies(ctx context.Context, c Caller, field string, deps []string) ([]string, error) {
	missing, err := a.tasks.MissingTasks(ctx, c.Tenant, deps)
	if err != nil || len(missing) == 0 {
		return deps, err
	}
	named := map[string]string{}
	if c.Tenant != "*" {
		if named, err = a.tasks.TasksNamed(ctx, c.Tenant, missing); err != nil {
			return nil, err
		}
	}
	var out, asked []string // task ids, and the names the client gave them
	for _, d := range deps {
		id := d
		if slices.Contains(missing, d) {
			var ok bool
			if id, ok = named[d]; !ok {
				return nil, &domain.InvalidError{Field: field, Reason: fmt.Sprintf("no such task %q", d)}
			}
		}
		if !slices.Contains(out, id) {
			out, asked = append(out, id), append(asked, d)
		}
	}
	// A named task may have been deleted since its create.
	gone, err := a.tasks.MissingTasks(ctx, c.Tenant, out)
	if err != nil {
		return nil, err
	}
	if len(gone) > 0 {
		return nil, &domain.InvalidError{Field: field, Reason: fmt.Sprintf("no such task %q", asked[slices.Index(out, gone[0])])}
	}
	return out, nil
}

// fanOut turns one normalized spec into the specs of the tasks to create.
func (a *App) fanOut(ctx context.Context, c Caller, spec domain.Spec, in domain.SpecInput) ([]domain.Spec, error) {
	var out []domain.Spec
	switch {
	case len(in.TargetMachines) > 0 || len(in.TargetIPs) > 0:
		machines, ips := in.DistinctTargets()
		for _, m := range machines {
			s := spec
			s.MachineID = m
			out = append(out, s)
		}
		for _, ip := range ips {
			s := spec
			s.TargetIP = ip
			out = append(out, s)
		}
	case spec.Mode == domain.ModeBroadcast:
		machines, err := a.agents.Machines(ctx, c.Tenant, spec.Labels)
		if err != nil {
			return nil, err
		}
		if len(machines) == 0 {
			return nil, &domain.InvalidError{Field: "distribution", Reason: "broadcast found no live machine with the required labels"}
		}
		for _, m := range machines {
			s := spec
			s.MachineID = m
			out = append(out, s)
		}
	case spec.Mode == domain.ModeScatter:
		for i := 0; i < spec.ScatterCount; i++ {
			out = append(out, spec)
		}
	default:
		out = []domain.Spec{spec}
	}
	// repeat_count runs on every placement (one without targets, or each
	// target) that many times, one after another: the placement's
	// repetitions follow each other here and CreateTasks chains them.
	if in.Repeat > 1 {
		if n := len(out) * in.Repeat; n > MaxFanout {
			return nil, &domain.InvalidError{Field: "repeat_count", Reason: fmt.Sprintf("would create %d tasks; at most %d", n, MaxFanout)}
		}
		placements := out
		out = make([]domain.Spec, 0, len(placements)*in.Repeat)
		for _, p := range placements {
			for range in.Repeat {
				out = append(out, p)
			}
		}
	}
	if len(out) > MaxFanout {
		return nil, &domain.InvalidError{Field: "targets", Reason: fmt.Sprintf("would create %d tasks; at most %d", len(out), MaxFanout)}
	}
	return out, nil
}
