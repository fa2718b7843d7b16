package otel

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/taskmesh/taskmesh/platform/logbuf"
)

func shutdownNow(t *testing.T, shutdown func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func TestSetupRejectsBadConfig(t *testing.T) {
	before := gotel.GetTracerProvider()
	for _, cfg := range []Config{
		{Exporter: "jaeger"},
		{Exporter: "stdout", SampleRatio: 1.5},
		{Exporter: "none", SampleRatio: -0.1},
		{Exporter: "otlp", OTLPEndpoint: "http://collector:4317"},
	} {
		shutdown, err := Setup(t.Context(), cfg)
		if err == nil {
			shutdownNow(t, shutdown)
			t.Fatalf("Setup(%+v) succeeded", cfg)
		}
	}
	if _, err := Setup(t.Context(), Config{Exporter: "jaeger"}); err == nil || !strings.Contains(err.Error(), `unknown exporter "jaeger"`) {
		t.Fatalf("unknown exporter error = %v", err)
	}
	if gotel.GetTracerProvider() != before {
		t.Fatal("a failed Setup replaced the global tracer provider")
	}
}

func TestSetupStdoutWritesSpans(t *testing.T) {
	var buf logbuf.Buffer
	shutdown, err := Setup(t.Context(), Config{Exporter: "stdout", ServiceName: "stdout-test", Writer: &buf})
	if err != nil {
		t.Fatal(err)
	}
	_, span := Tracer("test").Start(t.Context(), "stdout-span")
	traceID := span.SpanContext().TraceID().String()
	span.End()
	shutdownNow(t, shutdown) // flushes the batch

	out := buf.String()
	for _, want := range []string{`"Name":"stdout-span"`, traceID, "stdout-test"} {
		if !strings.Contains(out, want) {
			t.Fatalf("stdout exporter output lacks %q:\n%s", want, out)
		}
	}
}

// With the no-op provider nothing is recorded, but the upstream span
// context still reaches downstream carriers.
func TestSetupNoneStillCarriesContext(t *testing.T) {
	shutdown, err := Setup(t.Context(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdownNow(t, shutdown)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := Extract(t.Context(), map[string]string{"traceparent": parent})
	ctx, span := Tracer("test").Start(ctx, "op")
	defer span.End()
	if span.IsRecording() {
		t.Fatal("span is recording with exporter none")
	}
	if got := Inject(ctx)["traceparent"]; got != parent {
		t.Fatalf("traceparent downstream = %q, want %q", got, parent)
	}
}

// OpenTelemetry's own errors — here a baggage header of 5,000 bytes that
// is no baggage, as any request or record may carry — go to the process's
// log as one warning of bounded size, not whole to standard error.
func TestOpenTelemetryErrorsAreLoggedBounded(t *testing.T) {
	var buf bytes.Buffer
	shutdown, err := Setup(t.Context(), Config{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdownNow(t, shutdown)
	Extract(t.Context(), map[string]string{"baggage": strings.Repeat("a", 5000)})
	var line struct{ Level, Msg, Err string }
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log = %q: %v", buf.String(), err)
	}
	if line.Level != "WARN" || line.Msg != "opentelemetry" || !strings.Contains(line.Err, "baggage") || len(line.Err) > errorLimit {
		t.Fatalf("logged %+v (err of %d bytes)", line, len(line.Err))
	}
}

// collector is a real OTLP/gRPC trace service receiving what Setup exports.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func TestSetupOTLPExportsToCollector(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	shutdown, err := Setup(t.Context(), Config{Exporter: "OTLP", OTLPEndpoint: lis.Addr().String(), OTLPInsecure: true, ServiceName: "otlp-test"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := Tracer("test").Start(t.Context(), "otlp-span")
	want := span.SpanContext().TraceID()
	span.End()
	shutdownNow(t, shutdown)

	col.mu.Lock()
	defer col.mu.Unlock()
	var found bool
	for _, req := range col.reqs {
		for _, rs := range req.GetResourceSpans() {
			var service string
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					if s.GetName() == "otlp-span" && trace.TraceID(s.GetTraceId()) == want && service == "otlp-test" {
						found = true
					}
				}
			}
		}
	}
	if !found {
		t.Fatalf("collector did not receive otlp-span of trace %v from otlp-test (%d requests)", want, len(col.reqs))
	}
}

// New traces follow SampleRatio; spans with a sampled parent are always
// recorded, so a trace started upstream stays complete.
func TestSampleRatioIsParentBased(t *testing.T) {
	spans := recordSpans(t, Config{SampleRatio: 1e-12})
	for range 50 {
		_, s := Tracer("test").Start(t.Context(), "root")
		s.End()
	}
	ctx := Extract(t.Context(), map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	_, child := Tracer("test").Start(ctx, "child")
	child.End()

	got := spans()
	if len(got) != 1 || got[0].Name != "child" {
		var names []string
		for _, s := range got {
			names = append(names, s.Name)
		}
		t.Fatalf("recorded %q, want only the child of the sampled parent", names)
	}
}

func TestSampleRatioZeroMeansAll(t *testing.T) {
	spans := recordSpans(t, Config{})
	for range 20 {
		_, s := Tracer("test").Start(t.Context(), "root")
		s.End()
	}
	if n := len(spans()); n != 20 {
		t.Fatalf("recorded %d of 20 root spans with SampleRatio 0", n)
	}
}
