// Package consumers is the consumers service: the read models and side
// effects Taskmesh derives from its event topics beyond the services'
// own — the audit log, usage metering for billing and webhook
// notifications (docs/architecture.md, "Event consumers"). Each context
// (internal/audit, internal/usage, internal/webhooks) has its domain, app,
// adapters and ports, and its API on the service's gRPC server
// (AuditService, UsageService, WebhookService), which the gateway proxies;
// DeadLetterService serves the records its consumers parked.
//
// What runs (Service.Run), each as the leader among the replicas:
//
//   - the audit projection, one batching runner per topic
//     (platform/projection: audit_tasks on the task topic,
//     audit_orchestration on the orchestration topic, audit_pipeline on
//     the pipeline topic, audit_quota on the quota topic, audit_admin on
//     the admin topic), and the audit retention;
//   - the usage and webhook consumers, Watermill Router handlers
//     (platform/consumer), offsets and writes in one transaction;
//   - the webhook dispatcher, which sends due deliveries.
//
// The taskmesh binary runs it with Run (server.go).
package consumers

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/platform/consumer"
	"github.com/taskmesh/taskmesh/platform/deadletter"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/leader"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/platform/safehttp"
	auditarchive "github.com/taskmesh/taskmesh/services/consumers/internal/audit/adapters/archive"
	auditpg "github.com/taskmesh/taskmesh/services/consumers/internal/audit/adapters/postgres"
	auditapp "github.com/taskmesh/taskmesh/services/consumers/internal/audit/app"
	auditdomain "github.com/taskmesh/taskmesh/services/consumers/internal/audit/domain"
	auditports "github.com/taskmesh/taskmesh/services/consumers/internal/audit/ports"
	usagepg "github.com/taskmesh/taskmesh/services/consumers/internal/usage/adapters/postgres"
	usageapp "github.com/taskmesh/taskmesh/services/consumers/internal/usage/app"
	usagedomain "github.com/taskmesh/taskmesh/services/consumers/internal/usage/domain"
	usageports "github.com/taskmesh/taskmesh/services/consumers/internal/usage/ports"
	hookpg "github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/adapters/postgres"
	hooksecrets "github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/adapters/secrets"
	hooksender "github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/adapters/sender"
	hookapp "github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/app"
	hookdomain "github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
	hookports "github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/ports"
)

// Topics the service reads (the topics the envelopes declare).
var (
	TaskTopic          = kafka.EnvelopeTopic(&taskv1.TaskEvent{})
	QuotaTopic         = kafka.EnvelopeTopic(&quotav1.QuotaEvent{})
	OrchestrationTopic = kafka.EnvelopeTopic(&taskv1.OrchestrationEvent{})
	PipelineTopic      = kafka.EnvelopeTopic(&pipelinev1.JobEvent{})
	AdminTopic         = kafka.EnvelopeTopic(&adminv1.AdminEvent{})
)

// Names of the consumers: their offsets, locks and dead letters.
const (
	AuditTasks         = "audit_tasks"
	AuditQuota         = "audit_quota"
	AuditOrchestration = "audit_orchestration"
	AuditPipeline      = "audit_pipeline"
	AuditAdmin         = "audit_admin"
	Usage              = "usage"
	Webhooks           = "webhooks"
	WebhookAlerts      = "webhook_alerts"
)

// Retention is the audit log's retention: `audit: {retention: 90d,
// archive: true, compress: true}` (docs/api/audit.md).
type Retention = auditdomain.Retention

// DefaultRetention keeps 90 days and archives compressed.
var DefaultRetention = auditdomain.DefaultRetention

// ParseRetention reads a retention such as 90d or 36h.
func ParseRetention(s string) (time.Duration, error) { return auditdomain.ParseRetention(s) }

// Prices is the usage price table (docs/api/usage.md).
type Prices = usagedomain.Prices

// DefaultPrices are used without a configured table.
var DefaultPrices = usagedomain.DefaultPrices

// Backoff is the webhook retry schedule.
type Backoff = hookdomain.Backoff

// DefaultBackoff retries for up to 24 hours.
var DefaultBackoff = hookdomain.DefaultBackoff

// WebhookKeySize is the length of the key that seals tenants' signing
// secrets.
const WebhookKeySize = hooksecrets.KeySize

// AuditConfig configures the audit log.
type AuditConfig struct {
	// Retention is DefaultRetention when zero.
	Retention Retention
	// Every is how often the retention runs (default 1h).
	Every time.Duration
}

