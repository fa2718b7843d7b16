// Package app holds the scheduler's use cases, one per file. Each write
// hands a domain decision to the TaskStore, which runs it on the task's
// current state and stores the resulting events together with the state
// after them; reads of one task come from that state, so a client sees its
// own writes at once. Lists come from TaskViews, built from the event
// stream. The package depends only on the interfaces it declares
// (stores.go): the Postgres adapter implements them in production, and the
// in-memory fake of package apptest in tests.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Config tunes the scheduler's timing.
type Config struct {
	// AgentLostAfter: an agent that has not heartbeated for this long is
	// lost and its leases are released (default 15s, three missed 5 s beats).
	AgentLostAfter time.Duration
	// TimeoutSlack: how long past timeout + grace the server waits for the
	// agent to report a timeout itself before failing the attempt (default 30s).
	TimeoutSlack time.Duration
	// ResultURLTTL: how long result links stay valid (default 1h).
	ResultURLTTL time.Duration
	// UploadURLTTL: how long a result upload URL stays valid (default 1h).
	UploadURLTTL time.Duration
	// ClaimRetention: how long claim request ids are remembered (default 1h).
	ClaimRetention time.Duration
	// PreemptGap: a pending task preempts running work when its priority
	// is at least this much higher, or when it is urgent and the work of
	// high priority or lower (domain.PreemptsByPriority; 0 disables).
	PreemptGap int
	// PreemptAfter: how long a preempting task waits for free capacity
	// before taking it (default 2s).
	PreemptAfter time.Duration
	// PreemptMaxWait: a preempted task returns to pending after this long
	// even if its preemptor is still running (default 10m).
	PreemptMaxWait time.Duration
	// MaxWait caps a claim's long poll (default 60s).
	MaxWait time.Duration
	// ClaimRecheck: how often a waiting claim looks again without being
	// woken (default 1s).
	ClaimRecheck time.Duration
	// ResultRetention: results in the object store expire this long after
	// they were stored (default 30 days, docs/operations.md).
	ResultRetention time.Duration
	// ResultSweepInterval: how often the sweeper deletes expired results
	// from a store that cannot expire them itself (default 1h).
	ResultSweepInterval time.Duration
}

func (c *Config) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.AgentLostAfter, 15*time.Second)
	set(&c.TimeoutSlack, 30*time.Second)
	set(&c.ResultURLTTL, time.Hour)
	set(&c.UploadURLTTL, time.Hour)
	set(&c.ClaimRetention, time.Hour)
	set(&c.PreemptAfter, 2*time.Second)
	set(&c.PreemptMaxWait, 10*time.Minute)
	set(&c.MaxWait, 60*time.Second)
	set(&c.ClaimRecheck, time.Second)
	set(&c.ResultRetention, DefaultResultRetention)
	set(&c.ResultSweepInterval, time.Hour)
}

// DefaultResultRetention is how long results stay in the object store
// (docs/operations.md, retention: 30 days).
const DefaultResultRetention = 30 * 24 * time.Hour

// App is the scheduler's use cases.
type App struct {
	tasks   TaskStore
	views   TaskViews
	agents  AgentRegistry
	sweeps  SweepQueries
	sweeper SweeperLock
	objects objectstore.Store
	now     func() time.Time
	cfg     Config
	hub     *Hub
	log     *slog.Logger
	// admission is nil when no quota service is configured: then no task
	// waits for admission.
	admission Admission
	// groups is nil without task groups: then a member is retried as any
	// task.
	groups GroupMembers
	// reserved are the resources only the model-conversion pipeline's own
	// stage tasks may ask for (ReserveResources).
	reserved map[string]bool
	// resultSweep is when the sweeper last deleted expired results, and
	// selfExpiring whether the store expires them itself (no sweep).
	resultSweep  time.Time
	selfExpiring bool
	// releaseKick wakes RunReleases (releaseHeldSoon); heldMayExist says
	// whether a completion should (see RunReleases).
	releaseKick  chan struct{}
	heldMayExist atomic.Bool
	// sweepingSince is when this replica last took the sweeper's lock
	// (Unix ns; 0: it never did, as when tests call Sweep directly).
	sweepingSince atomic.Int64
	// heardSince is the first time an agent was heard from after
	// sweepingSince (Unix ns; 0: not yet), see lostCutoff.
	heardSince atomic.Int64
}

// Stores are the storage the use cases work on.
type Stores struct {
	Tasks   TaskStore
	Views   TaskViews
	Agents  AgentRegistry
	Sweeps  SweepQueries
	Sweeper SweeperLock
}

// New returns the use cases over stores. objects keeps large results (nil
// refuses them); now is the clock.
func New(stores Stores, objects objectstore.Store, now func() time.Time, hub *Hub, cfg Config, log *slog.Logger) *App {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &App{tasks: meteredTasks{TaskStore: stores.Tasks, m: newTaskMetrics()}, views: stores.Views, agents: stores.Agents, sweeps: stores.Sweeps, sweeper: stores.Sweeper,
		objects: objects, now: func() time.Time { return now().UTC() }, cfg: cfg, hub: hub, log: log,
		releaseKick: make(chan struct{}, 1)}
}

