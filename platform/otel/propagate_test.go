package otel

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
)

const upstream = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestInjectExtractRoundTrip(t *testing.T) {
	recordSpans(t, Config{})
	// Upstream context with tracestate and baggage, as a stored event would have.
	stored := map[string]string{
		"traceparent": upstream,
		"tracestate":  "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
		"baggage":     "tenant=acme",
	}
	ctx, span := Tracer("test").Start(Extract(t.Context(), stored), "handle")
	defer span.End()

	m := Inject(ctx)
	back := trace.SpanContextFromContext(Extract(context.Background(), m))
	if !back.IsValid() || !back.IsRemote() {
		t.Fatalf("extracted span context %+v is not a valid remote one (map %v)", back, m)
	}
	if back.TraceID() != span.SpanContext().TraceID() || back.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("round trip gave %v/%v, want %v/%v", back.TraceID(), back.SpanID(), span.SpanContext().TraceID(), span.SpanContext().SpanID())
	}
	if back.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("trace id changed from upstream: %v", back.TraceID())
	}
	if m["tracestate"] != stored["tracestate"] {
		t.Fatalf("tracestate = %q, want %q", m["tracestate"], stored["tracestate"])
	}
	if got := baggage.FromContext(Extract(context.Background(), m)).Member("tenant").Value(); got != "acme" {
		t.Fatalf("baggage tenant = %q, want acme", got)
	}
}

func TestInjectWithoutSpanIsEmpty(t *testing.T) {
	recordSpans(t, Config{})
	m := Inject(context.Background())
	if m == nil || len(m) != 0 {
		t.Fatalf("Inject(no span) = %#v, want an empty map", m)
	}
	for _, carrier := range []map[string]string{nil, {}, {"traceparent": "garbage"}, {"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"}} {
		if sc := trace.SpanContextFromContext(Extract(context.Background(), carrier)); sc.IsValid() {
			t.Fatalf("Extract(%v) gave a valid span context %v", carrier, sc)
		}
	}
}

func TestInjectRecordReplacesTraceHeaders(t *testing.T) {
	recordSpans(t, Config{})
	r := &kgo.Record{Headers: []kgo.RecordHeader{
		{Key: "Traceparent", Value: []byte("00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01")},
		{Key: "event-type", Value: []byte("TaskCreated")},
		{Key: "tracestate", Value: []byte("stale=1")},
		{Key: "traceparent", Value: []byte("00-cccccccccccccccccccccccccccccccc-dddddddddddddddd-01")},
	}}
	ctx, span := Tracer("test").Start(t.Context(), "publish")
	defer span.End()
	InjectRecord(ctx, r)

	var keys []string
	for _, h := range r.Headers {
		keys = append(keys, h.Key)
	}
	if want := []string{"event-type", "traceparent"}; !slices.Equal(keys, want) {
		t.Fatalf("headers after InjectRecord = %q, want %q", keys, want)
	}
	if got := trace.SpanContextFromContext(ExtractRecord(context.Background(), r)); got.TraceID() != span.SpanContext().TraceID() {
		t.Fatalf("ExtractRecord trace %v, want %v", got.TraceID(), span.SpanContext().TraceID())
	}

	// Without a span the stale context is removed, not kept.
	InjectRecord(context.Background(), r)
	if len(r.Headers) != 1 || r.Headers[0].Key != "event-type" {
		t.Fatalf("headers after InjectRecord without a span = %+v", r.Headers)
	}
}

func TestExtractRecordLastHeaderWinsCaseInsensitively(t *testing.T) {
	r := &kgo.Record{Headers: []kgo.RecordHeader{
		{Key: "traceparent", Value: []byte("00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01")},
		{Key: "TraceParent", Value: []byte(upstream)},
	}}
	sc := trace.SpanContextFromContext(ExtractRecord(context.Background(), r))
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("ExtractRecord trace %v, want the last header's", sc.TraceID())
	}
}

// A record produced with InjectRecord to a real broker is consumed with the
// same trace; kcat, an independent client, sees the W3C header as well.
func TestRecordCarriesTraceThroughBroker(t *testing.T) {
	recordSpans(t, Config{})
	b := kafkatest.New(t)
	opts, err := b.Config().Opts()
	if err != nil {
		t.Fatal(err)
	}
	const topic = "traced"
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := kafka.EnsureTopics(ctx, cl, kafka.TopicSpec{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}

	pctx, span := Tracer("test").Start(ctx, "publish")
	rec := &kgo.Record{Topic: topic, Key: []byte("task-1"), Value: []byte{0x08, 0x01}}
	InjectRecord(pctx, rec)
	span.End()
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var got *kgo.Record
	for got == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume: %v", ctx.Err())
		}
		if recs := fs.Records(); len(recs) > 0 {
			got = recs[0]
		}
	}
	sc := trace.SpanContextFromContext(ExtractRecord(context.Background(), got))
	if sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("consumed record carries %v/%v, want %v/%v", sc.TraceID(), sc.SpanID(), span.SpanContext().TraceID(), span.SpanContext().SpanID())
	}

	kc := b.ConsumeAll(t, topic)
	if len(kc) != 1 || kc[0].Headers["traceparent"] != Inject(pctx)["traceparent"] {
		t.Fatalf("kcat read %+v, want one record with traceparent %q", kc, Inject(pctx)["traceparent"])
	}
}
