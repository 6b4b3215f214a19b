package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func attrMap(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestMessagingSpans(t *testing.T) {
	t.Parallel()
	tp, exp := recorder(t)
	tr := tp.Tracer("t")
	m := Message{
		Subject:    "idem.ready.orders",
		Header:     nats.Header{"traceparent": {traceparent}, "Nats-Msg-Id": {"orders:2026-11-28:r1"}},
		MsgID:      "orders:2026-11-28:r1",
		StreamSeq:  42,
		Deliveries: 2,
		Consumer:   "idem",
		BodySize:   80,
	}

	_, recv := StartReceive(context.Background(), tr, m)
	recv.End()
	ctx, proc := StartProcess(context.Background(), tr, m)
	down := Message{Subject: "idem.ready.daily_revenue", Header: nats.Header{}, MsgID: "daily_revenue:2026-11-28:r1:7"}
	_, pub := StartPublish(ctx, tr, down)
	pub.End()
	_, settle := StartSettle(ctx, tr, m, SettleAck)
	settle.End()
	proc.End()

	spans := exp.GetSpans()
	require.Len(t, spans, 4)
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
		require.Equal(t, upstreamTrace, s.SpanContext.TraceID().String(), "%s continues the upstream trace", s.Name)
	}
	r, p := byName["receive idem.ready.orders"], byName["process idem.ready.orders"]
	pb, st := byName["publish idem.ready.daily_revenue"], byName["ack idem.ready.orders"]
	require.Equal(t, upstreamSpan, r.Parent.SpanID().String())
	require.Equal(t, upstreamSpan, p.Parent.SpanID().String())
	require.Equal(t, p.SpanContext.SpanID(), pb.Parent.SpanID(), "a downstream publish is the load's child")
	require.Equal(t, p.SpanContext.SpanID(), st.Parent.SpanID())

	require.Equal(t, trace.SpanKindClient, r.SpanKind)
	require.Equal(t, trace.SpanKindConsumer, p.SpanKind)
	require.Equal(t, trace.SpanKindProducer, pb.SpanKind)
	require.Equal(t, trace.SpanKindClient, st.SpanKind)

	a := attrMap(p)
	require.Equal(t, "nats", a["messaging.system"].AsString())
	require.Equal(t, "idem.ready.orders", a["messaging.destination.name"].AsString())
	require.Equal(t, "process", a["messaging.operation.type"].AsString())
	require.Equal(t, "orders:2026-11-28:r1", a["messaging.message.id"].AsString())
	require.Equal(t, "idem", a["messaging.consumer.group.name"].AsString())
	require.Equal(t, int64(80), a["messaging.message.body.size"].AsInt64())
	require.Equal(t, int64(42), a["idem.stream_seq"].AsInt64())
	require.Equal(t, int64(2), a["idem.deliveries"].AsInt64())
	require.Equal(t, "receive", attrMap(r)["messaging.operation.type"].AsString())
	require.Equal(t, "settle", attrMap(st)["messaging.operation.type"].AsString())
	require.Equal(t, "ack", attrMap(st)["messaging.operation.name"].AsString())
	require.Equal(t, "send", attrMap(pb)["messaging.operation.type"].AsString())
	require.Equal(t, "publish", attrMap(pb)["messaging.operation.name"].AsString())

	// The downstream event carries the publish span's context, lower case.
	require.Equal(t, []string{"00-" + upstreamTrace + "-" + pb.SpanContext.SpanID().String() + "-01"}, down.Header["traceparent"])
	require.NotContains(t, down.Header, "Traceparent")
}

func TestMessagingSpanWithoutTraceStartsOne(t *testing.T) {
	t.Parallel()
	tp, exp := recorder(t)
	_, span := StartProcess(context.Background(), tp.Tracer("t"), Message{Subject: "idem.ready.orders"})
	span.End()
	s := exp.GetSpans()[0]
	require.False(t, s.Parent.IsValid(), "a plain `nats pub` starts a trace")
	require.NotContains(t, attrMap(s), attribute.Key("messaging.message.id"))
	require.NotContains(t, attrMap(s), AttrStreamSeq)
}

// TestNoopKeepsTheTraceJoined: with tracing off, an event's trace context
// still reaches the events its load publishes.
func TestNoopKeepsTheTraceJoined(t *testing.T) {
	t.Parallel()
	p, err := Setup(context.Background(), Config{})
	require.NoError(t, err)
	require.False(t, p.Enabled())
	require.IsType(t, noop.TracerProvider{}, p.TracerProvider())
	in := Message{Subject: "idem.ready.orders", Header: nats.Header{"traceparent": {traceparent}}}
	ctx, proc := StartProcess(context.Background(), p.Tracer(), in)
	out := Message{Subject: "idem.ready.daily_revenue", Header: nats.Header{}}
	_, pub := StartPublish(ctx, p.Tracer(), out)
	pub.End()
	proc.End()
	require.Equal(t, []string{traceparent}, out.Header["traceparent"])
	require.Zero(t, p.DroppedSpans())
	require.NoError(t, p.Shutdown(context.Background()))
}
