package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/platform/closer"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/outbox"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
	"github.com/taskmesh/taskmesh/services/gateway/internal/live"
	"github.com/taskmesh/taskmesh/services/gateway/internal/outbound"
	"github.com/taskmesh/taskmesh/services/gateway/internal/ratelimit"
	"github.com/taskmesh/taskmesh/services/gateway/internal/throttle"
	"github.com/taskmesh/taskmesh/services/gateway/ports/admin"
	"github.com/taskmesh/taskmesh/services/gateway/ports/deadletters"
	"github.com/taskmesh/taskmesh/services/gateway/ports/grpcproxy"
	"github.com/taskmesh/taskmesh/services/gateway/ports/rest"
)

// Config configures a Gateway.
type Config struct {
	// HTTPAddr serves REST, /openapi.json, /healthz and object downloads
	// (e.g. 127.0.0.1:8080; port 0 picks a free port, see HTTPAddr()).
	HTTPAddr string
	// HTTPListener, if set, is used instead of listening on HTTPAddr: a
	// caller that must know the address before the gateway starts (object
	// URLs name it) opens it, so no other process can take the port in
	// between. The gateway closes it.
	HTTPListener net.Listener
	// GRPCAddr serves the gRPC front door (e.g. 127.0.0.1:9090).
	GRPCAddr string
	// SchedulerTarget is the scheduler's internal gRPC address (a
	// grpc.NewClient target).
	SchedulerTarget string
	// SchedulerLocal, if set, is an in-process connection to a scheduler
	// running in this process (grpcserver.Local, as `taskmesh dev` runs
	// it): the REST API's unary calls go through it instead of the
	// network (docs/decisions/0080-in-process-scheduler-calls.md).
	// SchedulerTarget is still needed: streams, the gRPC front door, live
	// streams and the readiness check use it.
	SchedulerLocal grpc.ClientConnInterface
	// QuotaTarget, if set, is the quota service's internal gRPC address:
	// its QuotaService and AdmissionService are served under /api/v1/… and
	// through the gRPC front door.
	QuotaTarget string
	// ConsumersTarget, if set, is the consumers service's internal gRPC
	// address: the audit log, usage and webhooks (AuditService,
	// UsageService, WebhookService) are served under /api/v1/… and through
	// the gRPC front door, and its dead letters join the others'.
	ConsumersTarget string
	// InternalToken is sent to internal services (authn.MDInternalToken).
	// Never logged.
	InternalToken string
	// DB's search_path starts with the gateway's schema, migrated with
	// Migrations.
	DB *pgxpool.Pool
	// DatabaseURL is used when DB is nil: New opens a pool on it with
	// Schema, migrates it, and Close closes it.
	DatabaseURL string
	// AdminKeyFile, if set, is where Run (the package function, not the
	// method) bootstraps an operator key when no usable one exists (see
	// Gateway.AdminKeyFile); New ignores it.
	AdminKeyFile string
	// Objects, if set, is mounted at /objects/ without authentication
	// (signed object URLs). It receives the full path.
	Objects http.Handler
	// TrustedProxies are the reverse proxies whose X-Forwarded-For (HTTP)
	// or x-forwarded-for metadata (gRPC) is believed. Empty: the client
	// address is always the TCP peer.
	TrustedProxies []netip.Prefix
	// Logger receives the gateway's logs (slog.Default if nil).
	Logger *slog.Logger
	// Now is the clock (time.Now if nil).
	Now func() time.Time
	// RateLimits configures the RPM and TPM limits.
	RateLimits RateLimits
	// Live configures live task streams (see LiveConfig).
	Live LiveConfig
	// MaxUploadBytes bounds a POST /jobs/uploads request (default: 1 GiB
	// and the multipart framing); the scheduler applies each kind's limit.
	MaxUploadBytes int64
	// NoConsole turns the web console at /ui off.
	NoConsole bool
	// Metrics, if set, is served at /metrics on the HTTP port without
	// authentication (platform/metrics; docs/operations.md).
	Metrics http.Handler
	// Events configures the publication of the admin events (see
	// EventsConfig).
	Events EventsConfig
}

