// Package scheduler is the scheduler service: it owns the task aggregate
// (submission, leases and attempts, retries, timeouts, cancellation,
// preemption) and serves TaskService and LeaseService over gRPC. The
// taskmesh binary runs it with Run (server.go), which builds it with New,
// registers it on its own gRPC server and runs Service.Run beside it.
package scheduler

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/deadletter"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/platform/outbox"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/archive"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/quota"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/views"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	mapp "github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app"
	mports "github.com/taskmesh/taskmesh/services/scheduler/internal/managed/ports"
	oapp "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app"
	oports "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/ports"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/ports"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Topic carries every task event, keyed by task id (the topic TaskEvent
// declares in its proto).
var Topic = kafka.EnvelopeTopic(&taskv1.TaskEvent{})

// QuotaTopic carries the quota service's events, among them its admission
// decisions.
var QuotaTopic = kafka.EnvelopeTopic(&quotav1.QuotaEvent{})

// OrchestrationTopic carries the task-group and template events, keyed by
// aggregate (the topic OrchestrationEvent declares in its proto).
var OrchestrationTopic = kafka.EnvelopeTopic(&taskv1.OrchestrationEvent{})

// ManagedTopic carries the managed-service events, keyed by service (the
// topic ManagedServiceEvent declares in its proto).
var ManagedTopic = kafka.EnvelopeTopic(&managedv1.ManagedServiceEvent{})

// Schema is the scheduler's default Postgres schema.
const Schema = "scheduler"