// SetAdmission makes tasks that name a queue, a GU quota or resources wait
// for the quota service's admission. Call it before serving.
func (a *App) SetAdmission(adm Admission) { a.admission = adm }

// SetGroups has RetryTask retry the members of task groups through their
// groups. Call it before serving.
func (a *App) SetGroups(g GroupMembers) { a.groups = g }

// ReserveResources keeps names for the model-conversion pipeline's stage
// tasks (a Caller with Pipeline set): the resources its stage queues
// count, one per running stage. A tenant's own task asking for one would
// take a stage's place, every tenant's jobs waiting behind it, so it is
// 30005 (docs/api/pipeline.md, "Pools and caps"). Call it before serving.
func (a *App) ReserveResources(names ...string) {
	if a.reserved == nil {
		a.reserved = map[string]bool{}
	}
	for _, n := range names {
		if n != "" {
			a.reserved[n] = true
		}
	}
}

// Caller is who asks: a tenant's user, an agent, or an admin.
type Caller struct {
	// Tenant scopes every task the caller may see; "*" for admins and
	// shared-pool agents.
	Tenant  string
	Subject string
	AgentID string // agents only
	IP      string
	// Tier is the tenant's tier (premium, standard), when known; it picks
	// the admission queues a task may use.
	Tier string
	// Pipeline is set by the model-conversion pipeline for its own stage
	// tasks, which may ask for the resources it reserved
	// (ReserveResources).
	Pipeline bool
}

// Errors the app adds to the domain's.
var (
	// ErrForbidden: the caller may not act as the agent it names.
	ErrForbidden = errors.New("forbidden")
)

// withIP stamps the caller's address on records.
func withIP(recs []domain.Record, ip string) []domain.Record {
	for i := range recs {
		recs[i].IP = ip
	}
	return recs
}

// checkAgent makes an agent act only as itself.
func (c Caller) checkAgent(agentID string) error {
	if c.AgentID != "" && c.AgentID != agentID {
		return fmt.Errorf("%w: this token belongs to agent %s, not %s", ErrForbidden, c.AgentID, agentID)
	}
	return nil
}

// system is the caller of the scheduler's own decisions (the sweeper,
// admission): every tenant's tasks, no client address.
var system = Caller{Tenant: "*"}

// byClientID runs op on id and, when id names no task of the caller, on
// the task the caller's client knows by that name (TaskStore.TasksNamed:
// a create's body id or ?request_id=, a DAG member's id): a client
// reaches the task it named by that name as well as by the task's own id
// (docs/api/tasks.md, "The client's id"). A
// task id always wins over a client's name, and the lookup runs only when
// op found nothing, so a task's own id costs nothing more. Operators
// ("*") name tasks by their ids only: a client's name is its tenant's.
func (a *App) byClientID(ctx context.Context, c Caller, id string, op func(id string) (domain.Task, error)) (domain.Task, error) {
	t, err := op(id)
	if !errors.Is(err, domain.ErrNotFound) || c.Tenant == "*" || id == "" {
		return t, err
	}
	named, lerr := a.tasks.TasksNamed(ctx, c.Tenant, []string{id})
	if lerr != nil {
		return t, lerr
	}
	if taskID, ok := named[id]; ok && taskID != id {
		return op(taskID)
	}
	return t, err
}

// mutateNamed is mutate of a task a user names, by its id or by the name
// its create gave it (byClientID).
func (a *App) mutateNamed(ctx context.Context, c Caller, id string, decide func(t domain.Task, now time.Time) ([]domain.Record, error)) (domain.Task, error) {
	return a.byClientID(ctx, c, id, func(id string) (domain.Task, error) { return a.mutate(ctx, c, id, decide) })
}

// mutate runs one domain decision on one task (TaskStore.Mutate, which
// batches it with concurrent decisions on other tasks) and returns the task
// after it. A decision that records nothing (an idempotent repeat) returns
// the task as it was. Tasks of other tenants do not exist for the caller.
// The records carry the caller's address (the audit log's ip).
func (a *App) mutate(ctx context.Context, c Caller, id string, decide func(t domain.Task, now time.Time) ([]domain.Record, error)) (domain.Task, error) {
	recorded := false
	out, err := a.tasks.Mutate(ctx, id, func(t domain.Task) ([]domain.Record, error) {
		if c.Tenant != "*" && t.TenantID != c.Tenant {
			return nil, domain.ErrNotFound
		}
		recs, err := decide(t, a.now())
		recorded = err == nil && len(recs) > 0 // the last decision is the one stored
		return withIP(recs, c.IP), err
	})
	if err == nil {
		a.hub.Changed(out)
		if recorded {
			a.finishAtOnce(ctx, out)
			if out.Status == domain.StatusCompleted && a.heldMayExist.Load() || out.HeldForDependencies {
				// Its dependents may be free to queue, or (held, written
				// again) it may be.
				a.releaseHeldSoon()
			}
		}
	}
	return out, err
}