// WebhookConfig configures notifications.
type WebhookConfig struct {
	// Key seals tenants' signing secrets (WebhookKeySize bytes); required.
	// Never logged.
	Key []byte
	// Allow lists the non-public networks deliveries may reach (operator
	// allow-list); AllowAll lifts the check (development only).
	Allow    []netip.Prefix
	AllowAll bool
	// Timeout bounds one delivery (default 10s).
	Timeout time.Duration
	// Backoff is DefaultBackoff when zero.
	Backoff Backoff
	// PerTenant and Concurrency bound deliveries in flight per tenant
	// (default 8) and in all (default 256).
	PerTenant, Concurrency int
}

// Config configures the service.
type Config struct {
	DB         *pgxpool.Pool // search_path starts with Schema, migrated
	Kafka      kafka.Config
	TaskTopic  string // default TaskTopic
	QuotaTopic string // default QuotaTopic
	// OrchestrationTopic carries task-group and template events (default
	// OrchestrationTopic).
	OrchestrationTopic string
	// PipelineTopic carries the conversion pipeline's job events (default
	// PipelineTopic).
	PipelineTopic string
	// AdminTopic carries the gateway's admin events (default AdminTopic).
	AdminTopic string
	Partitions int32 // when creating topics (default 16)
	// Objects keeps the audit archives; nil deletes expired entries
	// without an archive.
	Objects  objectstore.Store
	Audit    AuditConfig
	Prices   *Prices // nil: DefaultPrices
	Webhooks WebhookConfig
	Now      func() time.Time
	Logger   *slog.Logger
	// AfterCommit, if set, is called by the usage and webhook consumers
	// with the records of each transaction they committed (benchmarks,
	// tests).
	AfterCommit func(consumer string, records []*kgo.Record)
}

// Service is a running consumers service.
type Service struct {
	cfg   Config
	audit *auditapp.App
	usage *usageapp.App
	hooks *hookapp.App
	log   *slog.Logger

	auditTasks, auditQuota, auditOrchestration, auditPipeline, auditAdmin *projection.Runner
	usageConsumer                                                         *consumer.Consumer
	hookConsumer, alertConsumer                                           *consumer.Consumer
}

