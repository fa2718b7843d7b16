// Package admission is the quota service's admission layer: Kueue-style
// ClusterQueues, cohorts and LocalQueues around the pure admission core.
// It records definitions and workloads as events (schema Schema), relays
// them to the quota topic where the scheduler reads its decisions
// (WorkloadAdmitted, WorkloadPreemptionRequested), follows the task topic
// to learn when work is queued and when it ends, and serves
// AdmissionService. The quota service's process (quota.Run) composes it
// with New, Register and Run, beside the quota service on one gRPC server.
package admission

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/deadletter"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/outbox"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/adapters/kueue"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/adapters/tasks"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/ports"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Schema is the admission layer's default Postgres schema.
const Schema = "admission"

// Topic carries the quota service's events, this layer's among them.
var Topic = kafka.EnvelopeTopic(&quotav1.QuotaEvent{})

// TaskTopic carries the scheduler's task events.
var TaskTopic = kafka.EnvelopeTopic(&taskv1.TaskEvent{})

// Migrations are the admission schema's: the event store, projection
// offsets, and this layer's tables.
func Migrations() []pg.MigrationSet {
	own, err := pg.LoadMigrations("admission", migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	return []pg.MigrationSet{eventstore.Migrations(), projection.Migrations(), own}
}

// GUQuotas checks the GU quota a task names; see app.GUQuotas.
type GUQuotas = app.GUQuotas

// WorkGroup is a GU quota's running WorkGroup.
type WorkGroup = app.WorkGroup

// Config configures the layer.
type Config struct {
	DB         *pgxpool.Pool // search_path starts with the admission schema, migrated
	Kafka      kafka.Config
	Topic      string // default Topic
	TaskTopic  string // default TaskTopic
	Partitions int32  // when creating topics (default 16)
	// GUQuotas checks GU quotas named by tasks; nil refuses them.
	GUQuotas GUQuotas
	// NoDefaults skips the embedded default queues (DefaultDefinitions).
	NoDefaults bool
	// Tick is how often the admission loop looks for work unprompted
	// (default 200ms).
	Tick   time.Duration
	Now    func() time.Time
	Logger *slog.Logger
}

// Service is a running admission layer.
type Service struct {
	cfg   Config
	app   *app.App
	loop  *app.Loop
	relay *outbox.Relay
	log   *slog.Logger
	// defaultsRecorded is set once RecordDefaults has succeeded: Run
	// skips what the server did before serving.
	defaultsRecorded atomic.Bool
}

// New builds the layer; Run starts its background work.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil {
		return nil, errors.New("admission: no database")
	}
	// Held for the service's lifetime: relay, projection runner, loop.
	if need := int32(3 + 3); cfg.DB.Config().MaxConns < need {
		return nil, fmt.Errorf("admission: the database pool allows %d connections; it needs at least %d", cfg.DB.Config().MaxConns, need)
	}
	if cfg.Topic == "" {
		cfg.Topic = Topic
	}
	if cfg.TaskTopic == "" {
		cfg.TaskTopic = TaskTopic
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 16
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, log: cfg.Logger.With("service", "admission")}
	s.relay = outbox.New(cfg.DB, outbox.Config{Name: "admission", Topic: cfg.Topic, Partitions: cfg.Partitions,
		Kafka: cfg.Kafka, Logger: s.log})
	store := postgres.Store{DB: cfg.DB, Events: eventstore.New()}
	s.loop = app.NewLoop(store, kueue.New, cfg.Now, s.log, app.LoopConfig{Tick: cfg.Tick, AfterCommit: s.relay.Notify,
		Released: func() { s.app.QueueReleased() }})
	s.app = app.New(app.Options{Store: store, Validate: kueue.Validate, Loop: s.loop, GUQuotas: cfg.GUQuotas,
		TierQueues: TierQueues, Now: cfg.Now, Logger: s.log, AfterWrite: s.relay.Notify})
	return s, nil
}

// Register adds AdmissionService, and DeadLetterService over the records
// its task-topic projection parked (the quota process's dead letters), to
// a server built with platform/grpcserver.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	quotav1.RegisterAdmissionServiceServer(g, &ports.AdmissionServer{App: s.app, Log: s.log})
	deadletterv1.RegisterDeadLetterServiceServer(g, &deadletter.Server{Service: "quota", DB: s.cfg.DB, Log: s.log})
}

// Workloads names the projection of the task topic into workload facts.
const Workloads = "admission_workloads"

// ReplaySpecs describe the layer's Kafka projection for `taskmesh replay`:
// workload_task_versions (the last task event each workload saw) is
// rebuilt and compared; the facts it hands the admission loop are consumed
// by the loop, so their replay goes to a scratch table.
func ReplaySpecs(k kafka.Config) []projection.ReplaySpec {
	return []projection.ReplaySpec{{Name: Workloads, Topic: TaskTopic, Tables: []string{"workload_task_versions"},
		Scratch: []string{"workload_facts"}, Kafka: k, NewHandler: func(m map[string]string) projection.Handler {
			return tasks.WorkloadFacts{Facts: m["workload_facts"], Versions: m["workload_task_versions"]}
		}}}
}

// SyncWorkGroups makes the work_group ClusterQueues follow the WorkGroups
// that exist, with their status (one queue gu-<tenant>-<quota> each, open
// while its WorkGroup runs, closed from when it stops); call it whenever
// they may have changed.
func (s *Service) SyncWorkGroups(ctx context.Context, groups []WorkGroup) error {
	return s.app.SyncWorkGroups(ctx, groups)
}

// RecordDefaults records the embedded defaults whose names do not exist
// yet (nothing with Config.NoDefaults). A caller that serves the API
// calls it before serving, so no one lists the queues in the moment
// before they exist; calling it again writes nothing.
func (s *Service) RecordDefaults(ctx context.Context) error {
	if s.cfg.NoDefaults || s.defaultsRecorded.Load() {
		return nil
	}
	if err := s.app.ApplyDefaults(ctx, DefaultDefinitions()); err != nil {
		return fmt.Errorf("admission: defaults: %w", err)
	}
	s.defaultsRecorded.Store(true)
	return nil
}

// Run records the embedded defaults (RecordDefaults), then relays events,
// follows the task topic and runs the admission loop until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	if err := s.RecordDefaults(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it began: not a failure
		}
		return err
	}
	// The first part that fails stops the others, and its error is Run's.
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.relay.Run(ctx) })
	facts := projection.NewRunner(s.cfg.DB, projection.Config{Name: Workloads, Topic: s.cfg.TaskTopic,
		Partitions: s.cfg.Partitions, Kafka: s.cfg.Kafka, Logger: s.log,
		AfterCommit: func([]*kgo.Record) { s.loop.Wake() }}, tasks.WorkloadFacts{})
	g.Go(func() error { return facts.Run(ctx) })
	g.Go(func() error { return s.loop.Run(ctx) })
	g.Go(func() error { s.app.RemoveDrainedQueues(ctx); return nil })
	return g.Wait()
}