// RateLimits configures the per-key and per-tenant limits of requests per
// minute (RPM) and tokens per minute (TPM).
type RateLimits struct {
	// RedisURL (redis://[user:pass@]host:port/db, rediss:// for TLS) is
	// the store shared by every replica, so that a limit holds in total.
	// Empty: limits are kept in this process, right only for a single
	// replica (each replica would allow the whole limit).
	RedisURL string
	// Tiers are the default limits of a tenant without its own, by tier
	// (DefaultTierLimits if nil). A zero field is no limit.
	Tiers map[string]Limits
	// VideoTokensPerSecond is the token cost of each second of a video
	// generation (DefaultVideoTokensPerSecond if 0). A video request costs
	// runes(prompt truncated to 800) + VideoTokensPerSecond × duration.
	VideoTokensPerSecond int64
	// OtherRouteTokens is the token cost of every other request (0: those
	// are limited by RPM only).
	OtherRouteTokens int64
}

// Limits are requests and tokens per minute; 0 is no limit.
type Limits = credentials.Limits

// MaxLimit is the largest limit (per minute) a tenant, key or tier may have.
const MaxLimit = credentials.MaxLimit

// DefaultVideoTokensPerSecond is the default token cost of one second of
// generated video.
const DefaultVideoTokensPerSecond = throttle.DefaultVideoTokensPerSecond

// DefaultTierLimits returns the tier defaults used when RateLimits.Tiers is
// nil.
func DefaultTierLimits() map[string]Limits { return maps.Clone(throttle.DefaultTiers) }

// Schema is the gateway's default Postgres schema (credentials).
const Schema = "gateway"

// poolConns is the size of the pool New opens on Config.DatabaseURL.
const poolConns = 16

// Timeouts of the HTTP server and of shutdown.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	// shutdownTimeout bounds the graceful stop; long polls (claim waits up
	// to 60 s) and watches still open then are cut.
	shutdownTimeout = 10 * time.Second
	// maxUpstreamRecv lets a full page of tasks (500, each with up to
	// 64 KiB of stdout and of stderr) through; grpc's default is 4 MiB.
	maxUpstreamRecv = 128 << 20
)

// Gateway is a configured gateway. Its listeners are open once New returns;
// Run serves them.
type Gateway struct {
	log       *slog.Logger
	creds     *credentials.Store
	db        *pgxpool.Pool
	relay     *outbox.Relay // nil without Config.Events.Kafka
	throttle  *throttle.Throttle
	upstream  *grpc.ClientConn
	quota     *grpc.ClientConn // nil without Config.QuotaTarget
	consumers *grpc.ClientConn // nil without Config.ConsumersTarget
	handler   http.Handler
	health    *health.Server
	live      *live.Service

	httpLis, grpcLis net.Listener
	httpSrv          *http.Server
	grpcSrv          *grpc.Server

	// owned releases, last opened first, everything New opened: the
	// upstream watch, listeners, connections, Redis, a pool it opened.
	owned     closer.Stack
	watchDone chan struct{}

	runOnce   sync.Once
	closeOnce sync.Once
	closeErr  error
}

// New checks cfg, connects (lazily) to the scheduler and opens both
// listeners, so a busy port fails here rather than in Run. Call Run to
// serve, or Close to release everything without serving. On an error it
// releases whatever it had opened.
func New(ctx context.Context, cfg Config) (_ *Gateway, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	rl, err := cfg.RateLimits.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	g := &Gateway{log: log, health: health.NewServer()}
	defer func() {
		if err != nil {
			_ = g.owned.Close()
		}
	}()
	db, err := g.database(ctx, cfg)
	if err != nil {
		return nil, err
	}
	g.db, g.creds = db, credentials.New(db, cfg.Now, log)
	g.relay = cfg.Events.relay(g)
	limiter, err := g.limiter(rl, cfg.Now)
	if err != nil {
		return nil, err
	}
	g.throttle = throttle.New(limiter, g.creds, throttle.Config{
		Tiers:                rl.Tiers,
		VideoTokensPerSecond: rl.VideoTokensPerSecond,
		OtherRouteTokens:     rl.OtherRouteTokens,
	}, cfg.Now, log)
	adminSrv, err := admin.New(g.creds, rl.Tiers, g.throttle.Forget, log)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if err := g.dial(cfg); err != nil {
		return nil, err
	}
	if g.quota != nil {
		adminSrv.RegisterTenantsWith(quotav1.NewQuotaServiceClient(g.quota))
	}
	agentSrv, err := admin.NewAgentServer(g.creds, taskv1.NewAgentFleetServiceClient(g.upstream), cfg.Now, log)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.creds.OnAgentRevoked(agentSrv.DrainRevoked)
	if err := g.servers(ctx, cfg, adminSrv, agentSrv); err != nil {
		return nil, err
	}
	if err := g.listen(ctx, cfg); err != nil {
		return nil, err
	}
	g.watch()
	return g, nil
}

