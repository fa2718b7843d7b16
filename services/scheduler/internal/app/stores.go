package app

import (
	"context"
	"errors"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// The interfaces below are what the use cases need from storage. The
// Postgres adapter implements them (package adapters/postgres); the
// recording fake in package apptest implements them in memory, and
// apptest's contract suites hold both to the same behaviour.

// TaskStore keeps the task aggregate: its events and, written with them,
// the state every decision starts from. A client reads its own writes: Get
// after a successful write shows it.
//
// Writes may be batched with concurrent writes of other callers (and
// replayed when such a batch is retried), so every decide/lease function
// passed in must be pure: a function of its arguments, with no effects
// outside its return values.
type TaskStore interface {
	// Get returns a task of tenant ("*": of any tenant). A task of another
	// tenant, a deleted one and an unknown id are all domain.ErrNotFound.
	Get(ctx context.Context, tenant, id string) (domain.Task, error)

	// GetMany returns the tasks of tenant ("*": of any tenant) among ids,
	// in no particular order; another tenant's, deleted and unknown ids
	// are left out.
	GetMany(ctx context.Context, tenant string, ids []string) ([]domain.Task, error)

	// Mutate runs decide on the task's current state and stores what it
	// recorded: the events, and the task after domain.Apply of each. It
	// returns the task after them (as it was, when decide recorded
	// nothing). An unknown or deleted task is domain.ErrNotFound, and
	// decide is not called. An error from decide is returned as it is and
	// nothing is stored. ErrStopping once the store no longer takes writes.
	Mutate(ctx context.Context, id string, decide func(t domain.Task) ([]domain.Record, error)) (domain.Task, error)

	// Create stores new tasks, all or none, and returns them as stored.
	// With a RequestID the tenant already used, it stores nothing and
	// returns the tasks of that first create as they are now; a concurrent
	// duplicate waits for the first to commit. ErrStopping once the store
	// no longer takes writes.
	Create(ctx context.Context, n NewTasks) ([]domain.Task, error)

	// Claim runs one claim of agentID as one write. When the agent made a
	// claim with requestID before, it returns that claim's tasks as they
	// are now and changes nothing (the caller keeps those the claim still
	// holds). When the sweeper has found the agent lost and it has not
	// been heard from since, it leases nothing and returns nothing: the
	// sweeper released the agent's leases, and a long poll the agent
	// sent before it fell silent must not take them back (the check is
	// in the same write as the leases, so no release slips between).
	// Otherwise it takes up to f.Limit
	// claimable candidates (see ClaimFilter) that no concurrent claim
	// holds, in (priority, created_at) order, and calls lease once with
	// them: lease returns each candidate's records (nil: not leased). It
	// stores them, remembers (agentID, requestID) → the leased task ids for
	// the claim's retries, and returns the leased tasks. No candidate: it
	// returns nothing and remembers nothing. An error from lease is
	// returned and nothing is stored. ErrStopping once the store no longer
	// takes writes.
	Claim(ctx context.Context, agentID, requestID string, f ClaimFilter,
		lease func(candidates []domain.Task) ([][]domain.Record, error)) ([]domain.Task, error)

	// MissingTasks returns which of ids are not tasks of tenant (deleted
	// ones are missing).
	MissingTasks(ctx context.Context, tenant string, ids []string) ([]string, error)

	// TasksNamed maps each of names to the task tenant's client knows by
	// that name; names that name none are left out. A name is a request
	// id tenant created tasks with (a create body's id or its
	// ?request_id=), naming the first task that create made, as recorded
	// by Create; failing that, in a store that also keeps task groups,
	// the key of a released member of tenant's newest group with a member
	// of that key (a DAG member's id). The task may have been deleted since.
	TasksNamed(ctx context.Context, tenant string, names []string) (map[string]string, error)

	// VideoTasksCreatedBefore returns up to limit video tasks of every
	// tenant created before before, oldest first; deleted ones are
	// skipped.
	VideoTasksCreatedBefore(ctx context.Context, before time.Time, limit int) ([]domain.Task, error)
}

// NewTasks is one submission to store.
type NewTasks struct {
	Tenant string
	// RequestID, when set, makes the create idempotent per tenant.
	RequestID string
	// Rerunnable: RequestID is the client's name for its task (a task
	// file's id), not a retry key. Once every task of the earlier create
	// with it ended (domain.Ended), a create with it makes new tasks and
	// the name moves to them; before that it answers the earlier tasks.
	Rerunnable bool
	// At is when the submission happened.
	At time.Time
	// Tasks holds each new task's records (domain.Submit), in the order
	// Create returns them.
	Tasks [][]domain.Record
}

// ClaimFilter describes the agent asking for work. A task is a candidate
// when it is pending and not deleted, not waiting for admission, its
// retry_at has come (at Now), it belongs to Tenant ("*": any tenant), its
// target machine and address (if any) are Machine and IP, the agent has
// every label it requires, its type is one of Types (empty: any), every
// task it depends on completed, and, for a scatter fan-out, no sibling
// was assigned to Machine.
type ClaimFilter struct {
	Tenant  string
	Machine string
	IP      string
	Labels  []string
	Types   []string
	Limit   int
	Now     time.Time
}

// TaskViews is the list read model: built from the event stream, so it
// trails writes (eventually consistent).
type TaskViews interface {
	// List returns a page of tasks matching f, newest first (created_at,
	// then id), and the token of the next page ("" on the last). Tasks
	// created meanwhile do not shift pages. A page token List did not make
	// is ErrBadPageToken.
	List(ctx context.Context, f ListFilter) ([]domain.Task, string, error)
	// Unapplied returns the changes of tenant's tasks ("*": every
	// tenant's) committed before the call that the read model does not
	// show yet, among the latest changes of the event store (a bounded
	// window: a projection far behind is not waited for change by change).
	Unapplied(ctx context.Context, tenant string) ([]TaskVersion, error)
	// Applied reports whether the read model shows every one of changes.
	Applied(ctx context.Context, changes []TaskVersion) (bool, error)
}

// TaskVersion is one change of a task: the task's version after it.
type TaskVersion struct {
	ID      string
	Version int64
}

// ListFilter selects tasks to list. Zero fields match everything.
type ListFilter struct {
	Tenant                      string // "*" = every tenant
	Status, Machine, Group      string // Machine: the target or the assigned machine
	Type                        string // one of domain.Types
	Priority                    int
	CreatedAfter, CreatedBefore time.Time // [after, before)
	PageSize                    int       // default 50
	PageToken                   string
	// Offset skips that many matching tasks before the page (at most
	// MaxListOffset); not with PageToken.
	Offset int
}

// MaxListOffset bounds ListFilter.Offset: a page is found by reading the
// tasks before it, so deeper pages are reached with page tokens.
const MaxListOffset = 10000

// DefaultPageSize is a list's page size when the request names none.
const DefaultPageSize = 50

// ErrBadPageToken is TaskViews.List's answer to a page token it did not
// make.
var ErrBadPageToken = &domain.InvalidError{Field: "page_token", Reason: "is not a token from a previous page"}

// AgentRegistry knows the executor agents from their heartbeats, and
// which of them are drained.
type AgentRegistry interface {
	// Heartbeat records a alive until a.LostAfter (a lost agent that
	// heartbeats is alive again) and as a describes it, and marks it as an
	// agent that heartbeats, whose silence makes it lost (LostAgents). With
	// the same round trip it reads what the answer to the heartbeat depends
	// on, held being the attempts the agent runs now.
	Heartbeat(ctx context.Context, a Agent, held []string) (HeartbeatReads, error)
	// Seen records a alive until a.LostAfter, with its machine, tenant,
	// address and labels, keeping what its heartbeats said of its slots,
	// version and isolation (a claim proves the agent alive but does not
	// describe it).
	Seen(ctx context.Context, a Agent) error
	// Machines returns the distinct machines, sorted, of live agents that
	// serve tenant (or every tenant) and have every label in labels.
	Machines(ctx context.Context, tenant string, labels []string) ([]string, error)
	// Fleet returns the agents with these ids (every one when ids is
	// empty) that have heartbeated, claimed or been drained, by id, each
	// with the tasks leased to it now.
	Fleet(ctx context.Context, ids []string) ([]FleetAgent, error)
	// SetDrained drains the agent from at (keeping an earlier drain's
	// time) or, with drained false, undrains it.
	SetDrained(ctx context.Context, agentID string, drained bool, at time.Time) error
	// Drained reports whether the agent is drained.
	Drained(ctx context.Context, agentID string) (bool, error)
}

// HeartbeatReads is what the answer to an agent's heartbeat depends on,
// read in the round trip that records the heartbeat. An agent stops its
// tasks when its heartbeats go unanswered for less than AgentLostAfter
// (docs/executor.md, "Fencing"), and on a loaded machine each round trip
// waits for a connection and for the database to be scheduled: a slow
// answer fences a live agent. One round trip instead of five is one wait.
type HeartbeatReads struct {
	// Held are the agent's tasks whose current attempt is one it runs now,
	// while the attempt is leased, cancelled, preempted or suspended (the
	// states in which an agent may still run it).
	Held []domain.Task
	// Preempted are the tasks with a ClusterQueue that were preempted while
	// the agent ran them.
	Preempted []domain.Task
	// Unheld are the ids of the assigned (not yet started) tasks leased to
	// the agent whose attempt it does not run.
	Unheld []string
	// Drained reports whether the agent is drained.
	Drained bool
}

// Agent is an executor agent as its heartbeats describe it.
type Agent struct {
	AgentID, MachineID string
	// TenantID is the tenant the agent serves; "" for the shared pool.
	TenantID, IP               string
	Labels                     []string
	FreeSlots                  int
	LastHeartbeatAt, LostAfter time.Time
	// Slots is how many tasks it runs at once, Version its software,
	// Isolation how it limits a task's resources (cgroup-v2, cgroup-v1,
	// rlimit) and Warnings what it runs degraded.
	Slots     int
	Version   string
	Isolation string
	Warnings  []string
}

// FleetAgent is an agent as operators see it.
type FleetAgent struct {
	Agent
	// Seen is false for an agent known only because it was drained.
	Seen        bool
	FirstSeenAt time.Time
	Lost        bool
	Drained     bool
	DrainedAt   time.Time
	// RunningTaskIDs are the tasks leased to it now, by id.
	RunningTaskIDs []string
}

// SweepQueries are the sweeper's questions. Each returns task ids of any
// tenant; the sweeper decides about each task again on its current state,
// so an answer that is already stale changes nothing.
type SweepQueries interface {
	// LostAgents marks the agents whose LostAfter is before now as lost
	// and returns those of them that heartbeat (have sent a Heartbeat),
	// each agent once, until it heartbeats again: their leases are to be
	// released. An agent only ever seen through its claims is marked lost
	// (its machine no longer counts as live) but not returned: its
	// heartbeat is its lease renewal, so its leases expire instead.
	LostAgents(ctx context.Context, now time.Time) ([]string, error)
	// LatestHeartbeat returns the latest time any agent was heard from (a
	// heartbeat or a claim, through any replica), or the zero time when
	// none ever was.
	LatestHeartbeat(ctx context.Context) (time.Time, error)
	// LeasesOf returns the leased (assigned or running) tasks agentID holds.
	LeasesOf(ctx context.Context, agentID string) ([]string, error)
	// ExpiredLeases returns up to limit leased tasks whose lease ended
	// before now, soonest expired first.
	ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]string, error)
	// Overdue returns up to limit running tasks whose timeout plus grace
	// period ended more than slack before now.
	Overdue(ctx context.Context, now time.Time, slack time.Duration, limit int) ([]string, error)
	// ReleasablePreempted returns up to limit preempted tasks without a
	// ClusterQueue whose preemptor is final, deleted or gone, or that were
	// preempted more than maxWait before now.
	ReleasablePreempted(ctx context.Context, now time.Time, maxWait time.Duration, limit int) ([]string, error)
	// StrandedEvictions returns up to limit preempted tasks with a
	// ClusterQueue whose agent is lost or unknown, or whose preemption is
	// older than their grace period plus slack: no heartbeat will confirm
	// they stopped.
	StrandedEvictions(ctx context.Context, now time.Time, slack time.Duration, limit int) ([]string, error)
	// BlockedByFailure returns up to limit pending tasks with a dependency
	// that failed, was cancelled or was deleted, each mapped to one such
	// dependency.
	BlockedByFailure(ctx context.Context, limit int) (map[string]string, error)
	// ReleasableHeld returns up to limit pending tasks held out of their
	// ClusterQueue for dependencies (domain.Task.HeldForDependencies) that
	// have all completed, oldest first.
	ReleasableHeld(ctx context.Context, limit int) ([]string, error)
	// AnyHeld reports whether any pending task is held for its
	// dependencies, released or not.
	AnyHeld(ctx context.Context) (bool, error)
	// PreemptionCandidates returns up to limit pending tasks created (and
	// due) before waitedSince, not waiting for admission or for a
	// dependency, that no live
	// agent with a free slot could take and that have not preempted
	// anything yet, highest priority first, each paired with the leased
	// task of a live agent able to run it whose priority is at least gap
	// lower (the lowest priority, most recently started one) and that is
	// in no ClusterQueue: admitted work holds its queue's quota and only
	// the quota service preempts it (Evict). No victim appears twice.
	PreemptionCandidates(ctx context.Context, waitedSince time.Time, gap, limit int) ([]Preemption, error)
	// PruneClaims forgets the claims made before before: their retries
	// then lease anew.
	PruneClaims(ctx context.Context, before time.Time) error
}

// Preemption pairs a pending task with the leased task it may replace.
type Preemption struct {
	Preemptor string
	Priority  int // the preemptor's
	Victim    string
}

// SweeperLock elects the one replica that sweeps.
type SweeperLock interface {
	// TryLock takes the lock when it is free; ok is false when another
	// replica holds it.
	TryLock(ctx context.Context) (lock HeldLock, ok bool, err error)
}

// HeldLock is a lock this replica holds.
type HeldLock interface {
	// Alive returns an error once the lock may have been lost; the holder
	// must stop the work it guards.
	Alive(ctx context.Context) error
	// Release gives the lock up.
	Release()
}

// ErrStopping: the store takes no more writes because the service is
// shutting down.
var ErrStopping = errors.New("scheduler is shutting down")
