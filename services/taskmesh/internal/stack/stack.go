// Package stack composes every Taskmesh service in one process on embedded
// defaults: a Postgres server it runs itself (or DATABASE_URL), an
// embedded Kafka-protocol broker (or real brokers), a filesystem object
// store, the scheduler, the quota service's admission layer, the
// consumers service (audit log, usage, webhooks), the gateway and a local
// executor agent. `taskmesh dev` runs it; end-to-end tests
// start it on temporary directories.
//
// All state lives under DataDir, so stopping and starting again keeps every
// task, event and credential.
package stack

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/taskmesh/taskmesh/platform/closer"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/consumers"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/quota"
	"github.com/taskmesh/taskmesh/services/quota/admission"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// Options configures a stack.
type Options struct {
	DataDir string
	// Metrics, if set, is served at /metrics on the gateway's HTTP port
	// (platform/metrics: the whole process's metrics).
	Metrics http.Handler
	// HTTPAddr and GRPCAddr are the gateway's public addresses.
	HTTPAddr, GRPCAddr string
	// DatabaseURL uses an existing Postgres instead of a local server.
	DatabaseURL string
	// PGPort for the local server (0 = any free port).
	PGPort int
	// PGParams are extra settings of the local server (benchmarks).
	PGParams map[string]string
	// KafkaBrokers uses an existing cluster instead of the embedded broker.
	KafkaBrokers []string
	// KafkaPort for the embedded broker (0 = any free port).
	KafkaPort int
	// Durable runs the local Postgres with fsync on and makes the embedded
	// broker sync every batch (dev: true; tests: false, faster).
	Durable bool
	// Agent starts a local executor agent with AgentSlots slots; its local
	// API listens on AgentLocalAPI ("" = off).
	Agent         bool
	AgentSlots    int
	AgentLocalAPI string
	// Timing overrides the scheduler's timing (tests).
	Timing scheduler.Timing
	// RateLimits configures the gateway's RPM and TPM limits.
	RateLimits gateway.RateLimits
	// Video configures the video generation API (nil: the defaults, models
	// wan2.2-t2v and wan2.2-i2v).
	Video *scheduler.VideoConfig
	// Now is the scheduler's clock (tests; default time.Now).
	Now func() time.Time
	// GUQuotas replaces the embedded quota service's GU quota check in
	// admission (tests); nil uses the quota service.
	GUQuotas admission.GUQuotas
	// InfraOnly starts only what the services need from outside, the
	// Postgres server and the Kafka-protocol broker (taskmesh dev
	// --infra-only, for deployments/local/run.sh), and no service.
	InfraOnly bool
	// Pipeline configures the model-conversion pipeline (nil: the
	// defaults: the stand-in stage programs, run by this binary).
	Pipeline *scheduler.PipelineConfig
	// PipelineCaps sets the caps of the pipeline's stage queues at start
	// (stage name → most tasks running at once); stages left out keep
	// their queue as it is.
	PipelineCaps map[string]int
	// AgentLabels are the local agent's labels (default: every pipeline
	// pool, pool:onnx, pool:bie and pool:nef).
	AgentLabels []string
	// NoAdmission runs the scheduler without the quota service's
	// admission: work with a queue or GPU requests is claimable at once
	// (tests of other parts that play the GPU runner themselves).
	NoAdmission bool
	// Consumers adjusts the consumers service's configuration (tests);
	// the stack fills in its database, Kafka, object store, webhook key and
	// logger.
	Consumers consumers.Config
	// TrustedProxies are the gateway's (Config.TrustedProxies).
	TrustedProxies []netip.Prefix
	Logger         *slog.Logger
}