// Migrations are the scheduler schema's: the event store, projection
// offsets, and the scheduler's own tables.
func Migrations() []pg.MigrationSet {
	own, err := pg.LoadMigrations("scheduler", migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	return []pg.MigrationSet{eventstore.Migrations(), projection.Migrations(), own}
}

// Timing tunes leases, heartbeats and preemption; zero values take the
// defaults documented on each field of app.Config.
type Timing struct {
	AgentLostAfter, TimeoutSlack, ResultURLTTL, UploadURLTTL time.Duration
	PreemptAfter, PreemptMaxWait                             time.Duration
	// PreemptGap is the priority gap from which a waiting task preempts
	// running work: 0 means the documented default, 3 (docs/api/tasks.md);
	// an urgent task (1) also preempts high-priority work (3) and lower
	// whatever the gap. A negative value turns preemption off.
	PreemptGap    int
	SweepInterval time.Duration // default 1s
	// ClaimRecheck is how often a long-polling claim looks again without
	// being woken (default 1s): it catches retry_at passing and another
	// replica's work when a NOTIFY is lost.
	ClaimRecheck time.Duration
	// ResultRetention is how long results stay in the object store
	// (default 30 days; docs/operations.md).
	ResultRetention time.Duration
	// HistoryRetention is how long an ended task's history stays in the
	// database before the archiver moves its events to the object store
	// and deletes its rows (default 90 days; negative: never). Without an
	// object store nothing is archived (docs/operations.md, "Database
	// size").
	HistoryRetention time.Duration
	// HistoryArchiveEvery is how often the archiver looks (default 1h).
	HistoryArchiveEvery time.Duration
	// GroupReconcile is how often the elected replica asks which task
	// groups are due without a signal (default 1s): after a restart, or
	// when a member changed on a replica that died before moving its
	// group on.
	GroupReconcile time.Duration
}

// Config configures the service.
type Config struct {
	DB         *pgxpool.Pool // search_path starts with the scheduler's schema, migrated
	Kafka      kafka.Config
	Topic      string // default Topic
	Partitions int32  // when creating the topics (default 16)
	// OrchestrationTopic receives the task-group and template events
	// (default OrchestrationTopic).
	OrchestrationTopic string
	// Objects keeps large results; nil refuses them.
	Objects objectstore.Store
	Timing  Timing
	// Writers sets how many write transactions run at once (default 4;
	// see postgres.TaskStoreOptions.Writers).
	Writers int
	// Quota, if set, is a connection to the quota service: tasks that name a
	// queue, a GU quota or resources wait for its admission, and its
	// decisions are read from QuotaTopic. Nil: no task waits for admission.
	Quota      grpc.ClientConnInterface
	QuotaTopic string // default QuotaTopic
	// InternalToken authenticates the scheduler's calls to the quota service.
	InternalToken string
	// Video, if set, serves the video generation API (VideoService) and
	// sweeps its expired generations.
	Video *VideoConfig
	// Pipeline, if set, serves the model-conversion pipeline API
	// (PipelineService) and runs its process manager.
	Pipeline *PipelineConfig
	Now      func() time.Time
	Logger   *slog.Logger
}

// Service is a running scheduler.
type Service struct {
	cfg      Config
	app      *app.App
	orch     *oapp.App
	managed  *mapp.App
	hub      *app.Hub
	store    *postgres.TaskStore
	relay    *outbox.Relay
	video    *video    // nil without Config.Video
	pipeline *pipeline // nil without Config.Pipeline
	log      *slog.Logger
}

// WriterConns is how many connections the service's writers hold at once
// with Config.Writers = writers; its pool needs them beside the
// long-lived ones and some for reads.
func WriterConns(writers int) int { return postgres.WriterConns(writers) }

// New builds the service; Run starts its background work.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil {
		return nil, errors.New("scheduler: no database")
	}
	cfg = cfg.withDefaults()
	// Five connections are held for the service's lifetime (relay,
	// projection runner, sweeper, the task groups' reconcile, LISTEN), one
	// more for the admission decisions' consumer and one for the history
	// archiver's lock; writers and reads need the rest.
	long := 5
	if cfg.Quota != nil {
		long++
	}
	// The history archiver's lock, when it runs.
	if cfg.Objects != nil && cfg.Timing.HistoryRetention >= 0 {
		long++
	}
	writers := WriterConns(cfg.Writers)
	if need := int32(long + writers + 4); cfg.DB.Config().MaxConns < need {
		return nil, fmt.Errorf("scheduler: the database pool allows %d connections; it needs at least %d (%d long-lived, %d writers, 4 for reads)",
			cfg.DB.Config().MaxConns, need, long, writers)
	}
	gap := cfg.Timing.PreemptGap
	switch {
	case gap == 0:
		gap = 3
	case gap < 0:
		gap = 0 // off
	}
	s := &Service{cfg: cfg, hub: app.NewHub(), log: cfg.Logger.With("service", "scheduler")}
	s.relay = outbox.New(cfg.DB, outbox.Config{Name: "scheduler", Topic: cfg.Topic, Partitions: cfg.Partitions,
		Routes: map[string]string{postgres.GroupAggregateType: cfg.OrchestrationTopic, postgres.TemplateAggregateType: cfg.OrchestrationTopic,
			postgres.ManagedAggregateType: ManagedTopic},
		Kafka: cfg.Kafka, Logger: s.log})
	s.store = postgres.NewTaskStore(cfg.DB, postgres.TaskStoreOptions{Writers: cfg.Writers, AfterCommit: s.relay.Notify})
	stores := app.Stores{Tasks: s.store, Views: postgres.TaskViews{DB: cfg.DB}, Agents: postgres.Agents{DB: cfg.DB},
		Sweeps: postgres.SweepQueries{DB: cfg.DB}, Sweeper: postgres.SweeperLock{DB: cfg.DB}}
	t := cfg.Timing
	s.app = app.New(stores, cfg.Objects, cfg.Now, s.hub, app.Config{AgentLostAfter: t.AgentLostAfter,
		TimeoutSlack: t.TimeoutSlack, ResultURLTTL: t.ResultURLTTL, UploadURLTTL: t.UploadURLTTL,
		PreemptGap: gap, PreemptAfter: t.PreemptAfter, PreemptMaxWait: t.PreemptMaxWait, ClaimRecheck: t.ClaimRecheck,
		ResultRetention: t.ResultRetention}, s.log)
	s.orchestration(cfg)
	s.managed = mapp.New(&postgres.ManagedStore{DB: cfg.DB, AfterCommit: s.relay.Notify}, cfg.Now,
		mapp.Config{AgentLostAfter: t.AgentLostAfter}, s.log)
	if cfg.Quota != nil {
		if cfg.InternalToken == "" {
			return nil, errors.New("scheduler: a quota service needs Config.InternalToken")
		}
		if cfg.QuotaTopic == "" {
			cfg.QuotaTopic = QuotaTopic
		}
		s.cfg.QuotaTopic = cfg.QuotaTopic
		s.app.SetAdmission(quota.NewResolver(cfg.Quota, cfg.InternalToken))
	}
	if err := s.addAPIs(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// addAPIs composes the bounded contexts that run on the scheduler's use
// cases: the video API and the pipeline, when configured.
func (s *Service) addAPIs(cfg Config) error {
	if cfg.Video != nil {
		v, err := newVideo(cfg, s.app, s.log)
		if err != nil {
			return err
		}
		s.video = v
	}
	if cfg.Pipeline != nil {
		p, err := newPipeline(cfg, s.app, s.log)
		if err != nil {
			return err
		}
		s.pipeline = p
		s.app.ReserveResources(p.resources...)
		// The process manager hears of every committed change of a stage
		// task at once (docs/decisions/0022-pipeline-jobs-drive-stage-tasks.md).
		s.hub.Observe(p.app.Observe)
	}
	return nil
}

// orchestration builds the task-group and template use cases over the
// service's stores and hub (docs/decisions/0023-task-groups-process-manager.md).
func (s *Service) orchestration(cfg Config) {
	s.orch = oapp.New(oapp.Deps{
		Groups:    &postgres.GroupStore{DB: cfg.DB, AfterCommit: s.relay.Notify},
		Templates: &postgres.TemplateStore{DB: cfg.DB, AfterCommit: s.relay.Notify},
		Tasks:     s.app, Events: s.hub, Lock: postgres.AdvisoryLock{DB: cfg.DB, Name: "scheduler:groups"},
	}, cfg.Now, oapp.Config{Reconcile: cfg.Timing.GroupReconcile}, s.log)
	// A member task's change moves its group on (the process manager).
	s.hub.Observe(func(t domain.Task) {
		if t.Spec.GroupID != "" {
			s.orch.Touch(t.Spec.GroupID)
		}
	})
	// A member is retried through its group, which follows it again.
	s.app.SetGroups(s.orch)
}

// withDefaults fills in the zero values that have defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Writers <= 0 {
		cfg.Writers = 4
	}
	if cfg.Topic == "" {
		cfg.Topic = Topic
	}
	if cfg.OrchestrationTopic == "" {
		cfg.OrchestrationTopic = OrchestrationTopic
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
	if cfg.Timing.SweepInterval <= 0 {
		cfg.Timing.SweepInterval = time.Second
	}
	if cfg.Timing.HistoryRetention == 0 {
		cfg.Timing.HistoryRetention = DefaultHistoryRetention
	}
	if cfg.Timing.HistoryArchiveEvery <= 0 {
		cfg.Timing.HistoryArchiveEvery = time.Hour
	}
	return cfg
}

