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
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
	"github.com/taskmesh/taskmesh/services/gateway/internal/live"
	"github.com/taskmesh/taskmesh/services/gateway/internal/outbound"
	"github.com/taskmesh/taskmesh/services/gateway/internal/ratelimit"
	"github.com/taskmesh/taskmesh/services/gateway/internal/throttle"
	"github.com/taskmesh/taskmesh/services/gateway/ports/admin"
	"github.com/taskmesh/taskmesh/services/gateway/ports/grpcproxy"
	"github.com/taskmesh/taskmesh/services/gateway/ports/rest"
)

// Config configures a Gateway.
type Config struct {
	// HTTPAddr serves REST, /openapi.json, /healthz and object downloads
	// (e.g. 127.0.0.1:8080; port 0 picks a free port, see HTTPAddr()).
	HTTPAddr string
	// GRPCAddr serves the gRPC front door (e.g. 127.0.0.1:9090).
	GRPCAddr string
	// SchedulerTarget is the scheduler's internal gRPC address (a
	// grpc.NewClient target).
	SchedulerTarget string
	// QuotaTarget, if set, is the quota service's internal gRPC address:
	// its QuotaService and AdmissionService are served under /api/v1/… and
	// through the gRPC front door.
	QuotaTarget string
	// InternalToken is sent to internal services (authn.MDInternalToken).
	// Never logged.
	InternalToken string
	// DB's search_path starts with the gateway's schema, migrated with
	// Migrations.
	DB *pgxpool.Pool
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
	log      *slog.Logger
	creds    *credentials.Store
	throttle *throttle.Throttle
	redis    *redis.Client // nil without RateLimits.RedisURL
	upstream *grpc.ClientConn
	quota    *grpc.ClientConn // nil without Config.QuotaTarget
	handler  http.Handler
	health   *health.Server
	live     *live.Service

	httpLis, grpcLis net.Listener
	httpSrv          *http.Server
	grpcSrv          *grpc.Server

	stopWatch context.CancelFunc
	watchDone chan struct{}

	runOnce   sync.Once
	closeOnce sync.Once
	closeErr  error
}

// New checks cfg, connects (lazily) to the scheduler and opens both
// listeners, so a busy port fails here rather than in Run. Call Run to
// serve, or Close to release everything without serving.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	switch {
	case cfg.HTTPAddr == "":
		return nil, errors.New("gateway: Config.HTTPAddr is empty")
	case cfg.GRPCAddr == "":
		return nil, errors.New("gateway: Config.GRPCAddr is empty")
	case cfg.SchedulerTarget == "":
		return nil, errors.New("gateway: Config.SchedulerTarget is empty")
	case cfg.InternalToken == "":
		return nil, errors.New("gateway: Config.InternalToken is empty")
	case cfg.DB == nil:
		return nil, errors.New("gateway: Config.DB is nil")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// Fail at start-up, not on the first request, when the schema is missing.
	if _, err := cfg.DB.Exec(ctx, `SELECT 1 FROM api_keys, agent_tokens LIMIT 0`); err != nil {
		return nil, fmt.Errorf("gateway: credential tables not reachable (is the schema migrated with gateway.Migrations?): %w", err)
	}

	rl := cfg.RateLimits
	if rl.Tiers == nil {
		rl.Tiers = DefaultTierLimits()
	}
	if rl.VideoTokensPerSecond == 0 {
		rl.VideoTokensPerSecond = DefaultVideoTokensPerSecond
	}
	if rl.VideoTokensPerSecond < 0 || rl.OtherRouteTokens < 0 {
		return nil, errors.New("gateway: token costs must not be negative")
	}
	for tier, l := range rl.Tiers {
		if l.RPM < 0 || l.TPM < 0 || l.RPM > credentials.MaxLimit || l.TPM > credentials.MaxLimit {
			return nil, fmt.Errorf("gateway: tier %q limits %+v are not in [0, %d]", tier, l, credentials.MaxLimit)
		}
	}

	g := &Gateway{
		log:    log,
		creds:  credentials.New(cfg.DB, cfg.Now, log),
		health: health.NewServer(),
	}
	var limiter ratelimit.Limiter
	if rl.RedisURL != "" {
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
		g.redis = redis.NewClient(ropts)
		limiter = ratelimit.NewRedis(g.redis, nil)
	} else {
		limiter = ratelimit.NewMemory(cfg.Now)
	}
	g.throttle = throttle.New(limiter, g.creds, throttle.Config{
		Tiers:                rl.Tiers,
		VideoTokensPerSecond: rl.VideoTokensPerSecond,
		OtherRouteTokens:     rl.OtherRouteTokens,
	}, cfg.Now, log)
	adminSrv, err := admin.New(g.creds, rl.Tiers, g.throttle.Forget, log)
	if err != nil {
		g.closeRedis()
		return nil, fmt.Errorf("gateway: %w", err)
	}
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
		g.closeRedis()
		return nil, fmt.Errorf("gateway: scheduler client for %q: %w", cfg.SchedulerTarget, err)
	}
	g.upstream = upstream
	var quotaUpstream grpc.ClientConnInterface
	if cfg.QuotaTarget != "" {
		if g.quota, err = grpc.NewClient(cfg.QuotaTarget, opts...); err != nil {
			upstream.Close()
			g.closeRedis()
			return nil, fmt.Errorf("gateway: quota client for %q: %w", cfg.QuotaTarget, err)
		}
		quotaUpstream = g.quota
	}
	lv := cfg.Live
	g.live, err = live.New(live.Config{Kafka: lv.Kafka, Topic: lv.Topic, Tasks: taskv1.NewTaskServiceClient(upstream),
		MaxStreamsPerTenant: lv.MaxStreamsPerTenant, Buffer: lv.Buffer, KeepAlive: lv.KeepAlive,
		IdleTimeout: lv.IdleTimeout, WriteTimeout: lv.WriteTimeout, Logger: log})
	if err != nil {
		upstream.Close()
		g.closeQuota()
		g.closeRedis()
		return nil, fmt.Errorf("gateway: %w", err)
	}

	g.handler, err = rest.NewHandler(ctx, rest.Options{
		Upstream:       upstream,
		QuotaUpstream:  quotaUpstream,
		Auth:           g.creds,
		TrustedProxies: cfg.TrustedProxies,
		Ready:          func() bool { return upstream.GetState() == connectivity.Ready },
		Objects:        cfg.Objects,
		Live:           g.live,
		Logger:         log,
		Throttle:       g.throttle.Middleware,
		Admin:          adminSrv,
	})
	if err != nil {
		upstream.Close()
		g.closeQuota()
		g.closeRedis()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.grpcSrv = grpcproxy.NewServer(grpcproxy.Options{
		Upstream:       upstream,
		QuotaUpstream:  quotaUpstream,
		Auth:           g.creds,
		TrustedProxies: cfg.TrustedProxies,
		Health:         g.health,
		Logger:         log,
		Throttle:       g.throttle.GRPCError,
		Register:       func(r grpc.ServiceRegistrar) { adminv1.RegisterAdminServiceServer(r, adminSrv) },
		// Video requests carry first frames of up to 10 MB as base64.
		ServerOptions: []grpc.ServerOption{grpc.MaxRecvMsgSize(grpcserver.MaxRecvMsgBytes)},
	})
	g.httpSrv = &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	var lc net.ListenConfig
	if g.httpLis, err = lc.Listen(ctx, "tcp", cfg.HTTPAddr); err != nil {
		upstream.Close()
		g.closeQuota()
		g.closeRedis()
		return nil, fmt.Errorf("gateway: listen http: %w", err)
	}
	if g.grpcLis, err = lc.Listen(ctx, "tcp", cfg.GRPCAddr); err != nil {
		g.httpLis.Close()
		upstream.Close()
		g.closeQuota()
		g.closeRedis()
		return nil, fmt.Errorf("gateway: listen grpc: %w", err)
	}

	watchCtx, stop := context.WithCancel(context.Background())
	g.stopWatch, g.watchDone = stop, make(chan struct{})
	upstream.Connect()
	go g.watchUpstream(watchCtx)
	return g, nil
}

