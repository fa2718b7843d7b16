package otel

import (
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
)

// ServerOption traces incoming RPCs: each becomes a server span, the child
// of the caller's span when the request carries trace context.
//
// Health checks are traced like any other RPC; with a SampleRatio below 1
// probe traffic is sampled like other root spans.
func ServerOption() grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithPropagators(propagator)))
}

// DialOption traces outgoing RPCs and sends the trace context in the request
// metadata.
//
// Both options take the global tracer provider when they are created: call
// Setup before building servers and clients (creating them earlier also
// works, via the global provider's forwarding, but only for the first Setup).
func DialOption() grpc.DialOption {
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(propagator)))
}
