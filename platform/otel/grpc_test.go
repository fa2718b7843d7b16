package otel

import (
	"net"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A span around a gRPC client call parents the client span, which parents
// the server span on the other side of a real TCP connection.
func TestGRPCClientSpanParentsServerSpan(t *testing.T) {
	spans := recordSpans(t, Config{ServiceName: "grpc-test"})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOption())
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), DialOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	ctx, caller := Tracer("test").Start(t.Context(), "caller")
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	caller.End()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health status %v", resp.GetStatus())
	}
	srv.GracefulStop() // the server span has ended once the server is done

	all := spans()
	const method = "grpc.health.v1.Health/Check"
	client := findKind(t, all, method, trace.SpanKindClient)
	server := findKind(t, all, method, trace.SpanKindServer)
	callerSC := caller.SpanContext()

	if client.Parent.SpanID() != callerSC.SpanID() {
		t.Fatalf("client span parent %v, want the caller span %v", client.Parent.SpanID(), callerSC.SpanID())
	}
	if server.Parent.SpanID() != client.SpanContext.SpanID() || !server.Parent.IsRemote() {
		t.Fatalf("server span parent %v (remote %v), want the client span %v",
			server.Parent.SpanID(), server.Parent.IsRemote(), client.SpanContext.SpanID())
	}
	for _, s := range []tracetest.SpanStub{client, server} {
		if s.SpanContext.TraceID() != callerSC.TraceID() {
			t.Fatalf("%v span in trace %v, want %v", s.SpanKind, s.SpanContext.TraceID(), callerSC.TraceID())
		}
	}
	if v, ok := server.Resource.Set().Value("service.name"); !ok || v.AsString() != "grpc-test" {
		t.Fatalf("server span resource service.name = %v, want grpc-test", v)
	}
}

func findKind(t *testing.T, spans tracetest.SpanStubs, name string, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name && s.SpanKind == kind {
			return s
		}
	}
	t.Fatalf("no %v span %q among %d spans", kind, name, len(spans))
	return tracetest.SpanStub{}
}
