package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Stored is how a trace context waits in the database (idem.outbox.trace)
// for the process that publishes what a load caused: the traceparent, then,
// when there is one, a line break and the tracestate. Neither header can
// hold a line break, so the split is unambiguous.

// Store returns the trace context of ctx in its stored form, "" when ctx
// holds no valid span context.
func Store(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	tp := c["traceparent"]
	if tp == "" {
		return ""
	}
	if ts := c["tracestate"]; ts != "" {
		return tp + "\n" + ts
	}
	return tp
}

// StoreSpanContext is Store for a span context.
func StoreSpanContext(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return Store(trace.ContextWithRemoteSpanContext(context.Background(), sc))
}

// Load returns ctx with the remote span context s (Store's form) names, or
// ctx itself when s names none (empty, or not a valid traceparent).
func Load(ctx context.Context, s string) context.Context {
	if s == "" {
		return ctx
	}
	tp, ts, _ := strings.Cut(s, "\n")
	c := propagation.MapCarrier{"traceparent": tp}
	if ts != "" {
		c["tracestate"] = ts
	}
	return propagator.Extract(ctx, c)
}
