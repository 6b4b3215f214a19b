package consumer

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/internal/tracing"
)

// A delivery's spans: receive (its metadata and body read), process (the
// handler's call: its statements are children) and settle (the ack, nak or
// term, with the dead letter's publish under it). Each is a child of the
// publisher's span when the message names one in its traceparent; when it
// names none, idem starts the trace at receive, and process and settle are
// its children, so a delivery is always one trace.
//
// A group load is one transaction for several messages: its span is a
// child of the first member's process span (the statements must have one
// parent) and links to every other member's, and each member keeps its own
// process span, whose trace its downstream events continue.

// AttrGroupSize is the number of messages a group load takes.
const AttrGroupSize = attribute.Key("idem.group_size")

func (c *Consumer) tracer() trace.Tracer { return tracing.OrNoop(c.cfg.Tracer) }

// traceMsg is what the messaging spans say about d.
func (c *Consumer) traceMsg(d *delivery) tracing.Message {
	return tracing.Message{
		Subject:    d.m.Subject,
		Header:     d.m.Headers,
		MsgID:      d.m.Headers.Get(nats.MsgIdHdr),
		StreamSeq:  d.m.StreamSeq,
		Deliveries: d.meta.NumDelivered,
		Consumer:   c.cfg.Consumer,
		BodySize:   len(d.m.Data),
	}
}

// received records the receive span of d, from start (before its body was
// read) to now, and keeps the context its later spans start from.
func (c *Consumer) received(d *delivery, start time.Time) {
	ctx, span := tracing.StartReceive(context.Background(), c.tracer(), c.traceMsg(d), trace.WithTimestamp(start))
	if d.decodeErr != nil {
		span.SetStatus(codes.Error, "invalid event")
	}
	span.End()
	d.trace = tracing.Extract(context.Background(), d.m.Headers)
	if !trace.SpanContextFromContext(d.trace).IsValid() {
		d.trace = ctx
	}
}

// startProcess starts d's process span under hard's values and keeps its
// span context on the message, for the handler.
func (c *Consumer) startProcess(hard context.Context, d *delivery) (context.Context, trace.Span) {
	ctx, span := tracing.StartProcess(trace.ContextWithSpan(hard, trace.SpanFromContext(d.trace)), c.tracer(), c.traceMsg(d))
	d.m.Span = span.SpanContext()
	return ctx, span
}

// endProcess ends a process span with the handler's outcome; an error's
// text stays out (it can quote a value the warehouse could not read).
func endProcess(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, "handler failed")
	}
	span.End()
}

// startGroup starts the span of a group load under the lead's process
// span (ctx), linking every other member's, and returns the function that
// ends it; a group of one is its process span alone.
func (c *Consumer) startGroup(ctx context.Context, ds []*delivery) (context.Context, func()) {
	if len(ds) < 2 {
		return ctx, func() {}
	}
	links := make([]trace.Link, 0, len(ds)-1)
	for _, d := range ds[1:] {
		if d.m.Span.IsValid() {
			links = append(links, trace.Link{SpanContext: d.m.Span})
		}
	}
	ctx, span := c.tracer().Start(ctx, "load group "+ds[0].dataset, trace.WithLinks(links...),
		trace.WithAttributes(AttrGroupSize.Int(len(ds))))
	return ctx, func() { span.End() }
}

// startSettle starts the span of settling d with op.
func (c *Consumer) startSettle(d *delivery, op string) (context.Context, trace.Span) {
	ctx := d.trace
	if ctx == nil {
		ctx = context.Background()
	}
	return tracing.StartSettle(ctx, c.tracer(), c.traceMsg(d), op)
}

// endSettle ends a settle span with the server's answer.
func endSettle(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, "not confirmed")
	}
	span.End()
}