// Stack is a running Taskmesh.
type Stack struct {
	opts     Options
	Postgres string // database URL (password elided in String output)
	// PostgresDir is the local server's data directory ("" with DatabaseURL).
	PostgresDir string
	Kafka       []string
	HTTPURL     string
	GRPCAddr    string
	ObjectDir   string
	// DemoAPIKey belongs to tenant "demo"; AgentToken to the local agent.
	DemoAPIKey string
	// AdminKeyFile holds an operator key for the admin API (0600).
	AdminKeyFile  string
	AgentToken    string
	AgentID       string
	AgentLocalAPI string
	MachineID     string

	Gateway   *gateway.Gateway
	Scheduler *scheduler.Service
	Quota     *quota.Service
	Admission *admission.Service
	Consumers *consumers.Service
	// ConsumersAddr is the consumers service's internal gRPC address.
	ConsumersAddr string
	// QuotaCluster is the embedded default cluster with QuotaInventory
	// GPUs per machine type, on which the in-process operator provisions
	// Ray clusters and WorkGroups.
	QuotaCluster   string
	QuotaInventory map[string]int64
	// QuotaAddr is the quota service's internal gRPC address; operator
	// actions (producing quotas) go there with InternalToken and an admin
	// principal (authn.Outgoing).
	QuotaAddr         string
	InternalToken     string
	InternalTokenFile string

	// owned releases the Postgres server and the embedded broker, last
	// started first, once the components have stopped.
	owned closer.Stack
	// schedulerLocal serves the gateway's REST calls to the scheduler
	// in-process.
	schedulerLocal *grpcserver.Local
	// quotaLocal serves the scheduler's calls to the quota service in
	// this process.
	quotaLocal *grpcserver.Local
	// httpLis is the gateway's HTTP listener when the stack chose the
	// port itself (see objectStore).
	httpLis net.Listener
	// components runs every component until Close cancels them or one of
	// them fails; failed, their context, is done from either moment on.
	components *errgroup.Group
	failed     context.Context
	cancel     context.CancelFunc
	stopOnce   sync.Once
	stopErr    error
}

