// Package otel sets up OpenTelemetry tracing for Taskmesh services and
// carries trace context across process boundaries: gRPC calls (otelgrpc
// stats handlers), events stored in Postgres (a string map) and Kafka records
// (headers).
//
// The wire format is always W3C Trace Context plus W3C Baggage ("traceparent",
// "tracestate", "baggage"), independent of the global propagator: an event
// written by one service is read by another, maybe years later, so the format
// must not depend on how either process happened to be configured. Setup
// installs the same propagator globally for libraries that use the global
// one.
//
// Exporter "none" (the default) installs a no-op tracer provider: nothing is
// recorded or exported, but a span context received from upstream still
// flows through the process, so a service without an exporter does not break
// the traces of the services around it.
package otel