// New builds the service; Run starts its background work.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil {
		return nil, errors.New("consumers: no database")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// Held for the service's lifetime: four runners, three consumers, the
	// dispatcher and the retention (their locks); each consumer has up to a
	// connection per partition in flight.
	if need := int32(9 + 8); cfg.DB.Config().MaxConns < need {
		return nil, fmt.Errorf("consumers: the database pool allows %d connections; it needs at least %d", cfg.DB.Config().MaxConns, need)
	}
	sealer, err := hooksecrets.New(cfg.Webhooks.Key)
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	s := &Service{cfg: cfg, log: cfg.Logger.With("service", "consumers")}
	var archive auditapp.Archive
	if cfg.Objects != nil {
		archive = auditarchive.Archive{Objects: cfg.Objects}
	}
	s.audit = auditapp.New(auditapp.Config{Store: auditpg.Store{DB: cfg.DB}, Expirer: auditpg.Expirer{DB: cfg.DB}, Archive: archive,
		Retention: cfg.Audit.Retention, Now: cfg.Now, Logger: s.log})
	s.usage = usageapp.New(usagepg.Store{DB: cfg.DB}, *cfg.Prices, cfg.Now)
	store := hookpg.Store{DB: cfg.DB, Sealer: sealer}
	w := cfg.Webhooks
	s.hooks = hookapp.New(hookapp.Config{Endpoints: store, Deliveries: hookpg.Deliveries{Store: store}, Schedule: store,
		Sender: hooksender.New(safehttp.Policy{Allow: w.Allow, AllowAll: w.AllowAll}, w.Timeout), Backoff: w.Backoff,
		PerTenant: w.PerTenant, Concurrency: w.Concurrency, Now: cfg.Now, Keys: rand.Reader, Logger: s.log})
	s.build()
	return s, nil
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.TaskTopic == "" {
		cfg.TaskTopic = TaskTopic
	}
	if cfg.QuotaTopic == "" {
		cfg.QuotaTopic = QuotaTopic
	}
	if cfg.OrchestrationTopic == "" {
		cfg.OrchestrationTopic = OrchestrationTopic
	}
	if cfg.PipelineTopic == "" {
		cfg.PipelineTopic = PipelineTopic
	}
	if cfg.AdminTopic == "" {
		cfg.AdminTopic = AdminTopic
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 16
	}
	if cfg.Audit.Retention == (Retention{}) {
		cfg.Audit.Retention = DefaultRetention
	}
	if cfg.Audit.Retention.Keep < time.Hour {
		return cfg, fmt.Errorf("consumers: audit retention %s: at least 1h", cfg.Audit.Retention.Keep)
	}
	if cfg.Audit.Every <= 0 {
		cfg.Audit.Every = time.Hour
	}
	if cfg.Prices == nil {
		p := DefaultPrices
		cfg.Prices = &p
	}
	if err := cfg.Prices.Check(); err != nil {
		return cfg, fmt.Errorf("consumers: %w", err)
	}
	if cfg.Webhooks.Backoff == (Backoff{}) {
		cfg.Webhooks.Backoff = DefaultBackoff
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// taskTopicBatchWait is how long the broker may hold a fetch of the task
// topic for the audit log, usage and webhooks, to gather its records into
// one transaction (kafka.ReadModelFetch). The task topic carries most of a
// deployment's events, a few at a time under a steady load. No request
// waits for these read models, and a tenth of a second is small beside
// how they are used: audit logs and usage are read after the fact, and a
// webhook's receiver sees a delivery that much later (its retries back
// off in seconds). The other topics carry few events: their fetches are
// answered at once. docs/decisions/0119-read-models-off-the-request-path-gather-their-batches.md
const taskTopicBatchWait = 100 * time.Millisecond

// build makes the runners and consumers.
func (s *Service) build() {
	cfg := s.cfg
	runner := func(name, topic string, t auditpg.Topic, wait time.Duration) *projection.Runner {
		return projection.NewRunner(cfg.DB, projection.Config{Name: name, Topic: topic, Partitions: cfg.Partitions, Kafka: cfg.Kafka,
			BatchWait: wait, Logger: s.log}, auditpg.Projection{Table: "audit_logs", Topic: t})
	}
	s.auditTasks = runner(AuditTasks, cfg.TaskTopic, auditpg.TaskTopic, taskTopicBatchWait)
	s.auditQuota = runner(AuditQuota, cfg.QuotaTopic, auditpg.QuotaTopic, 0)
	s.auditOrchestration = runner(AuditOrchestration, cfg.OrchestrationTopic, auditpg.OrchestrationTopic, 0)
	s.auditPipeline = runner(AuditPipeline, cfg.PipelineTopic, auditpg.PipelineTopic, 0)
	s.auditAdmin = runner(AuditAdmin, cfg.AdminTopic, auditpg.AdminTopic, 0)
	after := func(name string, also func()) func([]*kgo.Record) {
		return func(recs []*kgo.Record) {
			if also != nil {
				also()
			}
			if cfg.AfterCommit != nil {
				cfg.AfterCommit(name, recs)
			}
		}
	}
	s.usageConsumer = consumer.New(cfg.DB, consumer.Config{Name: Usage, Topic: cfg.TaskTopic, Partitions: cfg.Partitions,
		BatchWait: taskTopicBatchWait, Kafka: cfg.Kafka, Logger: s.log, AfterCommit: after(Usage, nil)}, usagepg.Meter{Tables: usagepg.LiveTables}.Apply)
	// The dispatcher is woken after a commit that scheduled a delivery to
	// send, not after every one: most tasks notify nobody.
	taskHooks, groupHooks := &scheduleWaker{wake: s.hooks.Wake}, &scheduleWaker{wake: s.hooks.Wake}
	s.hookConsumer = consumer.New(cfg.DB, consumer.Config{Name: Webhooks, Topic: cfg.TaskTopic, Partitions: cfg.Partitions,
		BatchWait: taskTopicBatchWait, Kafka: cfg.Kafka, Logger: s.log, AfterCommit: after(Webhooks, taskHooks.afterCommit)},
		hookpg.Notifier{Tables: hookpg.LiveTables, MaxAge: cfg.Webhooks.Backoff.MaxAge, Scheduled: taskHooks.scheduled}.Apply)
	s.alertConsumer = consumer.New(cfg.DB, consumer.Config{Name: WebhookAlerts, Topic: cfg.OrchestrationTopic, Partitions: cfg.Partitions,
		Kafka: cfg.Kafka, Logger: s.log, AfterCommit: after(WebhookAlerts, groupHooks.afterCommit)},
		hookpg.Alerts{Tables: hookpg.LiveTables, MaxAge: cfg.Webhooks.Backoff.MaxAge, Scheduled: groupHooks.scheduled}.Apply)
}

// Register adds AuditService, UsageService, WebhookService and
// DeadLetterService to a server built with platform/grpcserver.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	auditv1.RegisterAuditServiceServer(g, &auditports.Server{App: s.audit, Log: s.log})
	usagev1.RegisterUsageServiceServer(g, &usageports.Server{App: s.usage, Log: s.log})
	webhookv1.RegisterWebhookServiceServer(g, &hookports.Server{App: s.hooks, Log: s.log})
	deadletterv1.RegisterDeadLetterServiceServer(g, &deadletter.Server{Service: "consumers", DB: s.cfg.DB, Log: s.log})
}

