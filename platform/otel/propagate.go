package otel

import (
	"context"
	"go.opentelemetry.io/otel/trace"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
)

// propagator is the fixed wire format (see the package doc).
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Inject returns ctx's trace context as a map to store with an event:
// "traceparent" and "tracestate" for the current span, "baggage" when ctx
// carries baggage. The map is empty (never nil) when ctx has neither.
func Inject(ctx context.Context) map[string]string {
	m := make(map[string]string, 2)
	propagator.Inject(ctx, propagation.MapCarrier(m))
	return m
}

// Extract returns ctx with the remote span context (and baggage) found in
// carrier, ready to be the parent of a span. A nil, empty or malformed
// carrier returns ctx unchanged in that respect: a corrupt stored header
// must not fail event processing, it only loses the trace link.
func Extract(ctx context.Context, carrier map[string]string) context.Context {
	return propagator.Extract(ctx, propagation.MapCarrier(carrier))
}

// InjectRecord writes ctx's trace context into r's headers. Existing
// traceparent, tracestate and baggage headers are removed first, so a record
// re-published under a new context (or none) never carries a stale or
// duplicate parent. Other headers are kept in order.
func InjectRecord(ctx context.Context, r *kgo.Record) {
	fields := propagator.Fields()
	r.Headers = slices.DeleteFunc(r.Headers, func(h kgo.RecordHeader) bool {
		return slices.Contains(fields, strings.ToLower(h.Key))
	})
	m := Inject(ctx)
	for _, k := range fields { // fixed order keeps records byte-stable
		if v, ok := m[k]; ok {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
}

// ExtractRecord returns ctx with the trace context from r's headers, to
// parent the span that processes the record. Header names match
// case-insensitively (Kafka header keys are case-sensitive, but producers
// bridging from HTTP sometimes keep "Traceparent"); when a name repeats, the
// last header wins, as it is the most recently added.
func ExtractRecord(ctx context.Context, r *kgo.Record) context.Context {
	fields := propagator.Fields()
	m := make(map[string]string, len(fields))
	for _, h := range r.Headers {
		if k := strings.ToLower(h.Key); slices.Contains(fields, k) {
			m[k] = string(h.Value)
		}
	}
	return Extract(ctx, m)
}

// maxLinks bounds the links of one batch span.
const maxLinks = 128

// RecordLinks returns a span link to the trace each record carries (at most
// maxLinks, duplicates dropped). A consumer handling records in batches
// starts its span with these links: the batch has many parents, and each
// producer's trace then leads to where its records were consumed.
func RecordLinks(ctx context.Context, records []*kgo.Record) []trace.Link {
	var links []trace.Link
	seen := map[trace.SpanID]bool{}
	for _, r := range records {
		sc := trace.SpanContextFromContext(ExtractRecord(ctx, r))
		if !sc.IsValid() || seen[sc.SpanID()] {
			continue
		}
		seen[sc.SpanID()] = true
		links = append(links, trace.Link{SpanContext: sc})
		if len(links) == maxLinks {
			break
		}
	}
	return links
}