// Start brings every component up and returns once they serve. The
// components run on after ctx ends, until Close; on an error Start stops
// what it had started.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	o = o.withDefaults()
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, err
	}
	s := &Stack{opts: o}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.components, s.failed = errgroup.WithContext(runCtx)
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.startPostgres(ctx); err != nil {
		return nil, err
	}
	if err := s.startKafka(); err != nil {
		return nil, err
	}
	if o.InfraOnly {
		return s, nil
	}
	if err := s.writeInternalToken(); err != nil {
		return nil, err
	}
	objects, err := s.objectStore()
	if err != nil {
		return nil, err
	}
	if err := s.startQuota(ctx); err != nil {
		return nil, err
	}
	schedAddr, err := s.startScheduler(ctx, objects)
	if err != nil {
		return nil, err
	}
	if err := s.startConsumers(ctx, objects); err != nil {
		return nil, err
	}
	if err := s.startGateway(ctx, schedAddr, objects); err != nil {
		return nil, err
	}
	if err := s.bootstrap(ctx); err != nil {
		return nil, err
	}
	if o.Agent {
		s.AgentLocalAPI = o.AgentLocalAPI
		if err := s.startAgent(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (o Options) withDefaults() Options {
	if o.DataDir == "" {
		o.DataDir = ".taskmesh"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AgentSlots <= 0 {
		o.AgentSlots = 4
	}
	if o.AgentLabels == nil {
		o.AgentLabels = []string{"pool:onnx", "pool:bie", "pool:nef"}
	}
	return o
}

// writeInternalToken makes the token internal services require. Operators
// reach the quota service with it (taskmesh ctl quota) from the file; it
// changes on every start.
func (s *Stack) writeInternalToken() error {
	token, err := randomHex(32)
	if err != nil {
		return err
	}
	s.InternalToken = token
	s.InternalTokenFile = filepath.Join(s.opts.DataDir, "internal-token")
	return os.WriteFile(s.InternalTokenFile, []byte(token+"\n"), 0o600)
}

func (s *Stack) startPostgres(ctx context.Context) error {
	if s.opts.DatabaseURL != "" {
		s.Postgres = s.opts.DatabaseURL
		return nil
	}
	password, err := secretFile(filepath.Join(s.opts.DataDir, "postgres.password"))
	if err != nil {
		return err
	}
	s.PostgresDir = filepath.Join(s.opts.DataDir, "pg")
	params := map[string]string{"max_connections": "200"}
	maps.Copy(params, s.opts.PGParams)
	server := &pg.LocalServer{DataDir: s.PostgresDir, Port: s.opts.PGPort, Durable: s.opts.Durable,
		Password: password, LogPath: filepath.Join(s.opts.DataDir, "postgres.log"), Params: params}
	err = server.Start(ctx)
	if errors.Is(err, pg.ErrUnreachableDataDir) {
		// Root in a private (0700) directory: the postgres user that runs
		// the server cannot get to DataDir. Keep the cluster in a place of
		// its own that is stable for this DataDir, so restarts find it.
		abs, _ := filepath.Abs(s.opts.DataDir)
		sum := sha256.Sum256([]byte(abs))
		s.PostgresDir = filepath.Join("/var/lib/taskmesh/dev", hex.EncodeToString(sum[:6]), "pg")
		if err = os.MkdirAll(filepath.Dir(s.PostgresDir), 0o755); err != nil {
			return err
		}
		server.DataDir = s.PostgresDir
		err = server.Start(ctx)
	}
	if err != nil {
		return fmt.Errorf("start Postgres: %w", err)
	}
	s.owned.Push(server.Stop)
	s.Postgres = server.URL("taskmesh")
	return createDatabase(ctx, server.URL("postgres"), "taskmesh")
}

// createDatabase creates the database name on the server adminURL reaches
// unless it exists.
func createDatabase(ctx context.Context, adminURL, name string) error {
	admin, err := pg.Open(ctx, pg.Config{URL: adminURL})
	if err != nil {
		return err
	}
	defer admin.Close()
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

func (s *Stack) startKafka() error {
	if len(s.opts.KafkaBrokers) > 0 {
		s.Kafka = s.opts.KafkaBrokers
		return nil
	}
	b, err := kafka.StartEmbedded(kafka.EmbeddedOptions{DataDir: filepath.Join(s.opts.DataDir, "kafka"), Port: s.opts.KafkaPort,
		SyncWrites: s.opts.Durable, Partitions: 16})
	if err != nil {
		return fmt.Errorf("start the embedded Kafka broker: %w", err)
	}
	s.owned.PushFunc(b.Close)
	s.Kafka = b.Addrs()
	return nil
}

func (s *Stack) kafkaConfig() kafka.Config {
	return kafka.Config{Brokers: s.Kafka, ClientID: "taskmesh"}
}

// objectStore is the filesystem store under DataDir, its URLs pointing at
// the gateway's /objects/.
func (s *Stack) objectStore() (*objectstore.FS, error) {
	secret, err := secretFile(filepath.Join(s.opts.DataDir, "objects.secret"))
	if err != nil {
		return nil, err
	}
	httpAddr := s.opts.HTTPAddr
	if httpAddr == "" || strings.HasSuffix(httpAddr, ":0") {
		// The URL base must be known before the gateway starts: listen
		// now and hand the listener over, so nothing can take the port
		// in between.
		host := "127.0.0.1"
		if h, _, err := net.SplitHostPort(httpAddr); err == nil && h != "" {
			host = h
		}
		lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		s.httpLis = lis
		s.owned.PushFunc(func() { lis.Close() }) // the gateway closes it first when it started
		httpAddr = lis.Addr().String()
		s.opts.HTTPAddr = httpAddr
	}
	s.ObjectDir = filepath.Join(s.opts.DataDir, "objects")
	return objectstore.NewFS(objectstore.FSConfig{Root: s.ObjectDir, BaseURL: "http://" + httpAddr + "/objects", Secret: []byte(secret)})
}

// run runs a component until the stack stops; its failure stops the
// others and ends Wait.
func (s *Stack) run(component func(context.Context) error) {
	s.components.Go(func() error { return component(s.failed) })
}

func (s *Stack) startScheduler(ctx context.Context, objects objectstore.Store) (string, error) {
	video := s.opts.Video
	if video == nil {
		video = &scheduler.VideoConfig{}
	}
	pipeline := s.opts.Pipeline
	if pipeline == nil {
		pipeline = &scheduler.PipelineConfig{}
	}
	cfg := scheduler.ServerConfig{
		Service: scheduler.Config{Kafka: s.kafkaConfig(), Objects: objects, Timing: s.opts.Timing, Video: video,
			Pipeline: pipeline, Now: s.opts.Now, Logger: s.opts.Logger, InternalToken: s.InternalToken},
		DatabaseURL: s.Postgres, MaxConns: 48, Listen: "127.0.0.1:0",
	}
	if !s.opts.NoAdmission {
		// Beside the quota service: its calls on every submission and
		// completion need no network hop (docs/decisions/0080-in-process-scheduler-calls.md).
		cfg.Service.Quota = s.quotaLocal
	}
	srv, err := scheduler.NewServer(ctx, cfg)
	if err != nil {
		return "", err
	}
	s.Scheduler, s.schedulerLocal = srv.Service, srv.Local()
	s.run(srv.Run)
	return srv.Addr(), nil
}

// Embedded default of the quota service: one cluster with some GPUs.
const (
	defaultQuotaCluster = "local"
	defaultMachineType  = "A100"
	defaultGPUs         = 16
	// quotaOperatorDelay is how long the in-process operator takes to
	// provision a Ray cluster or WorkGroup.
	quotaOperatorDelay = 2 * time.Second
)

// startQuota runs the quota service with queue admission (the queues the
// scheduler's GPU work waits in, GU quotas' WorkGroups among them) and
// records the embedded default cluster.
func (s *Stack) startQuota(ctx context.Context) error {
	srv, err := quota.NewServer(ctx, quota.ServerConfig{
		Service:     quota.Config{Kafka: s.kafkaConfig(), OperatorDelay: quotaOperatorDelay, Logger: s.opts.Logger},
		Admission:   admission.Config{GUQuotas: s.opts.GUQuotas},
		DatabaseURL: s.Postgres, Listen: "127.0.0.1:0", InternalToken: s.InternalToken,
	})
	if err != nil {
		return err
	}
	s.QuotaCluster, s.QuotaInventory = defaultQuotaCluster, map[string]int64{defaultMachineType: defaultGPUs}
	if err := srv.Service.EnsureCluster(ctx, s.QuotaCluster, "embedded default cluster (in-process operator)", s.QuotaInventory); err != nil {
		return errors.Join(fmt.Errorf("quota: default cluster: %w", err), srv.Close())
	}
	s.Quota, s.Admission, s.QuotaAddr, s.quotaLocal = srv.Service, srv.Admission, srv.Addr(), srv.Local()
	s.run(srv.Run)
	return s.setPipelineCaps(ctx)
}

// startConsumers runs the consumers service: the audit log (archived to
// the object store), usage metering and webhook notifications, whose
// tenants' secrets are sealed with a key kept under DataDir.
func (s *Stack) startConsumers(ctx context.Context, objects objectstore.Store) error {
	key, err := secretFile(filepath.Join(s.opts.DataDir, "webhook-key"))
	if err != nil {
		return err
	}
	cfg := s.opts.Consumers
	cfg.Kafka, cfg.Objects, cfg.Logger = s.kafkaConfig(), objects, s.opts.Logger
	if cfg.Webhooks.Key, err = hex.DecodeString(key); err != nil {
		return fmt.Errorf("the webhook key in %s: %w", s.opts.DataDir, err)
	}
	srv, err := consumers.NewServer(ctx, consumers.ServerConfig{Service: cfg, DatabaseURL: s.Postgres, Listen: "127.0.0.1:0",
		InternalToken: s.InternalToken})
	if err != nil {
		return err
	}
	s.Consumers, s.ConsumersAddr = srv.Service, srv.Addr()
	s.run(srv.Run)
	return nil
}

func (s *Stack) startGateway(ctx context.Context, schedAddr string, objects *objectstore.FS) error {
	g, err := gateway.New(ctx, gateway.Config{HTTPAddr: s.opts.HTTPAddr, HTTPListener: s.httpLis, GRPCAddr: s.opts.GRPCAddr, SchedulerTarget: schedAddr,
		SchedulerLocal: s.schedulerLocal, QuotaTarget: s.QuotaAddr, ConsumersTarget: s.ConsumersAddr, InternalToken: s.InternalToken, DatabaseURL: s.Postgres,
		Objects: objects.Handler(),
		Logger:  s.opts.Logger, RateLimits: s.opts.RateLimits, Live: gateway.LiveConfig{Kafka: s.kafkaConfig()},
		Events: gateway.EventsConfig{Kafka: s.kafkaConfig()}, TrustedProxies: s.opts.TrustedProxies,
		Metrics: s.opts.Metrics})
	if err != nil {
		return err
	}
	s.Gateway = g
	s.HTTPURL = "http://" + g.HTTPAddr()
	s.GRPCAddr = g.GRPCAddr()
	s.run(g.Run)
	return nil
}

// bootstrap creates the demo tenant, its API key and the local agent's
// token once, and keeps the secrets (0600) under DataDir so a restart
// prints the same key.
func (s *Stack) bootstrap(ctx context.Context) error {
	creds := s.Gateway.Credentials()
	keyFile := filepath.Join(s.opts.DataDir, "demo-api-key")
	if b, err := os.ReadFile(keyFile); err == nil {
		s.DemoAPIKey = strings.TrimSpace(string(b))
	} else {
		if _, err := creds.CreateTenant(ctx, "demo", "Demo tenant", gateway.TierStandard); err != nil && !errors.Is(err, gateway.ErrExists) {
			return fmt.Errorf("create the demo tenant: %w", err)
		}
		_, secret, err := creds.CreateAPIKey(ctx, "demo", "demo key (taskmesh dev)", nil)
		if err != nil {
			return fmt.Errorf("create the demo API key: %w", err)
		}
		if err := os.WriteFile(keyFile, []byte(secret+"\n"), 0o600); err != nil {
			return err
		}
		s.DemoAPIKey = secret
	}
	// The operator key sits next to the demo key.
	s.AdminKeyFile = filepath.Join(s.opts.DataDir, "admin-key")
	if _, _, err := s.Gateway.AdminKeyFile(ctx, s.AdminKeyFile, false); err != nil {
		return fmt.Errorf("create the operator key: %w", err)
	}
	if err := s.Quota.RegisterTenant(ctx, "demo", "Demo tenant"); err != nil {
		return fmt.Errorf("register the demo tenant with the quota service: %w", err)
	}
	host, _ := os.Hostname()
	s.MachineID, s.AgentID = "machine-"+sanitize(host), "agent-local-1"
	tokenFile := s.AgentTokenFile()
	if b, err := os.ReadFile(tokenFile); err == nil {
		s.AgentToken = strings.TrimSpace(string(b))
		return nil
	}
	// The local agent serves every tenant (shared pool), on loopback only.
	// Its token file may be gone while its token is not: a new secret for
	// the same token then.
	_, secret, err := creds.CreateAgentToken(ctx, s.AgentID, "", []string{"127.0.0.1/32", "::1/128"}, nil)
	if errors.Is(err, gateway.ErrExists) {
		_, secret, err = creds.RotateAgent(ctx, s.AgentID, nil, gateway.SystemActor)
	}
	if err != nil {
		return fmt.Errorf("create the local agent's token: %w", err)
	}
	s.AgentToken = secret
	return os.WriteFile(tokenFile, []byte(secret+"\n"), 0o600)
}

// Wait blocks until ctx is done or a component fails, and returns the
// failure.
func (s *Stack) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.failed.Done():
		return s.stop()
	}
}

// stop cancels every component and waits, at most stopWait, until they
// have stopped; it returns the first failure.
func (s *Stack) stop() error {
	s.stopOnce.Do(func() {
		s.cancel()
		stopped := make(chan error, 1)
		go func() { stopped <- s.components.Wait() }()
		select {
		case err := <-stopped:
			if !errors.Is(err, context.Canceled) {
				s.stopErr = err
			}
		case <-time.After(stopWait):
			s.opts.Logger.Warn("components did not stop in time", "waited", stopWait)
		}
	})
	return s.stopErr
}

// stopWait bounds Close's wait for the components: each stops gracefully
// within grpcserver.DefaultShutdownGrace.
const stopWait = 20 * time.Second

// Close stops every component and the servers it started; data stays.
func (s *Stack) Close() {
	_ = s.stop()
	if err := s.owned.Close(); err != nil {
		s.opts.Logger.Warn("stopping the embedded servers", "err", err)
	}
}

// secretFile returns the secret kept in path, creating it (0600) once.
func secretFile(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	secret, err := randomHex(32)
	if err != nil {
		return "", err
	}
	return secret, os.WriteFile(path, []byte(secret+"\n"), 0o600)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "local"
	}
	return b.String()
}

// DataDir is where the stack keeps its state.
func (s *Stack) DataDir() string { return s.opts.DataDir }

// AgentRunning reports whether the stack runs its local agent (Options.Agent).
func (s *Stack) AgentRunning() bool { return s.opts.Agent }

// AgentTokenFile holds the local agent's token: an executor started
// beside a stack without its own agent may use it, as agent AgentID.
func (s *Stack) AgentTokenFile() string { return filepath.Join(s.opts.DataDir, "agent-token") }