// Run consumes and dispatches until ctx is done; the first part that
// fails stops the others and its error is Run's.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.auditTasks.Run(ctx) })
	g.Go(func() error { return s.auditQuota.Run(ctx) })
	g.Go(func() error { return s.auditOrchestration.Run(ctx) })
	g.Go(func() error { return s.auditPipeline.Run(ctx) })
	g.Go(func() error { return s.auditAdmin.Run(ctx) })
	g.Go(func() error { return s.usageConsumer.Run(ctx) })
	g.Go(func() error { return s.hookConsumer.Run(ctx) })
	g.Go(func() error { return s.alertConsumer.Run(ctx) })
	g.Go(func() error {
		return s.leading(ctx, "webhook-dispatcher", func(ctx context.Context) { s.hooks.RunDispatcher(ctx) })
	})
	g.Go(func() error {
		return s.leading(ctx, "audit-retention", func(ctx context.Context) { s.audit.RunRetention(ctx, s.cfg.Audit.Every) })
	})
	return g.Wait()
}

// leading runs work as the leader among the replicas (platform/leader),
// for as long as the lock's session lives.
func (s *Service) leading(ctx context.Context, lock string, work func(context.Context)) error {
	return leader.Run(ctx, s.cfg.DB, leader.Config{Lock: lock, Role: lock, Logger: s.log}, func(ctx context.Context, l *pg.Lock) error {
		ctx, cancel := context.WithCancel(ctx)
		lost := make(chan error, 1)
		checked := make(chan struct{})
		// The checker uses the lock's connection: it must be done before
		// the session returns and leader.Run releases the lock on it.
		defer func() { cancel(); <-checked }()
		go func() {
			defer close(checked)
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(5 * time.Second):
					if err := l.Alive(ctx); err != nil && ctx.Err() == nil {
						lost <- err
						cancel()
						return
					}
				}
			}
		}()
		work(ctx)
		select {
		case err := <-lost:
			return fmt.Errorf("%s: lost the lock: %w", lock, err)
		default:
			return nil
		}
	})
}

// WakeDispatcher asks the webhook dispatcher to look for due deliveries
// now (tests).
func (s *Service) WakeDispatcher() { s.hooks.Wake() }

// ExpireAudit runs one audit retention pass at the service's clock and
// returns the archive keys it wrote (tests, operators).
func (s *Service) ExpireAudit(ctx context.Context) ([]string, int, error) {
	rep, err := s.audit.Expire(ctx)
	return rep.Archived, rep.Deleted, err
}

