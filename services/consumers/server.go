package consumers

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/taskmesh/taskmesh/platform/closer"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/pg"
)

// ServerConfig configures the consumers service as a process: the
// service, its database and its internal gRPC server.
type ServerConfig struct {
	// Service configures the service; a nil Service.DB is opened from
	// DatabaseURL with Schema and MaxConns connections (default 48) and
	// migrated, and closed when the server stops.
	Service     Config
	DatabaseURL string
	MaxConns    int32
	// Listen is the internal gRPC address (port 0 picks a free one).
	Listen string
	// InternalToken is required on every call.
	InternalToken string
}

// Server is the service with its gRPC server and listener.
type Server struct {
	Service *Service
	grpc    *grpcserver.Server
	lis     net.Listener
	owned   closer.Stack
}

// NewServer opens what cfg asks for and builds the service and its
// server; the listener is open once it returns. Call Run to serve, or
// Close to release everything without serving.
func NewServer(ctx context.Context, cfg ServerConfig) (_ *Server, err error) {
	if cfg.InternalToken == "" {
		return nil, errors.New("consumers: the server needs an internal token")
	}
	s := &Server{}
	defer func() {
		if err != nil {
			_ = s.owned.Close()
		}
	}()
	if cfg.Service.DB == nil {
		if cfg.MaxConns <= 0 {
			cfg.MaxConns = 48
		}
		pool, err := pg.Open(ctx, pg.Config{URL: cfg.DatabaseURL, Schema: Schema, MaxConns: cfg.MaxConns, ApplicationName: "taskmesh-consumers"})
		if err != nil {
			return nil, fmt.Errorf("consumers: %w", err)
		}
		s.owned.PushFunc(pool.Close)
		if err := pg.Migrate(ctx, pool, Schema, Migrations()...); err != nil {
			return nil, fmt.Errorf("consumers: migrate: %w", err)
		}
		cfg.Service.DB = pool
	}
	if s.Service, err = New(cfg.Service); err != nil {
		return nil, err
	}
	if s.grpc, err = grpcserver.New(grpcserver.Options{InternalToken: cfg.InternalToken, Logger: cfg.Service.Logger}); err != nil {
		return nil, err
	}
	s.Service.Register(s.grpc)
	var lc net.ListenConfig
	if s.lis, err = lc.Listen(ctx, "tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("consumers: listen: %w", err)
	}
	s.owned.PushFunc(func() { s.lis.Close() })
	return s, nil
}

// Addr is the address the gRPC server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Run serves gRPC and runs the service's consumers until ctx is done or
// either fails, then stops gracefully and releases what NewServer opened.
func (s *Server) Run(ctx context.Context) error {
	s.Service.log.Info("consumers serving", "addr", s.Addr())
	err := grpcserver.Run(ctx, s.grpc.Server, s.lis, grpcserver.DefaultShutdownGrace, s.Service.Run)
	return errors.Join(err, s.owned.Close())
}

// Close releases what NewServer opened, for a server that is not run.
func (s *Server) Close() error { return s.owned.Close() }

// Run is the consumers service as a process: NewServer, then Server.Run.
func Run(ctx context.Context, cfg ServerConfig) error {
	s, err := NewServer(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}
