package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/taskmesh/taskmesh/platform/closer"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
)

// ServerConfig configures the scheduler as a process: the service, its
// database, its internal gRPC server and its connection to the quota
// service.
type ServerConfig struct {
	// Service configures the scheduler. Its InternalToken is required: the
	// gRPC server refuses calls without it (and the quota service is
	// called with it). A nil Service.DB is opened from DatabaseURL.
	Service Config
	// DatabaseURL is opened with Schema and MaxConns connections and
	// migrated when Service.DB is nil (and with PipelineSchema when
	// Service.Pipeline has no DB); the pools are closed when the server
	// stops.
	DatabaseURL string
	MaxConns    int32
	// Listen is the internal gRPC address (port 0 picks a free one; see
	// Server.Addr).
	Listen string
	// QuotaTarget, if set and Service.Quota is nil, is the quota service's
	// internal gRPC address: tasks that need admission wait for it.
	QuotaTarget string
}

// Server is the scheduler with its gRPC server (platform/grpcserver:
// internal authentication, validation) and its listener.
type Server struct {
	Service *Service
	grpc    *grpcserver.Server
	local   *grpcserver.Local
	lis     net.Listener
	owned   closer.Stack // the pool, the quota connection and the listener it opened
}

// NewServer opens what cfg asks for and builds the service and its
// server; the listener is open once it returns, so a busy port fails here.
// Call Run to serve, or Close to release everything without serving.
func NewServer(ctx context.Context, cfg ServerConfig) (_ *Server, err error) {
	if cfg.Service.InternalToken == "" {
		return nil, errors.New("scheduler: the server needs Config.InternalToken")
	}
	s := &Server{}
	defer func() {
		if err != nil {
			_ = s.owned.Close()
		}
	}()
	if cfg.Service.DB == nil {
		pool, err := pg.Open(ctx, pg.Config{URL: cfg.DatabaseURL, Schema: Schema, MaxConns: cfg.MaxConns, ApplicationName: "taskmesh-scheduler"})
		if err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		s.owned.PushFunc(pool.Close)
		if err := pg.Migrate(ctx, pool, Schema, Migrations()...); err != nil {
			return nil, fmt.Errorf("scheduler: migrate: %w", err)
		}
		cfg.Service.DB = pool
	}
	if p := cfg.Service.Pipeline; p != nil && p.DB == nil {
		pool, err := pg.Open(ctx, pg.Config{URL: cfg.DatabaseURL, Schema: PipelineSchema, MaxConns: 8, ApplicationName: "taskmesh-pipeline"})
		if err != nil {
			return nil, fmt.Errorf("scheduler: pipeline: %w", err)
		}
		s.owned.PushFunc(pool.Close)
		if err := pg.Migrate(ctx, pool, PipelineSchema, PipelineMigrations()...); err != nil {
			return nil, fmt.Errorf("scheduler: migrate the pipeline schema: %w", err)
		}
		pc := *p
		pc.DB = pool
		cfg.Service.Pipeline = &pc
	}
	if cfg.Service.Quota == nil && cfg.QuotaTarget != "" {
		conn, err := grpc.NewClient(cfg.QuotaTarget, grpc.WithTransportCredentials(insecure.NewCredentials()), otel.DialOption())
		if err != nil {
			return nil, fmt.Errorf("scheduler: quota service %q: %w", cfg.QuotaTarget, err)
		}
		s.owned.Push(conn.Close)
		cfg.Service.Quota = conn
	}
	if s.Service, err = New(cfg.Service); err != nil {
		return nil, err
	}
	if err := s.servers(grpcserver.Options{InternalToken: cfg.Service.InternalToken, Logger: cfg.Service.Logger}); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	if s.lis, err = lc.Listen(ctx, "tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("scheduler: listen: %w", err)
	}
	// Serving closes the listener; closing it again is harmless.
	s.owned.PushFunc(func() { s.lis.Close() })
	return s, nil
}

// servers builds the gRPC server and the in-process one, both serving the
// service.
func (s *Server) servers(o grpcserver.Options) (err error) {
	if s.grpc, err = grpcserver.New(o); err != nil {
		return err
	}
	if s.local, err = grpcserver.NewLocal(o); err != nil {
		return err
	}
	s.Service.Register(s.grpc)
	s.Service.Register(s.local)
	return nil
}

// Addr is the address the gRPC server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Local serves the same services to callers in this process without a
// network hop (a gateway beside the scheduler: gateway.Config.SchedulerLocal).
// It stops with the gRPC server.
func (s *Server) Local() *grpcserver.Local { return s.local }

// Run serves gRPC and runs the service's background work until ctx is
// done or either fails, then stops gracefully (grpcserver.Run: calls in
// flight finish before the background work stops) and releases what
// NewServer opened. It returns nil after a stop caused by ctx.
func (s *Server) Run(ctx context.Context) error {
	s.Service.log.Info("scheduler serving", "addr", s.Addr())
	err := grpcserver.RunWithLocal(ctx, s.grpc.Server, s.local, s.lis, grpcserver.DefaultShutdownGrace, s.Service.Run)
	return errors.Join(err, s.owned.Close())
}

// Close releases what NewServer opened, for a server that is not run.
func (s *Server) Close() error { return s.owned.Close() }

// Run is the scheduler as a process: NewServer, then Server.Run.
func Run(ctx context.Context, cfg ServerConfig) error {
	s, err := NewServer(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}