// ReplaySpecs describe the service's projections for `taskmesh replay`:
// each rebuilds its tables from offset 0 and compares them with the live
// ones (the webhook schedule is the dispatcher's state, so it is replayed
// into a scratch table and not compared; the audit rows of each topic are
// compared apart, as several runners write the one table: each replay's
// Where takes exactly the resources its topic writes, so no replay
// touches another source's rows).
func ReplaySpecs(k kafka.Config) []projection.ReplaySpec {
	return append([]projection.ReplaySpec{
		{Name: AuditTasks, Topic: TaskTopic, Tables: []string{"audit_logs"}, Kafka: k,
			Where: map[string]string{"audit_logs": auditpg.TaskTopic.Rows()},
			NewHandler: func(m map[string]string) projection.Handler {
				return auditpg.Projection{Table: m["audit_logs"], Topic: auditpg.TaskTopic}
			}},
		{Name: AuditOrchestration, Topic: OrchestrationTopic, Tables: []string{"audit_logs"}, Kafka: k,
			Where: map[string]string{"audit_logs": auditpg.OrchestrationTopic.Rows()},
			NewHandler: func(m map[string]string) projection.Handler {
				return auditpg.Projection{Table: m["audit_logs"], Topic: auditpg.OrchestrationTopic}
			}},
		{Name: AuditPipeline, Topic: PipelineTopic, Tables: []string{"audit_logs"}, Kafka: k,
			Where: map[string]string{"audit_logs": auditpg.PipelineTopic.Rows()},
			NewHandler: func(m map[string]string) projection.Handler {
				return auditpg.Projection{Table: m["audit_logs"], Topic: auditpg.PipelineTopic}
			}},
		{Name: AuditQuota, Topic: QuotaTopic, Tables: []string{"audit_logs"}, Kafka: k,
			Where: map[string]string{"audit_logs": auditpg.QuotaTopic.Rows()},
			NewHandler: func(m map[string]string) projection.Handler {
				return auditpg.Projection{Table: m["audit_logs"], Topic: auditpg.QuotaTopic}
			}},
		{Name: AuditAdmin, Topic: AdminTopic, Tables: []string{"audit_logs"}, Kafka: k,
			Where: map[string]string{"audit_logs": auditpg.AdminTopic.Rows()},
			NewHandler: func(m map[string]string) projection.Handler {
				return auditpg.Projection{Table: m["audit_logs"], Topic: auditpg.AdminTopic}
			}},
		{Name: Usage, Topic: TaskTopic, Tables: []string{"usage_tasks", "usage_records"}, Kafka: k,
			NewHandler: func(m map[string]string) projection.Handler {
				return consumer.ReplayHandler(usagepg.Meter{Tables: usagepg.Tables{Tasks: m["usage_tasks"], Records: m["usage_records"]}}.Apply)
			}},
		{Name: Webhooks, Topic: TaskTopic, Tables: []string{"webhook_tasks", "webhook_deliveries"}, Scratch: []string{"webhook_schedule"},
			Where: map[string]string{"webhook_deliveries": "subject = 'task'"}, Kafka: k, NewHandler: func(m map[string]string) projection.Handler {
				return consumer.ReplayHandler(hookpg.Notifier{Tables: hookpg.Tables{Tasks: m["webhook_tasks"],
					Deliveries: m["webhook_deliveries"], Schedule: m["webhook_schedule"]}, MaxAge: DefaultBackoff.MaxAge}.Apply)
			}},
	}, replayAlerts(k))
}

// replayAlerts is the replay of the group-alert consumer (its deliveries
// share webhook_deliveries with the task notifications and are compared
// apart).
func replayAlerts(k kafka.Config) projection.ReplaySpec {
	return projection.ReplaySpec{Name: WebhookAlerts, Topic: OrchestrationTopic, Tables: []string{"webhook_groups", "webhook_deliveries"},
		Scratch: []string{"webhook_schedule"}, Where: map[string]string{"webhook_deliveries": "subject = 'task_group'"}, Kafka: k,
		NewHandler: func(m map[string]string) projection.Handler {
			return consumer.ReplayHandler(hookpg.Alerts{Tables: hookpg.Tables{Groups: m["webhook_groups"], Deliveries: m["webhook_deliveries"],
				Schedule: m["webhook_schedule"]}, MaxAge: DefaultBackoff.MaxAge}.Apply)
		}}
}

// UsageApply is the usage consumer's Apply on the live tables, for tests
// and benchmarks that run the consumer alone.
func UsageApply() consumer.Apply { return usagepg.Meter{Tables: usagepg.LiveTables}.Apply }

// scheduleWaker wakes the webhook dispatcher after a consumer's commit
// whose transaction scheduled a delivery to send. The consumer applies
// and commits on one goroutine, so the flag belongs to the transaction
// that just committed; one that scheduled a delivery and then failed
// leaves it set, which costs one early look, and a delivery the flag
// missed is found at the dispatcher's next poll.
type scheduleWaker struct {
	wake    func()
	pending atomic.Bool
}

// scheduled is the notifier's Scheduled hook.
func (w *scheduleWaker) scheduled() { w.pending.Store(true) }

// afterCommit is the consumer's AfterCommit hook.
func (w *scheduleWaker) afterCommit() {
	if w.pending.Swap(false) {
		w.wake()
	}
}
