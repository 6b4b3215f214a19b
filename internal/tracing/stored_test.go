package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// TestStoredTraceContextRoundTrips: what Store writes, Load reads back as
// the same remote parent, tracestate included; nothing to store is "", and
// a stored value that is not a traceparent continues nothing.
func TestStoredTraceContextRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := Extract(context.Background(), nats.Header{"traceparent": {traceparent}, "tracestate": {"k=v,a=b"}})
	s := Store(ctx)
	require.Equal(t, traceparent+"\nk=v,a=b", s)
	back := trace.SpanContextFromContext(Load(context.Background(), s))
	require.True(t, back.IsRemote())
	require.Equal(t, upstreamTrace, back.TraceID().String())
	require.Equal(t, upstreamSpan, back.SpanID().String())
	require.Equal(t, "k=v,a=b", back.TraceState().String())

	only := Extract(context.Background(), nats.Header{"traceparent": {traceparent}})
	require.Equal(t, traceparent, Store(only))
	require.Equal(t, traceparent, StoreSpanContext(trace.SpanContextFromContext(only)))

	require.Empty(t, Store(context.Background()))
	require.Empty(t, StoreSpanContext(trace.SpanContext{}))
	require.False(t, trace.SpanContextFromContext(Load(context.Background(), "")).IsValid())
	require.False(t, trace.SpanContextFromContext(Load(context.Background(), "not a traceparent\n'; DROP")).IsValid())
}
