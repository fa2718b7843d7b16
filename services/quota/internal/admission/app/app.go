package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
}

// DefinitionStore is what the definition use cases read and write
// (package adapters/postgres).
type DefinitionStore interface {
	LoadDefinitions(ctx context.Context, tx pgx.Tx) (Definitions, error)
	ListDefinitions(ctx context.Context, q eventstore.Querier, kind DefinitionKind) ([]Definition, error)
	GetDefinition(ctx context.Context, q eventstore.Querier, kind DefinitionKind, name string) (Definition, bool, error)
	// LockDefinitions serializes definition changes with each other and
	// with admission cycles, and tells the loop the topology changed.
	LockDefinitions(ctx context.Context, tx pgx.Tx) error
	SaveDefinition(ctx context.Context, tx pgx.Tx, d Definition, deleted bool, at time.Time, ev eventstore.Event) error
	AggregateVersion(ctx context.Context, tx pgx.Tx, aggregateID string) (int64, error)
	AdmittedIn(ctx context.Context, tx pgx.Tx, clusterQueue string) (int, error)
	Workload(ctx context.Context, q eventstore.Querier, taskID string) (WorkloadRecord, bool, error)
}

// App holds the use cases.
type App struct {
	db       *pgxpool.Pool
	store    DefinitionStore
	validate Validator
	loop     *Loop
	gu       GUQuotas
	tiers    map[string]string
	now      func() time.Time
	log      *slog.Logger
	// afterWrite wakes the relay and the loop after a definition change.
	afterWrite func()
}

// Options configures New.
type Options struct {
	DB       *pgxpool.Pool
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
	return &App{db: o.DB, store: o.Store, validate: o.Validate, loop: o.Loop, gu: o.GUQuotas, tiers: o.TierQueues,
		now: o.Now, log: o.Logger, afterWrite: o.AfterWrite}
}

// Caller is who asks.
type Caller struct {
	TenantID string
	Tier     string
	// Operator: an admin or an internal service acting as one.
	Operator bool
	Actor    string
}
