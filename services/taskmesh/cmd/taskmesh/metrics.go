package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/spf13/pflag"

	"github.com/taskmesh/taskmesh/platform/metrics"
)

// metricsFlags choose where a process serves /metrics.
type metricsFlags struct{ addr string }

func (m *metricsFlags) add(f *pflag.FlagSet, where string) {
	f.StringVar(&m.addr, "metrics-addr", "", "serve Prometheus metrics at http://<addr>/metrics"+where)
}

// serveMetrics installs the process's metrics exporter and, with
// --metrics-addr, serves it there while run runs; a busy address fails
// before run starts. It returns the /metrics handler for a process that
// serves it on a port of its own too (the gateway).
func (m *metricsFlags) serve(ctx context.Context, service string, log *slog.Logger, run func(ctx context.Context, h http.Handler) error) error {
	exp, err := metrics.Setup(service)
	if err != nil {
		return err
	}
	if m.addr == "" {
		return run(ctx, exp.Handler())
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", m.addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- metrics.ServeListener(ctx, lis, exp.Handler(), log) }()
	log.Info("metrics serving", "addr", "http://"+lis.Addr().String()+metrics.Path)
	err = run(ctx, exp.Handler())
	cancel()
	if serr := <-served; err == nil {
		err = serr
	}
	return err
}