// check refuses a Config that misses what New needs.
func (cfg *Config) check() error {
	switch {
	case cfg.HTTPAddr == "" && cfg.HTTPListener == nil:
		return errors.New("gateway: Config.HTTPAddr is empty")
	case cfg.GRPCAddr == "":
		return errors.New("gateway: Config.GRPCAddr is empty")
	case cfg.SchedulerTarget == "":
		return errors.New("gateway: Config.SchedulerTarget is empty")
	case cfg.InternalToken == "":
		return errors.New("gateway: Config.InternalToken is empty")
	case cfg.DB == nil && cfg.DatabaseURL == "":
		return errors.New("gateway: Config.DB is nil and Config.DatabaseURL empty")
	}
	return nil
}

// withDefaults fills in the defaults of zero fields and refuses negative
// costs and limits out of range.
func (rl RateLimits) withDefaults() (RateLimits, error) {
	if rl.Tiers == nil {
		rl.Tiers = DefaultTierLimits()
	}
	if rl.VideoTokensPerSecond == 0 {
		rl.VideoTokensPerSecond = DefaultVideoTokensPerSecond
	}
	if rl.VideoTokensPerSecond < 0 || rl.OtherRouteTokens < 0 {
		return rl, errors.New("gateway: token costs must not be negative")
	}
	for tier, l := range rl.Tiers {
		if l.RPM < 0 || l.TPM < 0 || l.RPM > credentials.MaxLimit || l.TPM > credentials.MaxLimit {
			return rl, fmt.Errorf("gateway: tier %q limits %+v are not in [0, %d]", tier, l, credentials.MaxLimit)
		}
	}
	return rl, nil
}

// database returns cfg.DB, or a pool on cfg.DatabaseURL with the gateway's
// schema migrated, and checks that the credential tables are there: a
// missing schema fails at start-up, not on the first request.
func (g *Gateway) database(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	db := cfg.DB
	if db == nil {
		pool, err := pg.Open(ctx, pg.Config{URL: cfg.DatabaseURL, Schema: Schema, MaxConns: poolConns, ApplicationName: "taskmesh-gateway"})
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		g.owned.PushFunc(pool.Close)
		if err := pg.Migrate(ctx, pool, Schema, Migrations()...); err != nil {
			return nil, fmt.Errorf("gateway: migrate: %w", err)
		}
		db = pool
	}
	if _, err := db.Exec(ctx, `SELECT 1 FROM api_keys, agent_tokens LIMIT 0`); err != nil {
		return nil, fmt.Errorf("gateway: credential tables not reachable (is the schema migrated with gateway.Migrations?): %w", err)
	}
	return db, nil
}

// limiter keeps the rate limits in Redis when rl names one, else in this
// process.
func (g *Gateway) limiter(rl RateLimits, now func() time.Time) (ratelimit.Limiter, error) {
	if rl.RedisURL == "" {
		return ratelimit.NewMemory(now), nil
	}
	ropts, err := redis.ParseURL(rl.RedisURL)
	if err != nil {
		// The URL may hold a password: do not repeat it.
		return nil, errors.New("gateway: RateLimits.RedisURL does not parse as a redis:// URL")
	}
	// A request waits for the limiter: keep a slow or dead Redis from
	// adding seconds to each (the URL's query may set other values).
	if ropts.MaxRetries == 0 {
		ropts.MaxRetries = 1
	}
	if ropts.DialTimeout == 0 {
		ropts.DialTimeout = time.Second
	}
	if ropts.ReadTimeout == 0 {
		ropts.ReadTimeout = 500 * time.Millisecond
	}
	if ropts.WriteTimeout == 0 {
		ropts.WriteTimeout = 500 * time.Millisecond
	}
	client := redis.NewClient(ropts)
	g.owned.Push(client.Close)
	return ratelimit.NewRedis(client, nil), nil
}

