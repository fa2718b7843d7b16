// The quota service's entry: New builds it on a migrated schema, Register
// serves QuotaService, Run relays its events and drives its flows; the
// package's Run (server.go) is the whole process with its gRPC server. See
// doc.go for the package overview.

package quota

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/outbox"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/quota/internal/adapters/inprocess"
	"github.com/taskmesh/taskmesh/services/quota/internal/adapters/kubernetes"
	"github.com/taskmesh/taskmesh/services/quota/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Topic carries every quota event, keyed by aggregate id (the topic
// QuotaEvent declares in its proto).
var Topic = kafka.EnvelopeTopic(&quotav1.QuotaEvent{})

// Schema is the quota service's default Postgres schema.
const Schema = "quota"

// Migrations are the quota schema's: the event store and the inline
// projection.
func Migrations() []pg.MigrationSet {
	own, err := pg.LoadMigrations("quota", migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	return []pg.MigrationSet{eventstore.Migrations(), own}
}

// Operator is the cluster operator the process manager drives; see
// app.Operator for its contract. The in-process operator (the default
// when Config.Operator is nil) and NewKubernetesOperator implement it.
type Operator = app.Operator

// Config configures the service.
type Config struct {
	DB         *pgxpool.Pool // search_path starts with the quota schema, migrated
	Kafka      kafka.Config
	Topic      string // default Topic
	Partitions int32  // when creating the topic (default 16)
	// Operator creates Ray clusters and WorkGroups; nil means an
	// in-process operator with OperatorDelay.
	Operator      Operator
	OperatorDelay time.Duration
	// PassInterval is how often the process manager looks for pending work
	// besides being woken (default 1s).
	PassInterval time.Duration
	Now          func() time.Time
	NewID        func() string
	Logger       *slog.Logger
	// Fault is the process manager's fault hook (tests only).
	Fault func(step string) error
}

// Service is a running quota service.
type Service struct {
	cfg      Config
	store    *postgres.Store
	app      *app.App
	pm       *app.ProcessManager
	operator Operator
	relay    *outbox.Relay
	log      *slog.Logger
	// syncMu serializes the WorkGroup queues' syncs (SyncAdmission).
	syncMu sync.Mutex
}

// New builds the service; Run starts its background work.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil {
		return nil, errors.New("quota: no database")
	}
	if need := int32(4); cfg.DB.Config().MaxConns < need {
		return nil, fmt.Errorf("quota: the database pool allows %d connections; it needs at least %d", cfg.DB.Config().MaxConns, need)
	}
	if cfg.Topic == "" {
		cfg.Topic = Topic
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, log: cfg.Logger.With("service", "quota")}
	s.relay = outbox.New(cfg.DB, outbox.Config{Name: "quota", Topic: cfg.Topic, Partitions: cfg.Partitions, Kafka: cfg.Kafka, Logger: s.log})
	s.store = postgres.NewStore(cfg.DB, nil)
	s.app = app.New(s.store, cfg.Now, cfg.NewID, s.log)
	op := cfg.Operator
	if op == nil {
		op = inprocess.New(inprocess.Config{Delay: cfg.OperatorDelay, Now: cfg.Now, OnChange: s.wake})
	}
	s.operator = op
	s.pm = app.NewProcessManager(s.app, s.store, op, cfg.PassInterval)
	s.pm.Fault = cfg.Fault
	s.store.AfterCommit = func(events []capacity.Event) {
		s.relay.Notify()
		s.app.Committed(events)
		s.pm.Wake()
	}
	return s, nil
}

func (s *Service) wake() {
	if s.pm != nil {
		s.pm.Wake()
	}
}

// App is the service's use cases, for in-process callers (the admission
// layer: CheckGUQuota, RunningWorkGroups, WatchWorkGroups).
func (s *Service) App() *app.App { return s.app }

// Run relays events to Kafka and drives production and unsubscription
// until ctx is done. It returns app.ErrStopped if the fault hook stopped
// the process manager.
func (s *Service) Run(ctx context.Context) error {
	// A stopped process manager stops the whole service, like a crash: the
	// group cancels the relay.
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.relay.Run(ctx) })
	if w, ok := s.operator.(interface {
		Watch(context.Context, func())
	}); ok {
		w.Watch(ctx, s.pm.Wake) // status changes wake the process manager
	}
	g.Go(func() error { return s.pm.Run(ctx) })
	return g.Wait()
}

// Register adds QuotaService to a server built with platform/grpcserver.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	registerPorts(g, s)
}

// operatorCaller is the service acting for its operator: the embedded
// defaults recorded at start (the audit log's "config").
var operatorCaller = app.Caller{Admin: true, Actor: app.Actor{ID: "config"}}

// EnsureCluster records the cluster if it is new and sets its inventory
// (GPUs per machine type), for embedded defaults; existing values that
// match change nothing.
func (s *Service) EnsureCluster(ctx context.Context, name, description string, inventory map[string]int64) error {
	if _, err := s.app.CreateCluster(ctx, operatorCaller, name, description); err != nil && !errors.Is(err, capacity.ErrExists) {
		return err
	}
	for mt, n := range inventory {
		if _, err := s.app.SetInventory(ctx, operatorCaller, name, mt, n); err != nil && !errors.Is(err, capacity.ErrConflict) {
			return err
		}
	}
	return nil
}

// RegisterTenant records a tenant (same id as the gateway's) or renames it.
func (s *Service) RegisterTenant(ctx context.Context, id, name string) error {
	_, err := s.app.RegisterTenant(ctx, operatorCaller, id, name)
	return err
}

// NewKubernetesOperator returns the cluster operator that writes the MFS
// custom resources (deployments/kubernetes/50-mfs-crds.yaml) into
// namespace of the cluster cfg reaches.
func NewKubernetesOperator(cfg *rest.Config, namespace string) (Operator, error) {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("quota: kubernetes client: %w", err)
	}
	return kubernetes.New(client, namespace), nil
}
