package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
	"github.com/taskmesh/taskmesh/services/gateway/internal/outbound"
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
	// its AdmissionService is served under /api/v1/… and through the
	// gRPC front door.
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
}

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
	upstream *grpc.ClientConn
	quota    *grpc.ClientConn // nil without Config.QuotaTarget
	handler  http.Handler
	health   *health.Server

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

	g := &Gateway{
		log:    log,
		creds:  credentials.New(cfg.DB, cfg.Now, log),
		health: health.NewServer(),
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
		return nil, fmt.Errorf("gateway: scheduler client for %q: %w", cfg.SchedulerTarget, err)
	}
	g.upstream = upstream
	var quota *grpc.ClientConn
	if cfg.QuotaTarget != "" {
		if quota, err = grpc.NewClient(cfg.QuotaTarget, opts...); err != nil {
			upstream.Close()
			return nil, fmt.Errorf("gateway: quota client for %q: %w", cfg.QuotaTarget, err)
		}
		g.quota = quota
	}

	g.handler, err = rest.NewHandler(ctx, rest.Options{
		Upstream:       upstream,
		Quota:          optionalConn(quota),
		Auth:           g.creds,
		TrustedProxies: cfg.TrustedProxies,
		Ready:          func() bool { return upstream.GetState() == connectivity.Ready },
		Objects:        cfg.Objects,
		Logger:         log,
	})
	if err != nil {
		closeConns(upstream, quota)
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.grpcSrv = grpcproxy.NewServer(grpcproxy.Options{
		Upstream:       upstream,
		Quota:          optionalConn(quota),
		Auth:           g.creds,
		TrustedProxies: cfg.TrustedProxies,
		Health:         g.health,
		Logger:         log,
	})
	g.httpSrv = &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	var lc net.ListenConfig
	if g.httpLis, err = lc.Listen(ctx, "tcp", cfg.HTTPAddr); err != nil {
		closeConns(upstream, quota)
		return nil, fmt.Errorf("gateway: listen http: %w", err)
	}
	if g.grpcLis, err = lc.Listen(ctx, "tcp", cfg.GRPCAddr); err != nil {
		g.httpLis.Close()
		closeConns(upstream, quota)
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
		g.closeErr = closeConns(g.upstream, g.quota)
	})
	return g.closeErr
}

// closeConns closes the upstream connections (quota may be nil).
func closeConns(upstream, quota *grpc.ClientConn) error {
	err := upstream.Close()
	if quota != nil {
		err = errors.Join(err, quota.Close())
	}
	return err
}

// optionalConn keeps a nil connection nil as an interface.
func optionalConn(c *grpc.ClientConn) grpc.ClientConnInterface {
	if c == nil {
		return nil
	}
	return c
}
