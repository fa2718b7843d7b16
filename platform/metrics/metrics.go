package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	gotel "go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// Path is where the handler is served.
const Path = "/metrics"

// SecondsBuckets are the histogram bounds of every instrument in seconds:
// from a fast API call (5 ms) to a slow queue wait (10 min).
var SecondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Exporter is the process's metrics pipeline.
type Exporter struct {
	registry *prometheus.Registry
	provider *sdkmetric.MeterProvider
	handler  http.Handler
}

var (
	setupMu sync.Mutex
	current *Exporter
)

// Setup installs the global MeterProvider exporting to a new Prometheus
// registry and returns its exporter. There is one per process: the
// global provider hands instruments created before it to the first
// provider installed only, so a second Setup returns the first exporter
// (service names the process in target_info only the first time).
func Setup(service string) (*Exporter, error) {
	setupMu.Lock()
	defer setupMu.Unlock()
	if current != nil {
		return current, nil
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	// No otel_scope_* labels: they would double every series for nothing
	// an operator filters on.
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: prometheus exporter: %w", err)
	}
	res, err := resource.New(context.Background(), resource.WithAttributes(semconv.ServiceName("taskmesh-"+service)))
	if err != nil {
		return nil, fmt.Errorf("metrics: resource: %w", err)
	}
	seconds := sdkmetric.NewView(
		sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: SecondsBuckets}},
	)
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res), sdkmetric.WithView(seconds))
	gotel.SetMeterProvider(provider)
	current = &Exporter{registry: reg, provider: provider,
		handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})}
	return current, nil
}

// Handler serves the registry in the Prometheus text format.
func (e *Exporter) Handler() http.Handler { return e.handler }

// Registry is the Prometheus registry behind the handler.
func (e *Exporter) Registry() *prometheus.Registry { return e.registry }

// Serve serves the handler at Path on addr until ctx is done (then it
// shuts the server down and returns nil); any other path is 404. A
// listen error is returned at once.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	return ServeListener(ctx, lis, h, log)
}

// ServeListener is Serve on an open listener, which it closes.
func ServeListener(ctx context.Context, lis net.Listener, h http.Handler, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	// Shutdown on cancel lets a scrape in flight finish; AfterFunc's stop
	// drops the hook when Serve fails on its own.
	shut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(shut)
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // nothing to do about a scrape that outlives it
	})
	err := srv.Serve(lis)
	if errors.Is(err, http.ErrServerClosed) {
		<-shut
		return nil
	}
	stop()
	return fmt.Errorf("metrics: serve: %w", err)
}

// Meter returns a meter of the global provider for the instrumented
// package named by its import path.
func Meter(pkg string) metric.Meter { return gotel.Meter(pkg) }