// dial creates the (lazy) connections to the scheduler and, when
// configured, the quota service.
func (g *Gateway) dial(cfg Config) error {
	opts := append([]grpc.DialOption{
		// Internal traffic stays inside the cluster network; the internal
		// token, not TLS, is what internal services check.
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		otel.DialOption(),
		// The gateway talks to the scheduler all the time; an idle
		// connection would only make /healthz report a false outage.
		grpc.WithIdleTimeout(0),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxUpstreamRecv)),
	}, outbound.DialOptions(cfg.InternalToken)...)
	upstream, err := grpc.NewClient(cfg.SchedulerTarget, opts...)
	if err != nil {
		return fmt.Errorf("gateway: scheduler client for %q: %w", cfg.SchedulerTarget, err)
	}
	g.upstream = upstream
	g.owned.Push(upstream.Close)
	if cfg.QuotaTarget != "" {
		if g.quota, err = grpc.NewClient(cfg.QuotaTarget, opts...); err != nil {
			return fmt.Errorf("gateway: quota client for %q: %w", cfg.QuotaTarget, err)
		}
		g.owned.PushFunc(func() { g.quota.Close() }) // an error closing it changes nothing for the caller
	}
	if cfg.ConsumersTarget != "" {
		if g.consumers, err = grpc.NewClient(cfg.ConsumersTarget, opts...); err != nil {
			return fmt.Errorf("gateway: consumers client for %q: %w", cfg.ConsumersTarget, err)
		}
		g.owned.PushFunc(func() { g.consumers.Close() })
	}
	return nil
}

// deadLetters is the dead-letter API over every service configured.
func (g *Gateway) deadLetters() *deadletters.Server {
	ups := []deadletters.Upstream{{Name: "scheduler", Conn: g.upstream}}
	if g.quota != nil {
		ups = append(ups, deadletters.Upstream{Name: "quota", Conn: g.quota})
	}
	if g.consumers != nil {
		ups = append(ups, deadletters.Upstream{Name: "consumers", Conn: g.consumers})
	}
	return deadletters.New(ups...)
}

// liveStreams builds the live task, group and job streams.
func (g *Gateway) liveStreams(cfg Config) error {
	lv, err := live.New(live.Config{Kafka: cfg.Live.Kafka, Topic: cfg.Live.Topic, Tasks: taskv1.NewTaskServiceClient(g.upstream),
		Groups: taskv1.NewTaskGroupServiceClient(g.upstream),
		Jobs:   pipelinev1.NewPipelineServiceClient(g.upstream), JobTopic: cfg.Live.JobTopic,
		MaxStreamsPerTenant: cfg.Live.MaxStreamsPerTenant, Buffer: cfg.Live.Buffer, KeepAlive: cfg.Live.KeepAlive,
		IdleTimeout: cfg.Live.IdleTimeout, WriteTimeout: cfg.Live.WriteTimeout, Logger: g.log})
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	g.live = lv
	return nil
}

