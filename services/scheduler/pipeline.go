package scheduler

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/leader"
	"github.com/taskmesh/taskmesh/platform/outbox"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/sibling"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/adapters/images"
	pipelinepg "github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/adapters/postgres"
	pipelineapp "github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/app"
	pipelinedomain "github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
	pipelineports "github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/ports"
)

//go:embed migrations/pipeline/*.sql
var pipelineMigrationFiles embed.FS

// PipelineSchema is the pipeline's default Postgres schema: its event
// store, the jobs table and the uploads table.
const PipelineSchema = "pipeline"

// PipelineTopic carries every job event, keyed by job id (the topic
// JobEvent declares in its proto).
var PipelineTopic = kafka.EnvelopeTopic(&pipelinev1.JobEvent{})

// PipelineMigrations are the pipeline schema's.
func PipelineMigrations() []pg.MigrationSet {
	own, err := pg.LoadMigrations("pipeline", pipelineMigrationFiles, "migrations/pipeline")
	if err != nil {
		panic(err) // embedded at build time
	}
	return []pg.MigrationSet{eventstore.Migrations(), own}
}

// PipelineStage configures how one stage of the pipeline runs (its queue,
// the resource counted against it, its agents' labels, its program).
type PipelineStage = pipelineapp.StageConfig

// Names of the default stage queues and resources: one ClusterQueue per
// stage caps how many of its tasks run at once (docs/api/pipeline.md,
// "Pools and caps").
const (
	PipelineResourcePrefix = "taskmesh.io/pipeline-"
	PipelineQueuePrefix    = "pipeline-"
)

// DefaultPipelineStages run stage s on agents labelled pool:<s>, in the
// queue pipeline-<s> counting taskmesh.io/pipeline-<s>, with the built-in
// stand-in program.
func DefaultPipelineStages() map[string]PipelineStage {
	out := map[string]PipelineStage{}
	for _, s := range pipelinedomain.Stages() {
		out[string(s)] = PipelineStage{Queue: PipelineQueuePrefix + string(s), Resource: PipelineResourcePrefix + string(s)}
	}
	return out
}

// DefaultPipelineWorker is the stage worker command of a deployment whose
// agents have the scheduler's executable exe at the same path:
// taskmesh-stage beside it, which starts in a fraction of the CPU
// (docs/decisions/0091-small-stage-worker-binary.md), else exe itself;
// either runs as `<binary> pipeline-stage run …`.
func DefaultPipelineWorker(exe string) []string {
	if stage := sibling.Of(exe, sibling.Stage); stage != "" {
		return []string{stage, "pipeline-stage"}
	}
	return []string{exe, "pipeline-stage"}
}

// PipelineConfig configures the model-conversion pipeline API
// (PipelineService). Zero values take the defaults documented on each
// field.
type PipelineConfig struct {
	// DB's search_path starts with the pipeline's schema, migrated with
	// PipelineMigrations. ServerConfig opens it from its DatabaseURL when
	// nil.
	DB *pgxpool.Pool
	// Topic of job events (PipelineTopic).
	Topic string
	// Worker is the command an agent runs for a stage, the stage's
	// arguments after it (default: DefaultPipelineWorker of this
	// executable).
	Worker []string
	// Stages by name (onnx, bie, nef); DefaultPipelineStages for a
	// missing one.
	Stages map[string]PipelineStage
	// UploadLimits bound uploads by kind (model, quant, ref_image).
	UploadLimits map[string]int64
	// SweepInterval is how often jobs are reconciled with their stage
	// tasks (default 5s).
	SweepInterval time.Duration
	// MaxOutputBytes bounds a stage's output upload (default 1 GiB; the
	// filesystem store enforces it, S3 cannot bound a presigned PUT).
	MaxOutputBytes int64
	// UploadTTL is how long an upload no job used is kept before it is
	// deleted and its key refused (default 24h); UploadSweepInterval how
	// often the replica holding the upload sweeper's lock looks for them
	// (default 1m).
	UploadTTL, UploadSweepInterval time.Duration
}

// pipeline is the composed pipeline API.
type pipeline struct {
	app *pipelineapp.App
	// resources are what the stages count, reserved for their tasks.
	resources   []string
	relay       *outbox.Relay
	db          *pgxpool.Pool
	sweep       time.Duration
	uploadSweep time.Duration
}

