package otel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/taskmesh/taskmesh/platform/domain/textcut"
)

// Exporter names accepted in Config.Exporter.
const (
	ExporterNone   = "none"
	ExporterStdout = "stdout"
	ExporterOTLP   = "otlp"
)

// Config selects where spans go.
type Config struct {
	// Exporter is "none" (default when empty), "stdout" or "otlp".
	Exporter string
	// OTLPEndpoint is the collector's host:port for OTLP over gRPC; empty
	// uses OTEL_EXPORTER_OTLP_ENDPOINT or localhost:4317.
	OTLPEndpoint string
	// OTLPInsecure disables TLS to the collector.
	OTLPInsecure bool
	// ServiceName is the service.name resource attribute (OTEL_SERVICE_NAME
	// overrides it); empty uses "unknown_service:<executable>".
	ServiceName string
	// SampleRatio is the fraction of new traces recorded, in (0, 1]; 0
	// means 1.0. Spans with a parent follow the parent's decision, so a
	// trace is either complete or absent across services.
	SampleRatio float64
	// Writer receives the stdout exporter's JSON; nil = os.Stdout.
	Writer io.Writer
	// Logger receives OpenTelemetry's own errors (a malformed trace
	// header on a record or a request, an export that failed) as
	// warnings; nil discards them.
	Logger *slog.Logger
}

// errorLimit bounds an OpenTelemetry error's text in the log: it may quote
// a header a client or a producer sent, of any length.
const errorLimit = 256

// errorHandler logs OpenTelemetry's errors through the process's logger.
// The SDK's default prints them, whole and unstructured, with the standard
// library's log package.
type errorHandler struct{ log *slog.Logger }

func (h errorHandler) Handle(err error) {
	h.log.Warn("opentelemetry", "err", textcut.Bytes(err.Error(), errorLimit))
}

// Setup installs a global TracerProvider and the W3C TraceContext+Baggage
// propagator. The returned shutdown flushes buffered spans and stops the
// exporter; give it a context with a deadline, since an unreachable OTLP
// collector is retried until the context ends.
//
// Exporter "none" installs the propagator and a no-op provider (shutdown
// does nothing). An unknown exporter, a URL instead of host:port for
// OTLPEndpoint, or a SampleRatio outside [0, 1] is an error, and then nothing
// is installed.
func Setup(ctx context.Context, cfg Config) (shutdown func(context.Context) error, err error) {
	kind := strings.ToLower(strings.TrimSpace(cfg.Exporter))
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("otel: SampleRatio %v outside [0, 1]", cfg.SampleRatio)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	gotel.SetErrorHandler(errorHandler{log})
	var exp sdktrace.SpanExporter
	switch kind {
	case "", ExporterNone:
		gotel.SetTextMapPropagator(propagator)
		gotel.SetTracerProvider(noop.NewTracerProvider())
		return func(context.Context) error { return nil }, nil
	case ExporterStdout:
		w := cfg.Writer
		if w == nil {
			w = os.Stdout
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(w))
	case ExporterOTLP:
		exp, err = newOTLPExporter(ctx, cfg)
	default:
		return nil, fmt.Errorf("otel: unknown exporter %q (want %q, %q or %q)", cfg.Exporter, ExporterNone, ExporterStdout, ExporterOTLP)
	}
	if err != nil {
		return nil, fmt.Errorf("otel: %s exporter: %w", kind, err)
	}
	tp, err := newTracerProvider(ctx, cfg, exp)
	if err != nil {
		return nil, errors.Join(err, exp.Shutdown(ctx))
	}
	gotel.SetTextMapPropagator(propagator)
	gotel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// newOTLPExporter dials lazily: a collector that is down at start-up does
// not fail Setup, spans are retried and dropped once the queue is full.
func newOTLPExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	var opts []otlptracegrpc.Option
	if cfg.OTLPEndpoint != "" {
		if strings.Contains(cfg.OTLPEndpoint, "://") {
			return nil, fmt.Errorf("OTLPEndpoint %q must be host:port, not a URL", cfg.OTLPEndpoint)
		}
		opts = append(opts, otlptracegrpc.WithEndpoint(cfg.OTLPEndpoint))
	}
	if cfg.OTLPInsecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	return otlptracegrpc.New(ctx, opts...)
}

// newTracerProvider builds the SDK provider: batching exporter, parent-based
// ratio sampler and a resource naming the service.
func newTracerProvider(ctx context.Context, cfg Config, exp sdktrace.SpanExporter) (*sdktrace.TracerProvider, error) {
	ratio := cfg.SampleRatio
	if ratio == 0 {
		ratio = 1
	}
	name := cfg.ServiceName
	if name == "" {
		name = "unknown_service:" + filepath.Base(os.Args[0])
	}
	// No schema URL: merging resources with different semconv schema URLs
	// fails, and only the attribute names matter to backends.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithAttributes(semconv.ServiceName(name)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("otel: resource: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	), nil
}

// Tracer returns a tracer from the global provider. It may be called before
// Setup: the global provider forwards to whatever Setup installs later.
func Tracer(name string) trace.Tracer { return gotel.Tracer(name) }
