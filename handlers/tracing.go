package handlers

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/internal/tracing"
)

// AttrDataset names the dataset of a load's span. The partition and the
// run_id are not recorded: they are bound values of the load's statements.
const AttrDataset = attribute.Key("idem.dataset")

func (h *Handler) tracer() trace.Tracer { return tracing.OrNoop(h.Tracer) }

// traceOf is the stored trace context an attempt's downstream events
// carry: the delivery's own (a member of a group has its own, not the
// group's), else whatever span ctx holds.
func traceOf(ctx context.Context, m Meta) string {
	if m.Trace.IsValid() {
		return tracing.StoreSpanContext(m.Trace)
	}
	return tracing.Store(ctx)
}

// span starts a span of the load (the strategy's work, the checks) under
// ctx's, and returns its context and the function that ends it with the
// step's error. The error's text is not recorded: a PostgreSQL message
// can quote a value it could not read.
func (l *loading) span(ctx context.Context, step string) (context.Context, func(error)) {
	ctx, span := l.h.tracer().Start(ctx, step+" "+l.ds.Name, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(AttrDataset.String(l.ds.Name))
	}
	return ctx, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, "failed")
			if code := SQLState(err); code != "" {
				span.SetAttributes(semconv.DBResponseStatusCode(code))
			}
		}
		span.End()
	}
}