// Register adds TaskService, LeaseService, AttemptFilesService,
// AgentFleetService, the managed-service API and its agent side,
// TaskGroupService, TemplateService, DeadLetterService (the records its
// projections parked) and, when configured, VideoService to a server built
// with platform/grpcserver (internal authentication and validation).
func (s *Service) Register(g grpc.ServiceRegistrar) {
	taskv1.RegisterTaskServiceServer(g, &ports.TaskServer{App: s.app, Log: s.log})
	taskv1.RegisterLeaseServiceServer(g, &ports.LeaseServer{App: s.app, Log: s.log})
	taskv1.RegisterAttemptFilesServiceServer(g, &ports.AttemptFilesServer{App: s.app, Log: s.log})
	managedv1.RegisterManagedServiceServiceServer(g, &mports.ServiceServer{App: s.managed, Log: s.log})
	managedv1.RegisterServiceAgentServiceServer(g, &mports.AgentServer{App: s.managed, Log: s.log})
	taskv1.RegisterAgentFleetServiceServer(g, &ports.AgentFleetServer{App: s.app, Services: s.managed, Log: s.log})
	taskv1.RegisterTaskGroupServiceServer(g, &oports.GroupServer{App: s.orch, Tasks: s.app, Log: s.log})
	taskv1.RegisterTemplateServiceServer(g, &oports.TemplateServer{App: s.orch, Log: s.log})
	deadletterv1.RegisterDeadLetterServiceServer(g, &deadletter.Server{Service: "scheduler", DB: s.cfg.DB, Log: s.log})
	if s.video != nil {
		s.video.register(g)
	}
	if s.pipeline != nil {
		s.pipeline.register(g, s.log)
	}
}

