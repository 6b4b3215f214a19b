package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The attributes idem adds to the messaging conventions.
const (
	// AttrStreamSeq is the event's JetStream stream sequence.
	AttrStreamSeq = attribute.Key("idem.stream_seq")
	// AttrDeliveries is how many times JetStream delivered the event.
	AttrDeliveries = attribute.Key("idem.deliveries")
)

// messagingSystem: the conventions list no NATS value, and every NATS
// instrumentation uses this one.
var messagingSystem = semconv.MessagingSystemKey.String("nats")

// Message is what a messaging span says about one NATS message.
type Message struct {
	// Subject is where it was published.
	Subject string
	// Header carries its trace context; nil for none.
	Header map[string][]string
	// MsgID is its Nats-Msg-Id, if any.
	MsgID string
	// StreamSeq is its JetStream stream sequence, 0 when unknown.
	StreamSeq uint64
	// Deliveries is its JetStream delivery count, 0 when unknown.
	Deliveries uint64
	// Consumer is the durable consumer that delivered it, if any.
	Consumer string
	// BodySize is its body's length in bytes.
	BodySize int
}

func (m Message) attributes(opType attribute.KeyValue, opName string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		messagingSystem,
		opType,
		semconv.MessagingOperationName(opName),
		semconv.MessagingDestinationName(m.Subject),
		semconv.MessagingMessageBodySize(m.BodySize),
	}
	if m.MsgID != "" {
		attrs = append(attrs, semconv.MessagingMessageID(m.MsgID))
	}
	if m.Consumer != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(m.Consumer))
	}
	if m.StreamSeq > 0 {
		attrs = append(attrs, AttrStreamSeq.Int64(int64(m.StreamSeq)))
	}
	if m.Deliveries > 0 {
		attrs = append(attrs, AttrDeliveries.Int64(int64(m.Deliveries)))
	}
	return attrs
}

// incoming is ctx, continuing the trace m's headers name when ctx holds no
// span yet.
func (m Message) incoming(ctx context.Context) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() || m.Header == nil {
		return ctx
	}
	return Extract(ctx, m.Header)
}

// StartReceive starts the span of fetching m from its consumer (kind
// client, operation receive); opts add to its options (a start time).
func StartReceive(ctx context.Context, t trace.Tracer, m Message, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return m.start(m.incoming(ctx), t, "receive", trace.SpanKindClient, semconv.MessagingOperationTypeReceive, opts...)
}

// start starts the span "<op> <subject>" of m (op is also its
// messaging.operation.name). Its attributes are set
// only on a span that records: without tracing (the no-op tracer) or
// outside the sample, a delivery's three spans cost no attribute list,
// which was the largest allocation of a load's path.
func (m Message) start(ctx context.Context, t trace.Tracer, op string, kind trace.SpanKind, opType attribute.KeyValue,
	opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	name := op
	if t != noopTracer {
		name = op + " " + m.Subject
	}
	ctx, span := t.Start(ctx, name, append([]trace.SpanStartOption{trace.WithSpanKind(kind)}, opts...)...)
	if span.IsRecording() {
		span.SetAttributes(m.attributes(opType, op)...)
	}
	return ctx, span
}

// StartProcess starts the span of handling m, the load (kind consumer,
// operation process); the load's statements are its children.
func StartProcess(ctx context.Context, t trace.Tracer, m Message) (context.Context, trace.Span) {
	return m.start(m.incoming(ctx), t, "process", trace.SpanKindConsumer, semconv.MessagingOperationTypeProcess)
}

// Settle operations, as messaging.operation.name.
const (
	SettleAck        = "ack"
	SettleNak        = "nak"
	SettleTerm       = "term"
	SettleInProgress = "in_progress"
)

// StartSettle starts the span of acknowledging m with op (kind client,
// operation settle).
func StartSettle(ctx context.Context, t trace.Tracer, m Message, op string) (context.Context, trace.Span) {
	return m.start(m.incoming(ctx), t, op, trace.SpanKindClient, semconv.MessagingOperationTypeSettle)
}

// StartPublish starts the span of publishing m (kind producer, operation
// send) and writes its context into m.Header, which must not be nil, so
// the consumer of m continues the trace.
func StartPublish(ctx context.Context, t trace.Tracer, m Message) (context.Context, trace.Span) {
	ctx, span := m.start(ctx, t, "publish", trace.SpanKindProducer, semconv.MessagingOperationTypeSend)
	Inject(ctx, m.Header)
	return ctx, span
}

var noopTracer = noop.NewTracerProvider().Tracer("")

// OrNoop is t, or a tracer that records nothing when t is nil: what a
// component configured without tracing starts its spans with (they still
// pass a trace context on).
func OrNoop(t trace.Tracer) trace.Tracer {
	if t == nil {
		return noopTracer
	}
	return t
}