// watchUpstream mirrors the scheduler connection's state into the gRPC
// health service: SERVING while it is ready.
func (g *Gateway) watchUpstream(ctx context.Context) {
	defer close(g.watchDone)
	services := []string{"", taskv1.TaskService_ServiceDesc.ServiceName, taskv1.LeaseService_ServiceDesc.ServiceName}
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
	// Each server reports nil when it was stopped on purpose.
	errc := make(chan error, 2)
	liveCtx, stopLive := context.WithCancel(context.WithoutCancel(ctx))
	liveDone := make(chan struct{})
	go func() { defer close(liveDone); _ = g.live.Run(liveCtx) }()
	go func() {
		err := g.httpSrv.Serve(g.httpLis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- wrap("http server", err)
	}()
	go func() { errc <- wrap("grpc server", g.grpcSrv.Serve(g.grpcLis)) }()
	g.log.Info("gateway serving", "http", g.HTTPAddr(), "grpc", g.GRPCAddr())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc: // a server failed, or Close was called
	}
	g.health.Shutdown() // probes see NOT_SERVING while we drain
	// Live streams never end on their own soon: close them (clients
	// reconnect to another replica with their last id) before the HTTP
	// server waits for its requests.
	g.live.Shutdown()
	stopLive()
	<-liveDone

	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := g.httpSrv.Shutdown(stopCtx); err != nil {
			g.httpSrv.Close()
		}
	})
	wg.Go(func() {
		done := make(chan struct{})
		go func() { g.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-stopCtx.Done():
			g.grpcSrv.Stop()
			<-done
		}
	})
	wg.Wait()
	g.log.Info("gateway stopped")
	return errors.Join(runErr, g.Close())
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("gateway: %s: %w", what, err)
}

// Close releases the listeners and the scheduler connection. Use it when
// Run is not called (e.g. tests that only use HTTPHandler); Run calls it
// when it returns. Close is idempotent.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() {
		g.stopWatch()
		<-g.watchDone
		// After Serve, the servers own the listeners and have closed them;
		// closing again returns an error worth ignoring.
		g.httpLis.Close()
		g.grpcLis.Close()
		g.closeErr = errors.Join(g.upstream.Close(), g.closeRedis())
		g.closeQuota()
	})
	return g.closeErr
}

// closeQuota closes the quota service's connection, if there is one.
func (g *Gateway) closeQuota() {
	if g.quota != nil {
		g.quota.Close()
	}
}

func (g *Gateway) closeRedis() error {
	if g.redis == nil {
		return nil
	}
	return g.redis.Close()
}
