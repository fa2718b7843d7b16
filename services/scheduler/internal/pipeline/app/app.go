// Package app holds the pipeline API's use cases: uploads, creating and
// reading jobs, download links, and the process manager that moves each
// job through its stages. A stage is a scheduler task created through the
// scheduler's own use cases in the same process (like the video API's
// generations), run by an agent of the stage's pool; the process manager
// learns of its outcome from the scheduler's committed changes (Observe)
// and, after a restart or a missed change, from its reconciliation sweep.
// The package depends only on the interfaces it declares.
package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// Tasks is the part of the scheduler's use cases the pipeline needs.
type Tasks interface {
	CreateTasks(ctx context.Context, c sched.Caller, in task.SpecInput, requestID string) ([]task.Task, error)
	GetTask(ctx context.Context, c sched.Caller, id string) (task.Task, error)
}

// JobStore keeps the job aggregate: its events and, written with them, the
// job every decision starts from. Get after a successful write shows it.
type JobStore interface {
	// Create stores a new job's records (domain.Submit) and returns the
	// job after them.
	Create(ctx context.Context, records []domain.Record) (domain.Job, error)
	// Get returns a job of tenant ("*": of any tenant); an unknown id and
	// another tenant's job are domain.ErrNotFound.
	Get(ctx context.Context, tenant, id string) (domain.Job, error)
	// Mutate runs decide on the job as locked for the write and stores
	// what it recorded with the job after it; it returns the job after
	// them (as it was when decide recorded nothing). An unknown job is
	// domain.ErrNotFound; an error from decide is returned as it is and
	// nothing is stored.
	Mutate(ctx context.Context, id string, decide func(j domain.Job) ([]domain.Record, error)) (domain.Job, error)
	// Active returns up to limit jobs that are neither COMPLETED nor
	// FAILED whose id is above after, in id order.
	Active(ctx context.Context, after string, limit int) ([]domain.Job, error)
}

// Upload is one stored input file.
type Upload struct {
	// Key is the object key, which clients pass to CreateJob.
	Key      string
	TenantID string
	Kind     domain.Kind
	// Name is the object's file name (model.onnx, quant.zip, or the
	// reference image's reduced name).
	Name      string
	Size      int64
	SHA256    string
	CreatedAt time.Time
	// UsedAt is when a job was first created from the upload (zero:
	// never); a used upload does not expire.
	UsedAt time.Time
	// ExpiredAt is when the upload expired unused (zero: it did not); its
	// object is deleted and its key refused.
	ExpiredAt time.Time
}

// UploadStore remembers uploads, whose they are, and which expired.
type UploadStore interface {
	SaveUpload(ctx context.Context, u Upload) error
	// Upload returns the upload key of tenant, expired or not; an unknown
	// key and another tenant's are domain.ErrNotFound.
	Upload(ctx context.Context, tenant, key string) (Upload, error)
	// UseUploads marks the tenant's uploads keys as used by a job at at
	// (the first use is kept). It fails with an *UploadExpiredError naming
	// the key when one of them expired (or is not the tenant's); the keys
	// before it may be marked. Marking and expiring one upload are
	// serialized: an upload is never both used and expired.
	UseUploads(ctx context.Context, tenant string, keys []string, at time.Time) error
	// ExpireUploads marks up to limit uploads that no job used and that
	// were created before cutoff as expired at at, then returns up to
	// limit expired uploads whose objects are not deleted yet, the oldest
	// expiry first (some may have expired in an earlier call).
	ExpireUploads(ctx context.Context, cutoff, at time.Time, limit int) ([]Upload, error)
	// UploadsPurged records that the objects of expired uploads keys are
	// deleted.
	UploadsPurged(ctx context.Context, keys []string, at time.Time) error
}

// StageConfig is how one stage runs.
type StageConfig struct {
	// Queue is the LocalQueue whose ClusterQueue caps the stage's
	// concurrency; "" runs the stage without admission.
	Queue string
	// Resource is counted against the queue, 1 per stage task (e.g.
	// taskmesh.io/pipeline-bie).
	Resource string
	// Labels an agent must have to run the stage (its pool), e.g.
	// pool:bie.
	Labels []string
	// Program is the stage program's argument vector, "{workdir}"
	// standing for the work directory; empty runs the built-in stand-in.
	Program []string
	// Timeout of the stage task in seconds (default 3600).
	Timeout int
	// Retries of a failed stage task (default 0: a failure fails the job).
	Retries int
	// RetryDelay is how many seconds a failed stage task waits before its
	// retry; nil leaves the task's default (60 s).
	RetryDelay *int
}