// servers builds the live streams, the REST handler, the gRPC front door
// and the HTTP server; none of them holds anything yet.
func (g *Gateway) servers(ctx context.Context, cfg Config, adminSrv *admin.Server, agentSrv *admin.AgentServer) error {
	var quotaUpstream, consumersUpstream grpc.ClientConnInterface
	if g.quota != nil {
		quotaUpstream = g.quota
	}
	if g.consumers != nil {
		consumersUpstream = g.consumers
	}
	deadLetters := g.deadLetters()
	if err := g.liveStreams(cfg); err != nil {
		return err
	}
	var err error
	g.handler, err = rest.NewHandler(ctx, rest.Options{
		Upstream:          g.restUpstream(cfg),
		QuotaUpstream:     quotaUpstream,
		ConsumersUpstream: consumersUpstream,
		Auth:              g.creds,
		TrustedProxies:    cfg.TrustedProxies,
		Ready:             func() bool { return g.upstream.GetState() == connectivity.Ready },
		Objects:           cfg.Objects,
		Live:              g.live,
		Logger:            g.log,
		Throttle:          g.throttle.Middleware,
		Admin:             adminSrv,
		Agents:            agentSrv,
		DeadLetters:       deadLetters,
		MaxUploadBytes:    cfg.MaxUploadBytes,
		Console:           consoleHandler(cfg),
		Metrics:           cfg.Metrics,
	})
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	g.grpcSrv = grpcproxy.NewServer(grpcproxy.Options{
		Upstream:          g.upstream,
		QuotaUpstream:     quotaUpstream,
		ConsumersUpstream: consumersUpstream,
		Auth:              g.creds,
		TrustedProxies:    cfg.TrustedProxies,
		Health:            g.health,
		Logger:            g.log,
		Throttle:          g.throttle.GRPCError,
		Register: func(r grpc.ServiceRegistrar) {
			adminv1.RegisterAdminServiceServer(r, adminSrv)
			adminv1.RegisterAgentServiceServer(r, agentSrv)
			deadletterv1.RegisterDeadLetterServiceServer(r, deadLetters)
		},
		Services: g.publicServices(),
		// Video requests carry first frames of up to 10 MB as base64.
		ServerOptions: []grpc.ServerOption{grpc.MaxRecvMsgSize(grpcserver.MaxRecvMsgBytes)},
	})
	g.httpSrv = &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	return nil
}

// publicServices are the proxied services the front door's reflection
// lists: the scheduler's (tasks, groups, templates, leases and attempt
// files, managed services and their agents' sync, video, pipeline), and
// the quota and consumers services' when they are configured.
func (g *Gateway) publicServices() []string {
	out := []string{taskv1.TaskService_ServiceDesc.ServiceName, taskv1.TaskGroupService_ServiceDesc.ServiceName,
		taskv1.TemplateService_ServiceDesc.ServiceName, taskv1.LeaseService_ServiceDesc.ServiceName,
		taskv1.AttemptFilesService_ServiceDesc.ServiceName, managedv1.ManagedServiceService_ServiceDesc.ServiceName,
		managedv1.ServiceAgentService_ServiceDesc.ServiceName,
		videov1.VideoService_ServiceDesc.ServiceName, pipelinev1.PipelineService_ServiceDesc.ServiceName}
	if g.quota != nil {
		out = append(out, quotav1.QuotaService_ServiceDesc.ServiceName, quotav1.AdmissionService_ServiceDesc.ServiceName)
	}
	if g.consumers != nil {
		out = append(out, auditv1.AuditService_ServiceDesc.ServiceName, usagev1.UsageService_ServiceDesc.ServiceName,
			webhookv1.WebhookService_ServiceDesc.ServiceName)
	}
	return out
}

// listen opens both listeners.
func (g *Gateway) listen(ctx context.Context, cfg Config) error {
	// After Serve the servers own the listeners and close them; closing
	// again returns an error worth ignoring.
	var lc net.ListenConfig
	var err error
	if g.httpLis = cfg.HTTPListener; g.httpLis == nil {
		if g.httpLis, err = lc.Listen(ctx, "tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("gateway: listen http: %w", err)
		}
	}
	g.owned.PushFunc(func() { g.httpLis.Close() })
	if g.grpcLis, err = lc.Listen(ctx, "tcp", cfg.GRPCAddr); err != nil {
		return fmt.Errorf("gateway: listen grpc: %w", err)
	}
	g.owned.PushFunc(func() { g.grpcLis.Close() })
	return nil
}

// watch starts watchUpstream until Close.
func (g *Gateway) watch() {
	watchCtx, stop := context.WithCancel(context.Background())
	g.watchDone = make(chan struct{})
	g.owned.PushFunc(func() { stop(); <-g.watchDone })
	g.upstream.Connect()
	go g.watchUpstream(watchCtx)
}

// watchUpstream mirrors the scheduler connection's state into the gRPC
// health service: SERVING while it is ready.
func (g *Gateway) watchUpstream(ctx context.Context) {
	defer close(g.watchDone)
	services := []string{"", taskv1.TaskService_ServiceDesc.ServiceName, taskv1.LeaseService_ServiceDesc.ServiceName,
		taskv1.AttemptFilesService_ServiceDesc.ServiceName, managedv1.ManagedServiceService_ServiceDesc.ServiceName,
		managedv1.ServiceAgentService_ServiceDesc.ServiceName, taskv1.TaskGroupService_ServiceDesc.ServiceName, taskv1.TemplateService_ServiceDesc.ServiceName}
	for {
		state := g.upstream.GetState()
		serving := healthpb.HealthCheckResponse_NOT_SERVING
		if state == connectivity.Ready {
			serving = healthpb.HealthCheckResponse_SERVING
		}
		for _, s := range services {
			g.health.SetServingStatus(s, serving)
		}
		if !g.upstream.WaitForStateChange(ctx, state) {
			return
		}
	}
}

