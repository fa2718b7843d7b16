package quota

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/taskmesh/taskmesh/platform/closer"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/quota/admission"
	"github.com/taskmesh/taskmesh/services/quota/internal/ports"
)

// ServerConfig configures the quota service as a process: the service and
// the admission layer, each on its own schema, behind one internal gRPC
// server.
type ServerConfig struct {
	// Service configures the quota service; a nil Service.DB is opened
	// from DatabaseURL with Schema.
	Service Config
	// Admission configures the admission layer; a nil Admission.DB is
	// opened from DatabaseURL with admission.Schema. Its Kafka and Logger
	// default to Service's, and a nil GUQuotas to this service's check.
	Admission admission.Config
	// DatabaseURL is opened (MaxConns connections per schema, default 16)
	// and migrated for the schemas without a pool; the pools are closed
	// when the server stops.
	DatabaseURL string
	MaxConns    int32
	// Listen is the internal gRPC address (port 0 picks a free one; see
	// Server.Addr).
	Listen string
	// InternalToken is required on every call.
	InternalToken string
}

// Server is the quota service and its admission layer with their gRPC
// server (platform/grpcserver) and listener.
type Server struct {
	Service   *Service
	Admission *admission.Service
	grpc      *grpcserver.Server
	local     *grpcserver.Local
	lis       net.Listener
	owned     closer.Stack // the pools and the listener it opened
}

// NewServer opens what cfg asks for and builds both layers and their
// server; the listener is open once it returns, so a busy port fails here.
// Call Run to serve, or Close to release everything without serving.
func NewServer(ctx context.Context, cfg ServerConfig) (_ *Server, err error) {
	if cfg.InternalToken == "" {
		return nil, errors.New("quota: the server needs an internal token")
	}
	s := &Server{}
	defer func() {
		if err != nil {
			_ = s.owned.Close()
		}
	}()
	if cfg.Service.DB, err = s.database(ctx, cfg, cfg.Service.DB, Schema, "taskmesh-quota", Migrations()...); err != nil {
		return nil, err
	}
	if s.Service, err = New(cfg.Service); err != nil {
		return nil, err
	}
	adm := cfg.Admission
	if adm.DB, err = s.database(ctx, cfg, adm.DB, admission.Schema, "taskmesh-admission", admission.Migrations()...); err != nil {
		return nil, err
	}
	if len(adm.Kafka.Brokers) == 0 {
		adm.Kafka = cfg.Service.Kafka
	}
	if adm.Logger == nil {
		adm.Logger = cfg.Service.Logger
	}
	if adm.GUQuotas == nil {
		adm.GUQuotas = s.Service.GUQuotas()
	}
	if s.Admission, err = admission.New(adm); err != nil {
		return nil, err
	}
	// Before the server answers anyone: a list of queues right after
	// start shows the embedded defaults.
	if err = s.Admission.RecordDefaults(ctx); err != nil {
		return nil, err
	}
	// A tenant's key calling an operator action is refused before its
	// request is validated, on both doors.
	o := grpcserver.Options{InternalToken: cfg.InternalToken, Logger: cfg.Service.Logger, Authorize: ports.Authorize}
	if s.grpc, err = grpcserver.New(o); err != nil {
		return nil, err
	}
	if s.local, err = grpcserver.NewLocal(o); err != nil {
		return nil, err
	}
	for _, r := range []grpc.ServiceRegistrar{s.grpc, s.local} {
		s.Service.Register(r)
		s.Admission.Register(r)
	}
	var lc net.ListenConfig
	if s.lis, err = lc.Listen(ctx, "tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("quota: listen: %w", err)
	}
	// Serving closes the listener; closing it again is harmless.
	s.owned.PushFunc(func() { s.lis.Close() })
	return s, nil
}

// database returns db, or a pool on cfg.DatabaseURL with schema migrated.
func (s *Server) database(ctx context.Context, cfg ServerConfig, db *pgxpool.Pool, schema, app string, sets ...pg.MigrationSet) (*pgxpool.Pool, error) {
	if db != nil {
		return db, nil
	}
	conns := cfg.MaxConns
	if conns <= 0 {
		conns = 16
	}
	pool, err := pg.Open(ctx, pg.Config{URL: cfg.DatabaseURL, Schema: schema, MaxConns: conns, ApplicationName: app})
	if err != nil {
		return nil, fmt.Errorf("quota: %s: %w", schema, err)
	}
	s.owned.PushFunc(pool.Close)
	if err := pg.Migrate(ctx, pool, schema, sets...); err != nil {
		return nil, fmt.Errorf("quota: migrate %s: %w", schema, err)
	}
	return pool, nil
}

// Addr is the address the gRPC server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Local serves the same services to callers in this process without a
// network hop (a scheduler beside the quota service:
// scheduler.Config.Quota). It stops with the gRPC server.
func (s *Server) Local() *grpcserver.Local { return s.local }

// Run serves gRPC and runs both layers' background work (the service's
// relay and process manager, admission's relay, task follower and loop,
// and the WorkGroup queues kept in step between them) until ctx is done or
// any of it fails, then stops gracefully (grpcserver.Run) and releases
// what NewServer opened. It returns nil after a stop caused by ctx.
func (s *Server) Run(ctx context.Context) error {
	s.Service.log.Info("quota serving", "addr", s.Addr())
	err := grpcserver.RunWithLocal(ctx, s.grpc.Server, s.local, s.lis, grpcserver.DefaultShutdownGrace, s.work)
	return errors.Join(err, s.owned.Close())
}

// work is the background work of both layers; the first part that fails
// stops the others.
func (s *Server) work(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.Service.Run(ctx) })
	g.Go(func() error { return s.Admission.Run(ctx) })
	g.Go(func() error { s.Service.SyncAdmission(ctx, s.Admission); return nil })
	return g.Wait()
}

// Close releases what NewServer opened, for a server that is not run.
func (s *Server) Close() error { return s.owned.Close() }

// Run is the quota service as a process: NewServer, then Server.Run.
func Run(ctx context.Context, cfg ServerConfig) error {
	s, err := NewServer(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}