// Run relays events to Kafka, builds the task_views projection, sweeps
// leases, wakes waiting claims, and moves task groups on, until ctx is
// done.
func (s *Service) Run(ctx context.Context) error {
	// The first part that fails stops the others, and its error is Run's.
	g, ctx := errgroup.WithContext(ctx)
	defer postgres.ObserveTaskCounts(s.cfg.DB)()
	g.Go(func() error { return s.relay.Run(ctx) })
	runner := projection.NewRunner(s.cfg.DB, projection.Config{Name: readModels, Topic: s.cfg.Topic,
		Partitions: s.cfg.Partitions, Kafka: s.cfg.Kafka, Logger: s.log}, readModelHandler(map[string]string{
		"task_views": "task_views"}))
	g.Go(func() error { return runner.Run(ctx) })
	if s.cfg.Quota != nil {
		decisions := projection.NewRunner(s.cfg.DB, projection.Config{Name: admissionDecisions, Topic: s.cfg.QuotaTopic,
			Partitions: s.cfg.Partitions, Kafka: s.cfg.Kafka, Logger: s.log}, quota.Decisions{Tasks: s.app})
		g.Go(func() error { return decisions.Run(ctx) })
	}
	s.app.SetUpResultRetention(ctx)
	g.Go(func() error { s.app.RunSweeper(ctx, s.cfg.Timing.SweepInterval); return nil })
	g.Go(func() error { s.app.RunReleases(ctx); return nil })
	g.Go(func() error { s.orch.RunManager(ctx); return nil })
	g.Go(func() error { s.managed.RunLostSweeper(ctx, s.cfg.Timing.SweepInterval); return nil })
	g.Go(func() error { postgres.Wakeups{DB: s.cfg.DB}.Run(ctx, s.hub); return nil })
	if a := s.historyArchiver(); a != nil {
		g.Go(func() error { a.Run(ctx, s.cfg.Timing.HistoryArchiveEvery); return nil })
	}
	if s.video != nil {
		g.Go(func() error { s.video.app.RunSweeper(ctx, s.video.sweep); return nil })
	}
	if s.pipeline != nil {
		g.Go(func() error { return s.pipeline.relay.Run(ctx) })
		g.Go(func() error { s.pipeline.app.Run(ctx, s.pipeline.sweep); return nil })
		g.Go(func() error {
			return RunUploadSweeper(ctx, s.pipeline.db, s.pipeline.app, s.pipeline.uploadSweep, s.log)
		})
	}
	err := g.Wait()
	s.store.Close()
	return err
}

// DefaultHistoryRetention is how long an ended task stays in the
// database by default.
const DefaultHistoryRetention = 90 * 24 * time.Hour

// historyArchiver is the archiver of ended tasks' history, or nil when
// history is kept for ever or there is no object store to archive to.
func (s *Service) historyArchiver() *app.HistoryArchiver {
	if s.cfg.Timing.HistoryRetention < 0 {
		return nil
	}
	if s.cfg.Objects == nil {
		s.log.Warn("no object store: the history of ended tasks is kept in the database for ever (docs/operations.md, \"Database size\")")
		return nil
	}
	return &app.HistoryArchiver{Store: postgres.HistoryStore{DB: s.cfg.DB}, Archive: archive.Archive{Objects: s.cfg.Objects},
		Lock: postgres.AdvisoryLock{DB: s.cfg.DB, Name: "scheduler:history"}, Now: s.cfg.Now,
		Retention: s.cfg.Timing.HistoryRetention, Log: s.log}
}

// admissionDecisions names the consumer of the quota service's decisions.
const admissionDecisions = "admission_decisions"

// readModels names the projection that builds task_views (the name it
// had when it built the audit trail too: its offsets are kept).
const readModels = "task_read_models"

func readModelHandler(tables map[string]string) projection.Handler {
	return views.TaskViews{Table: tables["task_views"]}
}

// ReplaySpecs describe the Kafka projections for `taskmesh replay`.
func ReplaySpecs(k kafka.Config) []projection.ReplaySpec {
	// The topic keeps every event; the rows of archived tasks are gone
	// from the live table on purpose, so they are not compared.
	return []projection.ReplaySpec{{Name: readModels, Topic: Topic, Tables: []string{"task_views"}, Kafka: k,
		Where: map[string]string{"task_views": "NOT (" + postgres.ArchivedViews + ")"}, NewHandler: readModelHandler}}
}
