// Package tracing gives idem OpenTelemetry traces: a tracer provider that
// exports over OTLP when configured and is a no-op otherwise, the W3C trace
// context in NATS headers, spans for the messaging steps of an event, and a
// pgx tracer with a span per statement.
//
// It must never slow or fail a load: spans are exported from a bounded
// queue in the background, a span that finds the queue full is dropped and
// counted, and an export that fails is counted and reported, never
// returned to whoever ended the span.
//
// # Provider
//
// [Setup] builds a [Provider] from a [Config]. Without an endpoint it is a
// no-op: spans record nothing, but a trace context that arrived on an event
// still flows through idem's spans into the events it publishes, so a
// trace stays joined across idem even when idem exports nothing. With one,
// spans go through a queue of QueueSize spans to a batch span processor
// and the OTLP exporter (http/protobuf or grpc). Sampling is parent-based:
// an upstream decision is kept, and a trace idem starts is sampled at
// SampleRatio. [Provider.DroppedSpans] and [Provider.FailedSpans] count
// what never reached the collector, for a metric (a prometheus.CounterFunc
// over either). An export that fails is not retried: its batch is counted
// as failed, and no export is tried for a second, doubling to 30 s while
// the collector keeps failing. Meanwhile idem's tracers record nothing: a
// span started then stands for its parent (the trace context still reaches
// the events idem publishes) and is counted as failed, so a collector that
// is down costs one short attempt per pause, in the background, and next
// to nothing on a load's path.
//
// # NATS headers
//
// [HeaderCarrier] reads and writes traceparent and tracestate in lower
// case, writing the header map directly: the W3C spec recommends lower
// case, and other NATS clients look the header up case-sensitively. (OTel's
// propagation.HeaderCarrier over an http.Header would write Traceparent.)
// Reading accepts any case, since other publishers may write Traceparent.
// [Inject] and [Extract] use the W3C trace context propagator;
// [FromEnvironment] reads TRACEPARENT and TRACESTATE for a command started
// by a scheduler.
//
// # Spans
//
// One event's life is receive, process (the load, with a child span per
// statement) and settle (ack, nak or term); a downstream event is a
// publish. [StartReceive], [StartProcess], [StartSettle] and
// [StartPublish] set the messaging conventions: messaging.system nats,
// messaging.destination.name the subject, messaging.operation.type
// receive, process, settle or send (the conventions' name for a publish),
// messaging.operation.name, messaging.message.id the Nats-Msg-Id,
// messaging.consumer.group.name the durable consumer, and idem.stream_seq
// the JetStream sequence. A span for an incoming event continues the trace
// its traceparent names unless ctx already holds a span.
//
// # PostgreSQL
//
// The spans of the statements idem sends are made by package pgxtrace,
// apart from this one, so that what links this package (the consumer)
// links no PostgreSQL driver.
package tracing