// HTTPHandler returns the HTTP handler Run serves, for tests and
// benchmarks. The client address is taken from Request.RemoteAddr.
func (g *Gateway) HTTPHandler() http.Handler { return g.handler }

// Credentials returns the gateway's credential store.
func (g *Gateway) Credentials() *Credentials { return g.creds }

// HTTPAddr returns the address the HTTP listener is bound to.
func (g *Gateway) HTTPAddr() string { return g.httpLis.Addr().String() }

// GRPCAddr returns the address the gRPC front door is bound to.
func (g *Gateway) GRPCAddr() string { return g.grpcLis.Addr().String() }

// Run is the gateway as a process: New, then, with cfg.AdminKeyFile, an
// operator key bootstrapped into that file if no usable one exists, then
// Gateway.Run until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	g, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.AdminKeyFile != "" {
		_, created, err := g.AdminKeyFile(ctx, cfg.AdminKeyFile, true)
		if err != nil {
			return errors.Join(err, g.Close())
		}
		if created {
			g.log.Info("operator key for the admin API written", "file", cfg.AdminKeyFile)
		}
	}
	return g.Run(ctx)
}

// Run serves HTTP and gRPC until ctx is done or a server fails, then stops
// gracefully (in-flight requests get shutdownTimeout to finish) and
// releases everything as Close does. It returns nil after a stop caused by
// ctx. Run may be called once.
func (g *Gateway) Run(ctx context.Context) error {
	err := errors.New("gateway: Run called twice")
	g.runOnce.Do(func() { err = g.run(ctx) })
	return err
}

func (g *Gateway) run(ctx context.Context) error {
	// The two servers and the live tail stop together: when ctx is done,
	// or as soon as one of them fails (or Close pulls the listeners away).
	group, stopping := errgroup.WithContext(ctx)
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	liveCtx, stopLive := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	defer stopLive()
	group.Go(func() error { return wrap("live task tail", g.live.Run(liveCtx)) })
	if g.relay != nil {
		group.Go(func() error { return wrap("admin event relay", g.relay.Run(serveCtx)) })
	}
	group.Go(func() error {
		return wrap("http server", serveHTTP(serveCtx, g.httpSrv, g.httpLis, shutdownTimeout))
	})
	group.Go(func() error {
		return wrap("grpc server", grpcserver.Serve(serveCtx, g.grpcSrv, g.grpcLis, shutdownTimeout))
	})
	g.log.Info("gateway serving", "http", g.HTTPAddr(), "grpc", g.GRPCAddr())

	<-stopping.Done()
	g.health.Shutdown() // probes see NOT_SERVING while we drain
	// Live streams never end on their own soon: close them (clients
	// reconnect to another replica with their last id) before the HTTP
	// server waits for its requests.
	g.live.Shutdown()
	stopLive()
	stopServing()
	err := group.Wait()
	g.log.Info("gateway stopped")
	return errors.Join(err, g.Close())
}

// serveHTTP serves srv on lis until ctx is done, then shuts it down:
// requests in flight get grace to finish before the connections are
// closed. It returns nil after a stop caused by ctx.
func serveHTTP(ctx context.Context, srv *http.Server, lis net.Listener, grace time.Duration) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		// Never http.ErrServerClosed: only the shutdown below closes srv.
		// Its open connections go with it.
		srv.Close()
		return err
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := srv.Shutdown(stopCtx); err != nil {
		srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("gateway: %s: %w", what, err)
}

// Close releases the listeners, the connections and whatever else New
// opened. Use it when Run is not called (e.g. tests that only use
// HTTPHandler); Run calls it when it returns. Close is idempotent.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() { g.closeErr = g.owned.Close() })
	return g.closeErr
}
