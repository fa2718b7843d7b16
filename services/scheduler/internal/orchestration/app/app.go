// Package app holds the orchestration use cases — task groups and
// templates — and the process manager that moves groups on as their
// members' tasks change. It depends only on the interfaces it declares
// (stores.go and below): the Postgres adapter and the scheduler's task use
// cases in production, fakes in tests.
//
// A group's decisions run inside GroupStore.Mutate, on the group as locked
// for the write; the tasks they create or cancel are written in the same
// transaction. After a commit the scheduler's hub is told about every task
// written (claims wake for new work; the tasks' watchers see the change),
// and the group's watchers are woken.
package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// Tasks is the part of the scheduler's task use cases orchestration needs.
type Tasks interface {
	// CreateTasks submits a task (a template run), as the task API does.
	CreateTasks(ctx context.Context, c sched.Caller, in task.SpecInput, requestID string) ([]task.Task, error)
	// ResolveQueue names the ClusterQueue that admits a task c submits
	// with spec ("" when none applies).
	ResolveQueue(ctx context.Context, c sched.Caller, spec task.Spec) (string, error)
	// ListTasks lists c's tasks as the task API does (a group's tasks
	// that no task group has: GetGroup).
	ListTasks(ctx context.Context, c sched.Caller, f sched.ListFilter) ([]task.Task, string, error)
}

// TaskEvents is told about tasks written outside the task use cases (the
// scheduler's hub: it wakes claims and the tasks' watchers, and tells the
// process manager).
type TaskEvents interface {
	// Changed reports a task that changed.
	Changed(t task.Task)
	// WakeClaimers reports that work may have appeared.
	WakeClaimers()
}

// Lock elects the one replica that looks for groups whose time has come
// (the scheduler's advisory locks; see sched.SweeperLock).
type Lock interface {
	TryLock(ctx context.Context) (sched.HeldLock, bool, error)
}

// Config tunes the process manager.
type Config struct {
	// Reconcile is how often the elected replica asks the store which
	// groups are due (default 1s). It catches what no signal reported: a
	// restart, a member changed on a replica that died before advancing
	// its group, a repeat's timer set on another replica.
	Reconcile time.Duration
	// Workers advance groups at once (default 4); one group is never
	// advanced by two of them at a time.
	Workers int
}

func (c *Config) defaults() {
	if c.Reconcile <= 0 {
		c.Reconcile = time.Second
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
}

// App is the orchestration use cases.
type App struct {
	groups    GroupStore
	templates TemplateStore
	tasks     Tasks
	events    TaskEvents
	lock      Lock
	now       func() time.Time
	cfg       Config
	log       *slog.Logger
	newID     func() string

	mgr manager

	wmu      sync.Mutex
	watchers map[string]map[chan struct{}]struct{}
}

// Deps are what the use cases work on.
type Deps struct {
	Groups    GroupStore
	Templates TemplateStore
	Tasks     Tasks
	Events    TaskEvents
	Lock      Lock
}

// New returns the use cases; now is the clock. RunManager moves groups
// on; until it runs, groups are created and read but do not advance.
func New(d Deps, now func() time.Time, cfg Config, log *slog.Logger) *App {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &App{groups: d.Groups, templates: d.Templates, tasks: d.Tasks, events: d.Events, lock: d.Lock,
		now: func() time.Time { return now().UTC() }, cfg: cfg, log: log,
		newID:    func() string { return uuid.Must(uuid.NewV7()).String() },
		watchers: map[string]map[chan struct{}]struct{}{}}
	a.mgr.init()
	return a
}

// mutate runs a group command and tells everyone what it wrote.
func (a *App) mutate(ctx context.Context, c sched.Caller, id string, scope Scope,
	decide func(s orch.State, facts map[string]orch.Facts, now time.Time) (orch.State, orch.Decision, error)) (orch.State, error) {
	s, _, err := a.mutateTasks(ctx, c, id, scope, decide)
	return s, err
}

// mutateTasks is mutate that also returns the tasks the command wrote.
//
// A command that refuses may still have decided something: it caught the
// group up with its members first (orch.State.Cancel, RetryMember), and
// what the group learned on the way — that its members have all ended, so
// has the group — stands whatever the command then made of it. Such a
// decision is stored and the refusal returned after it.
func (a *App) mutateTasks(ctx context.Context, c sched.Caller, id string, scope Scope,
	decide func(s orch.State, facts map[string]orch.Facts, now time.Time) (orch.State, orch.Decision, error)) (orch.State, []task.Task, error) {
	var refused error
	s, written, err := a.groups.Mutate(ctx, c.Tenant, id, scope, func(s orch.State, facts map[string]orch.Facts) (orch.State, orch.Decision, error) {
		refused = nil // the store may run decide again
		next, d, err := decide(s, facts, a.now())
		if err != nil && !d.Empty() {
			refused, err = err, nil
		}
		return next, withIP(d, c.IP), err
	})
	if err != nil {
		return s, nil, err
	}
	a.committed(s, written)
	return s, written, refused
}

// withIP stamps the address of the client whose command decided d on its
// group events and on the member tasks it created, as the task app does
// on a task's own events.
func withIP(d orch.Decision, ip string) orch.Decision {
	if ip == "" {
		return d
	}
	for i := range d.Records {
		// What the command recorded of the members on the way is the
		// process manager's, as it would have recorded it a moment later.
		if d.Records[i].Actor != orch.ProcessManager {
			d.Records[i].IP = ip
		}
	}
	for _, recs := range d.NewTasks {
		for i := range recs {
			recs[i].IP = ip
		}
	}
	return d
}

// templateIP stamps the client's address on a template's events.
func templateIP(recs []orch.Record, ip string) []orch.Record {
	for i := range recs {
		recs[i].IP = ip
	}
	return recs
}

// committed tells the task hub about every task written and wakes the
// group's watchers and, for a repeat, sets its timer. New tasks wake the
// claims once: a dag releases a thousand at a time, nobody watches them
// yet, and the group that made them needs no touch.
func (a *App) committed(s orch.State, written []task.Task) {
	woken := false
	for _, t := range written {
		if t.Version == 1 {
			woken = true
			continue
		}
		a.events.Changed(t)
	}
	if woken {
		a.events.WakeClaimers()
	}
	a.changed(s.Group.ID)
	a.mgr.schedule(a, s.Group)
}

// Watch subscribes to changes of one group until cancel is called: the
// channel receives after every write of the group on this replica.
func (a *App) Watch(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	a.wmu.Lock()
	if a.watchers[id] == nil {
		a.watchers[id] = map[chan struct{}]struct{}{}
	}
	a.watchers[id][ch] = struct{}{}
	a.wmu.Unlock()
	return ch, func() {
		a.wmu.Lock()
		delete(a.watchers[id], ch)
		if len(a.watchers[id]) == 0 {
			delete(a.watchers, id)
		}
		a.wmu.Unlock()
	}
}

func (a *App) changed(id string) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	for ch := range a.watchers[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