func newPipeline(cfg Config, tasks pipelineapp.Tasks, log *slog.Logger) (*pipeline, error) {
	pc := *cfg.Pipeline
	switch {
	case pc.DB == nil:
		return nil, errors.New("scheduler: the pipeline needs PipelineConfig.DB (its own schema)")
	case cfg.Objects == nil:
		return nil, errors.New("scheduler: the pipeline needs an object store")
	}
	if pc.Topic == "" {
		pc.Topic = PipelineTopic
	}
	if pc.SweepInterval <= 0 {
		pc.SweepInterval = 5 * time.Second
	}
	if pc.UploadSweepInterval <= 0 {
		pc.UploadSweepInterval = time.Minute
	}
	if len(pc.Worker) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("scheduler: the pipeline's worker command: %w", err)
		}
		pc.Worker = DefaultPipelineWorker(exe)
	}
	stages := map[pipelinedomain.Stage]pipelineapp.StageConfig{}
	defaults := DefaultPipelineStages()
	for _, s := range pipelinedomain.Stages() {
		sc, ok := pc.Stages[string(s)]
		if !ok {
			sc = defaults[string(s)]
		}
		stages[s] = sc
	}
	for name := range pc.Stages {
		if _, ok := pipelinedomain.ParseStage(name); !ok {
			return nil, fmt.Errorf("scheduler: pipeline stage %q is not onnx, bie or nef", name)
		}
	}
	limits := map[pipelinedomain.Kind]int64{}
	for k, v := range pc.UploadLimits {
		kind, err := pipelinedomain.ParseKind(k)
		if err != nil {
			return nil, fmt.Errorf("scheduler: pipeline upload limit: %w", err)
		}
		limits[kind] = v
	}
	relay := outbox.New(pc.DB, outbox.Config{Name: "pipeline", Topic: pc.Topic, Partitions: cfg.Partitions, Kafka: cfg.Kafka, Logger: log})
	store := &pipelinepg.Store{DB: pc.DB, AfterCommit: relay.Notify}
	a := pipelineapp.New(pipelineapp.Config{Tasks: tasks, Jobs: store, Uploads: store, Objects: cfg.Objects,
		Worker: pc.Worker, Stages: stages, CheckImage: images.Check, UploadLimits: limits, MaxOutputBytes: pc.MaxOutputBytes, UploadTTL: pc.UploadTTL,
		Now: cfg.Now, Log: log.With("component", "pipeline")})
	var resources []string
	for _, sc := range stages {
		resources = append(resources, sc.Resource)
	}
	return &pipeline{app: a, resources: resources, relay: relay, db: pc.DB, sweep: pc.SweepInterval, uploadSweep: pc.UploadSweepInterval}, nil
}

// UploadSweeperLock names the advisory lock that elects the one replica
// sweeping expired uploads.
const UploadSweeperLock = "pipeline:upload-sweeper"

// RunUploadSweeper expires the uploads no job used (a.SweepUploads)
// every interval on the one replica holding UploadSweeperLock in db
// (platform/leader), until ctx is done. Between passes it checks that
// its lock's session is alive, so a replica that lost the lock stops
// before a successor starts.
func RunUploadSweeper(ctx context.Context, db *pgxpool.Pool, a *pipelineapp.App, interval time.Duration, log *slog.Logger) error {
	return leader.Run(ctx, db, leader.Config{Lock: UploadSweeperLock, Role: "pipeline upload sweeper", Logger: log},
		func(ctx context.Context, lock *pg.Lock) error {
			for {
				if err := lock.Alive(ctx); err != nil {
					return err
				}
				if n, err := a.SweepUploads(ctx); err != nil && ctx.Err() == nil {
					log.Warn("pipeline: upload sweep failed", "err", err)
				} else if n > 0 {
					log.Info("pipeline: expired uploads deleted", "uploads", n)
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		})
}

func (p *pipeline) register(g grpc.ServiceRegistrar, log *slog.Logger) {
	pipelinev1.RegisterPipelineServiceServer(g, &pipelineports.Server{App: p.app, Log: log})
}