// Config wires the use cases.
type Config struct {
	Tasks   Tasks
	Jobs    JobStore
	Uploads UploadStore
	Objects objectstore.Store
	// Worker is the command agents run for a stage, e.g.
	// ["/usr/local/bin/taskmesh", "pipeline-stage"]; the stage's
	// arguments follow ("run", "--stage", …).
	Worker []string
	Stages map[domain.Stage]StageConfig
	// CheckImage judges a whole reference image upload (the images
	// adapter decodes it); nil leaves it judged by its first bytes only.
	CheckImage func([]byte) error
	// UploadLimits bound uploads by kind (DefaultUploadLimits for a
	// missing kind).
	UploadLimits map[domain.Kind]int64
	// MaxOutputBytes bounds what a stage may upload as its output (default
	// 1 GiB) and MaxLogBytes its log (default 16 MiB).
	MaxOutputBytes, MaxLogBytes int64
	// LinkTTL is how long download links stay valid (default 1h);
	// WorkerLinkTTL how long a stage task's links do, so it must cover the
	// time the task may wait in its queue (default 7 days, the longest a
	// presigned URL may live).
	LinkTTL, WorkerLinkTTL time.Duration
	// UploadTTL is how long an upload no job used is kept (default
	// DefaultUploadTTL); SweepUploads expires it after that.
	UploadTTL time.Duration
	Now       func() time.Time
	Log       *slog.Logger
}

// DefaultUploadTTL is Config.UploadTTL when it is zero.
const DefaultUploadTTL = 24 * time.Hour

// DefaultUploadLimits are the upload size limits of each kind.
var DefaultUploadLimits = map[domain.Kind]int64{
	domain.KindModel:    1 << 30,
	domain.KindQuant:    1 << 30,
	domain.KindRefImage: 32 << 20,
}

// App is the pipeline's use cases.
type App struct {
	cfg     Config
	changes *changeQueue
	metrics *metrics
}

// New returns the use cases; Run starts the process manager.
func New(cfg Config) *App {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxOutputBytes <= 0 {
		cfg.MaxOutputBytes = 1 << 30
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = 16 << 20
	}
	if cfg.LinkTTL <= 0 {
		cfg.LinkTTL = time.Hour
	}
	if cfg.UploadTTL <= 0 {
		cfg.UploadTTL = DefaultUploadTTL
	}
	if cfg.WorkerLinkTTL <= 0 {
		cfg.WorkerLinkTTL = objectstore.MaxPresignTTL
	}
	limits := map[domain.Kind]int64{}
	for k, v := range DefaultUploadLimits {
		limits[k] = v
	}
	for k, v := range cfg.UploadLimits {
		if v > 0 {
			limits[k] = v
		}
	}
	cfg.UploadLimits = limits
	a := &App{cfg: cfg, metrics: newMetrics()}
	a.changes = newChangeQueue(a.applyChange)
	return a
}

// Errors of the use cases (the domain's ErrNotFound and InvalidError
// besides).
var (
	// ErrNoTenant: a job and its uploads belong to a tenant; an operator
	// credential acts for none.
	ErrNoTenant = errors.New("an operator credential cannot use the pipeline API; use a tenant's API key")
	// ErrTooLarge: an upload is above its kind's size limit; nothing is
	// kept.
	ErrTooLarge = errors.New("upload too large")
	// ErrUploadExpired: an upload expired (no job used it within the
	// upload TTL) and its object is deleted.
	ErrUploadExpired = errors.New("upload expired")
)

// UploadExpiredError names an upload that expired; it is ErrUploadExpired.
type UploadExpiredError struct{ Key string }

func (e *UploadExpiredError) Error() string { return ErrUploadExpired.Error() + ": " + e.Key }

// Is makes errors.Is(err, ErrUploadExpired) true.
func (e *UploadExpiredError) Is(target error) bool { return target == ErrUploadExpired }

// actor records the pipeline's own changes (and creates the stage tasks:
// a task created by this actor with a stage request id is a stage task;
// a client can name neither).
const actor = "pipeline"

func (a *App) now() time.Time { return a.cfg.Now().UTC() }

// tenantOf refuses callers that act for no single tenant.
func tenantOf(c sched.Caller) (string, error) {
	if c.Tenant == "" || c.Tenant == "*" {
		return "", ErrNoTenant
	}
	return c.Tenant, nil
}
