package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
)

// Errors of the use cases; the ports map them to gRPC codes.
var (
	// ErrNotFound: no such definition, or no such task of the caller's.
	ErrNotFound = errors.New("not found")
	// ErrUnknownQueue: a task names a LocalQueue that does not exist.
	ErrUnknownQueue = errors.New("unknown queue")
	// ErrQueueNotAllowed: the LocalQueue is not open to the caller's
	// tenant or tier.
	ErrQueueNotAllowed = errors.New("queue not allowed")
	// ErrNoQuota: a task's queue could never admit it: its ClusterQueue
	// does not exist or is closing, or has no quota for a resource the
	// task asks for.
	ErrNoQuota = errors.New("no quota to admit it")
	// ErrPermissionDenied: an operator action by a tenant.
	ErrPermissionDenied = errors.New("operators only")
	// ErrInUse: deleting a ClusterQueue with admitted workloads, or a
	// cohort that still has members.
	ErrInUse = errors.New("in use")
	// ErrInvalid wraps a definition the core refuses, or bad resources.
	ErrInvalid = errors.New("invalid")
)

// DefinitionKind names a definition table.
type DefinitionKind string

// Definition kinds.
const (
	KindClusterQueue DefinitionKind = "cluster queue"
	KindCohort       DefinitionKind = "cohort"
	KindLocalQueue   DefinitionKind = "local queue"
)

// Origins of definitions.
const (
	OriginConfig    = "config"
	OriginAPI       = "api"
	OriginWorkGroup = "work_group"
)

// Definition is one recorded ClusterQueue, cohort or LocalQueue; the spec
// matching Kind is set.
type Definition struct {
	Kind         DefinitionKind
	Name         string
	Origin       string
	ClusterQueue *quotav1.ClusterQueueSpec
	Cohort       *quotav1.CohortSpec
	LocalQueue   *quotav1.LocalQueueSpec
	// Closing says why a ClusterQueue admits nothing new: a WorkGroup
	// queue whose WorkGroup no longer runs, kept with a nominal quota of 0
	// while it holds admitted work (docs/api/quota.md#workgroup-queues).
	// Empty for a queue that admits.
	Closing string
	// TenantID is the tenant whose GU quota's WorkGroup a ClusterQueue of
	// origin work_group serves; empty for every other definition. A tenant
	// sees no other tenant's WorkGroup queue (visibleTo).
	TenantID string
}

// DefinitionStore is what the definition use cases, queue resolution and
// explanations read and write (package adapters/postgres). Reads outside
// UpdateDefinitions see committed state.
type DefinitionStore interface {
	// UpdateDefinitions runs fn in one transaction: what fn wrote commits
	// when it returns nil, nothing does otherwise (its error is returned
	// as is). fn may run more than once, each time in a new transaction
	// (after one aborted by concurrent writers), so it changes nothing
	// but tx.
	UpdateDefinitions(ctx context.Context, fn func(tx DefinitionTx) error) error
	// ListDefinitions returns every definition of kind by name.
	ListDefinitions(ctx context.Context, kind DefinitionKind) ([]Definition, error)
	// GetDefinition reads one definition; ok is false when there is none.
	GetDefinition(ctx context.Context, kind DefinitionKind, name string) (d Definition, ok bool, err error)
	// Workload reads one recorded workload; ok is false when there is
	// none (the task never needed admission, or was deleted).
	Workload(ctx context.Context, taskID string) (r WorkloadRecord, ok bool, err error)
}

// DefinitionTx is one definition change: reads see its own writes.
type DefinitionTx interface {
	// LockDefinitions serializes definition changes with each other and
	// with admission cycles, and tells the loop the topology changed: call
	// it before reading what a change decides from.
	LockDefinitions() error
	// LoadDefinitions returns the whole topology (ClusterQueues and
	// cohorts).
	LoadDefinitions() (Definitions, error)
	ListDefinitions(kind DefinitionKind) ([]Definition, error)
	GetDefinition(kind DefinitionKind, name string) (d Definition, ok bool, err error)
	// AggregateVersion is the last recorded version of an aggregate (0:
	// none yet).
	AggregateVersion(aggregateID string) (int64, error)
	// AdmittedIn counts the workloads holding quota (admitted or
	// evicting) in a ClusterQueue.
	AdmittedIn(clusterQueue string) (int, error)
	// SaveDefinition appends ev (the change's event, its version one more
	// than AggregateVersion) and upserts d's row, or removes it when
	// deleted. A version another writer recorded first is
	// eventstore.ErrConflict.
	SaveDefinition(d Definition, deleted bool, at time.Time, ev eventstore.Event) error
}

// App holds the use cases.
type App struct {
	store    DefinitionStore
	validate Validator
	loop     *Loop
	gu       GUQuotas
	tiers    map[string]string
	now      func() time.Time
	log      *slog.Logger
	// afterWrite wakes the relay and the loop after a definition change.
	afterWrite func()
	// released wakes RemoveDrainedQueues (QueueReleased).
	released chan struct{}
}

// Options configures New.
type Options struct {
	Store    DefinitionStore
	Validate Validator
	Loop     *Loop
	// GUQuotas checks GU quotas named by tasks; nil refuses them.
	GUQuotas GUQuotas
	// TierQueues names the LocalQueue GPU work of each tier goes to when
	// it names none; "" is the fallback for an unknown tier.
	TierQueues map[string]string
	Now        func() time.Time
	Logger     *slog.Logger
	AfterWrite func()
}

// New returns the use cases.
func New(o Options) *App {
	return &App{store: o.Store, validate: o.Validate, loop: o.Loop, gu: o.GUQuotas, tiers: o.TierQueues,
		now: o.Now, log: o.Logger, afterWrite: o.AfterWrite, released: make(chan struct{}, 1)}
}

// Caller is who asks.
type Caller struct {
	TenantID string
	Tier     string
	// Operator: an admin or an internal service acting as one.
	Operator bool
	// Actor and IP are what a definition change is recorded as
	// (docs/api/audit.md#an-entry): an operator key id and the address of
	// its request as the gateway saw it, or a service acting on its own
	// and no address.
	Actor string
	IP    string
}

// workGroupUpkeep is the quota service keeping the WorkGroup queues in
// step with the WorkGroups (SyncWorkGroups, RemoveDrainedQueues).
var workGroupUpkeep = Caller{Operator: true, Actor: "quota"}
