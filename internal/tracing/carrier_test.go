package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const (
	upstreamTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	upstreamSpan  = "00f067aa0ba902b7"
	traceparent   = "00-" + upstreamTrace + "-" + upstreamSpan + "-01"
)

// recorder is a provider that keeps every ended span in memory, exported
// as each span ends (a test's spans, not production's path).
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func TestHeaderCarrierWritesLowerCase(t *testing.T) {
	t.Parallel()
	h := nats.Header{"Traceparent": {"00-old"}, "TraceState": {"old=1"}, "Nats-Msg-Id": {"orders:2026-11-28:r1"}}
	c := HeaderCarrier(h)
	c.Set("Traceparent", "00-new")
	c.Set("tracestate", "k=v")
	require.Equal(t, nats.Header{"traceparent": {"00-new"}, "tracestate": {"k=v"}, "Nats-Msg-Id": {"orders:2026-11-28:r1"}}, h,
		"one trace context, in lower case; other headers untouched")
	require.ElementsMatch(t, []string{"traceparent", "tracestate", "nats-msg-id"}, c.Keys())
}

func TestHeaderCarrierReadsAnyCase(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a", HeaderCarrier(nats.Header{"traceparent": {"a"}}).Get("traceparent"))
	require.Equal(t, "b", HeaderCarrier(nats.Header{"Traceparent": {"b"}}).Get("traceparent"))
	require.Equal(t, "c", HeaderCarrier(nats.Header{"TRACEPARENT": {"c"}}).Get("traceparent"))
	require.Equal(t, "exact", HeaderCarrier(nats.Header{"Traceparent": {"other"}, "traceparent": {"exact"}}).Get("traceparent"))
	require.Empty(t, HeaderCarrier(nats.Header{"traceparent": {}}).Get("traceparent"))
	require.Empty(t, HeaderCarrier(nil).Get("traceparent"))
}

func TestInjectWritesLowerCase(t *testing.T) {
	t.Parallel()
	tp, _ := recorder(t)
	ctx := Extract(context.Background(), nats.Header{"traceparent": {traceparent}, "tracestate": {"vendor=x"}})
	ctx, span := tp.Tracer("t").Start(ctx, "s")
	defer span.End()

	h := nats.Header{}
	Inject(ctx, h)
	require.Len(t, h, 2)
	require.Equal(t, "00-"+upstreamTrace+"-"+span.SpanContext().SpanID().String()+"-01", h["traceparent"][0])
	require.Equal(t, "vendor=x", h["tracestate"][0])
	_, canonical := h["Traceparent"]
	require.False(t, canonical)

	empty := nats.Header{}
	Inject(context.Background(), empty)
	require.Empty(t, empty, "no span, no header")
}

func TestExtractContinuesTheUpstreamTrace(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"traceparent", "Traceparent"} {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			tp, exp := recorder(t)
			ctx := Extract(context.Background(), nats.Header{key: {traceparent}})
			remote := trace.SpanContextFromContext(ctx)
			require.True(t, remote.IsRemote())
			require.True(t, remote.IsSampled())

			_, span := tp.Tracer("t").Start(ctx, "process")
			span.End()
			got := exp.GetSpans()
			require.Len(t, got, 1)
			require.Equal(t, upstreamTrace, got[0].SpanContext.TraceID().String())
			require.Equal(t, upstreamSpan, got[0].Parent.SpanID().String())
		})
	}
	for _, bad := range []string{"", "garbage", "00-" + upstreamTrace + "-0000000000000000-01", "00-00000000000000000000000000000000-" + upstreamSpan + "-01"} {
		ctx := Extract(context.Background(), nats.Header{"traceparent": {bad}})
		require.False(t, trace.SpanContextFromContext(ctx).IsValid(), bad)
	}
	require.False(t, trace.SpanContextFromContext(Extract(context.Background(), nil)).IsValid())
}

func TestFromEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TRACEPARENT": traceparent, "TRACESTATE": "vendor=x"}
	ctx := FromEnvironment(context.Background(), func(k string) string { return env[k] })
	sc := trace.SpanContextFromContext(ctx)
	require.Equal(t, upstreamTrace, sc.TraceID().String())
	require.Equal(t, "vendor=x", sc.TraceState().String())
	require.False(t, trace.SpanContextFromContext(FromEnvironment(context.Background(), func(string) string { return "" })).IsValid())
}
