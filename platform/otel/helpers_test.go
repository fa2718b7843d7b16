package otel

import (
	"context"
	"testing"
	"time"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// recordSpans installs the provider Setup would build, exporting to memory,
// and returns a function that flushes and returns the ended spans. Tests in
// this package share the global provider, so none of them runs in parallel.
func recordSpans(t *testing.T, cfg Config) func() tracetest.SpanStubs {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp, err := newTracerProvider(t.Context(), cfg, exp)
	if err != nil {
		t.Fatal(err)
	}
	gotel.SetTextMapPropagator(propagator)
	gotel.SetTracerProvider(tp)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	})
	return func() tracetest.SpanStubs {
		t.Helper()
		if err := tp.ForceFlush(t.Context()); err != nil {
			t.Fatal(err)
		}
		return exp.GetSpans()
	}
}
