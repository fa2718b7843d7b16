package consumer

import (
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskmesh/taskmesh/platform/otel"
)

// tracing is the OpenTelemetry middleware: each message is handled in a
// consumer span linked to the trace of every command that caused one of
// its events (the W3C trace context the relay put in the records' headers),
// so a request's trace leads to what every consumer did with its events.
func tracing(consumer, topic string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			recs := recordsOf(msg)
			ctx := msg.Context()
			attrs := []attribute.KeyValue{attribute.String("messaging.system", "kafka"),
				attribute.String("messaging.destination.name", topic), attribute.String("messaging.consumer.group.name", consumer),
				attribute.String("messaging.message.id", msg.UUID), attribute.Int("messaging.batch.message_count", len(recs))}
			if len(recs) > 0 {
				attrs = append(attrs, attribute.Int("messaging.kafka.destination.partition", int(recs[0].Partition)),
					attribute.Int64("messaging.kafka.message.offset", recs[0].Offset))
			}
			ctx, span := otel.Tracer("github.com/taskmesh/taskmesh/platform/consumer").Start(ctx, "consume "+consumer,
				trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...),
				trace.WithLinks(otel.RecordLinks(ctx, recs)...))
			defer span.End()
			msg.SetContext(ctx)
			out, err := h(msg)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return out, err
		}
	}
}
