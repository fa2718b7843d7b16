// Package metrics exports a process's OpenTelemetry metrics in the
// Prometheus text format: Setup installs the global MeterProvider, backed
// by a Prometheus registry (with the Go runtime and process collectors),
// and returns the /metrics handler; Serve runs that handler on its own
// address (--metrics-addr).
//
// Instrumented packages take their meters from the global provider
// (go.opentelemetry.io/otel.Meter) in a small metrics.go of their own, so
// a package used without Setup (tests, tools) records into a no-op. The
// metric names, their labels and what to watch are listed in
// docs/operations.md.
//
// Naming, as Prometheus wants it: instruments are named
// "taskmesh.<area>.<what>" with a UCUM unit ("s", "By", "{task}"); the
// exporter turns dots into underscores, appends the unit ("_seconds",
// "_bytes") and "_total" to counters. Labels are bounded: route templates,
// statuses, queue and projection names, tenants — never a task, attempt or
// request id.
package metrics
