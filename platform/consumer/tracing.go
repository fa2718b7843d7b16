package consumer

import (
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskmesh/taskmesh/platform/otel"
)

// tracing is the OpenTelemetry middleware: each message is handled in a
// consumer span that continues the trace of the command that caused the
// event (the W3C trace context the relay put in the record's headers), so
// a request's trace shows what every consumer did with its events.
func tracing(consumer, topic string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			rec := recordOf(msg)
			ctx := msg.Context()
			attrs := []attribute.KeyValue{attribute.String("messaging.system", "kafka"),
				attribute.String("messaging.destination.name", topic), attribute.String("messaging.consumer.group.name", consumer),
				attribute.String("messaging.message.id", msg.UUID)}
			if rec != nil {
				ctx = otel.ExtractRecord(ctx, rec)
				attrs = append(attrs, attribute.Int("messaging.kafka.destination.partition", int(rec.Partition)),
					attribute.Int64("messaging.kafka.message.offset", rec.Offset))
			}
			ctx, span := otel.Tracer("github.com/taskmesh/taskmesh/platform/consumer").Start(ctx, "consume "+consumer,
				trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
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
