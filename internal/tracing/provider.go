package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// Protocols of Config.Protocol.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Defaults of Config.
const (
	DefaultServiceName = "idem"
	// DefaultQueueSize is how many ended spans wait for export before new
	// ones are dropped: about a minute of a busy process's spans.
	DefaultQueueSize = 4096
	// defaultHTTPPath is OTLP/HTTP's traces path, used when an endpoint
	// URL names none.
	defaultHTTPPath = "/v1/traces"
	// exportTimeout bounds one export. An export that fails is not retried:
	// its spans are counted as failed, and the next batch tries afresh, so a
	// collector that is down costs one short attempt per batch instead of a
	// backlog of retries holding the queue full.
	exportTimeout = 10 * time.Second
	// A failed export keeps the next ones from trying for firstPause,
	// doubling to maxPause until one succeeds: the spans ended meanwhile
	// are counted as failed at once, without being queued, encoded or
	// sent, so a collector that is down costs idem next to nothing.
	firstPause = time.Second
	maxPause   = 30 * time.Second
)

// Config says whether and where spans are exported. The zero Config is
// tracing off.
type Config struct {
	// Endpoint is the collector: host:port, or an http:// or https:// URL
	// (for http/protobuf, a URL without a path posts to /v1/traces). Empty
	// turns export off.
	Endpoint string
	// Protocol is ProtocolHTTP (the default) or ProtocolGRPC.
	Protocol string
	// Insecure sends without TLS to a host:port endpoint; a URL's scheme
	// decides for itself.
	Insecure bool
	// Headers go with every export (an API key, a tenant).
	Headers map[string]string
	// SampleRatio is the share of the traces idem starts that are sampled,
	// 0 to 1; a trace that arrives keeps its sampling decision.
	SampleRatio float64
	// ServiceName and ServiceVersion describe this process. Default
	// DefaultServiceName.
	ServiceName, ServiceVersion string
	// QueueSize bounds the ended spans waiting for export. Default
	// DefaultQueueSize.
	QueueSize int
	// OnExportError hears each failed export (the collector is down,
	// refuses); nil ignores them. Each is counted in FailedSpans either way.
	OnExportError func(error)
}

// Provider is the process's tracer provider.
type Provider struct {
	tp       trace.TracerProvider
	sdk      *sdktrace.TracerProvider
	queue    *queueProcessor
	exporter *countingExporter
}

// Setup returns the provider cfg describes: a no-op one when cfg has no
// endpoint. It connects to nothing: exporters dial when they first export.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.Endpoint == "" {
		return &Provider{tp: noop.NewTracerProvider()}, nil
	}
	exp, err := newExporter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return newProvider(exp, cfg), nil
}

// newProvider wires exp behind the queue.
func newProvider(exp sdktrace.SpanExporter, cfg Config) *Provider {
	name := cfg.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	attrs := []resource.Option{resource.WithAttributes(semconv.ServiceName(name))}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(cfg.ServiceVersion)))
	}
	res, err := resource.New(context.Background(), append(attrs, resource.WithSchemaURL(semconv.SchemaURL))...)
	if err != nil {
		res = resource.NewSchemaless(semconv.ServiceName(name))
	}
	size := cfg.QueueSize
	if size <= 0 {
		size = DefaultQueueSize
	}
	counting := &countingExporter{SpanExporter: exp, onError: cfg.OnExportError}
	// The batch processor blocks only the queue's own goroutine when its
	// buffer is full, so every span it is handed is exported or counted
	// as failed; the queue in front of it is where spans are dropped, and
	// counted, when the collector cannot keep up.
	bsp := sdktrace.NewBatchSpanProcessor(counting, sdktrace.WithBlocking(), sdktrace.WithMaxQueueSize(size), sdktrace.WithMaxExportBatchSize(min(512, size)), sdktrace.WithExportTimeout(exportTimeout))
	q := newQueueProcessor(bsp, size)
	q.down = &counting.down
	q.failed = &counting.failed
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithSpanProcessor(q),
	)
	return &Provider{tp: &pausingProvider{sdk: sdk, down: &counting.down, failed: &counting.failed}, sdk: sdk, queue: q, exporter: counting}
}

func newExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	host, path, insecure, err := splitEndpoint(cfg.Endpoint, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	switch cfg.Protocol {
	case "", ProtocolHTTP:
		if path == "" || path == "/" {
			path = defaultHTTPPath
		}
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(host), otlptracehttp.WithURLPath(path),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}), otlptracehttp.WithTimeout(exportTimeout)}
		if insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
		}
		return otlptracehttp.New(ctx, opts...)
	case ProtocolGRPC:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(host),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}), otlptracegrpc.WithTimeout(exportTimeout)}
		if insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	return nil, fmt.Errorf("tracing: protocol %q: want %s or %s", cfg.Protocol, ProtocolHTTP, ProtocolGRPC)
}

// splitEndpoint reads host:port or a URL into the exporters' terms.
func splitEndpoint(endpoint string, insecure bool) (host, path string, plain bool, err error) {
	if !strings.Contains(endpoint, "://") {
		if strings.ContainsAny(endpoint, "/?# ") {
			return "", "", false, fmt.Errorf("tracing: endpoint %q: want host:port or a URL", endpoint)
		}
		return endpoint, "", insecure, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", "", false, fmt.Errorf("tracing: endpoint: %w", err)
	}
	if u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return "", "", false, fmt.Errorf("tracing: endpoint %q: want an http:// or https:// URL", endpoint)
	}
	return u.Host, u.Path, u.Scheme == "http", nil
}

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// TracerProvider is the provider itself, for libraries that take one.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Tracer is idem's tracer.
func (p *Provider) Tracer() trace.Tracer { return p.tp.Tracer(Instrumentation) }

// Instrumentation names idem's tracer (the pgx tracer in pgxtrace uses it too).
const Instrumentation = "github.com/idem-data/idem"

// DroppedSpans counts the sampled spans dropped because the export queue
// was full: the collector is slower than idem, or down.
func (p *Provider) DroppedSpans() uint64 {
	if p.queue == nil {
		return 0
	}
	return p.queue.dropped.Load()
}

// FailedSpans counts the spans whose export failed.
func (p *Provider) FailedSpans() uint64 {
	if p.exporter == nil {
		return 0
	}
	return p.exporter.failed.Load()
}

// Shutdown exports what is queued, within ctx, and stops. Spans ended after
// it are not exported.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// queueProcessor hands ended spans to next from a goroutine of its own,
// through a bounded queue: a span that finds the queue full is dropped and
// counted, so ending a span never waits for next.
type queueProcessor struct {
	next    sdktrace.SpanProcessor
	queue   chan sdktrace.ReadOnlySpan
	stop    chan struct{}
	done    chan struct{}
	stopped atomic.Bool
	once    sync.Once
	dropped atomic.Uint64
	// down says the collector failed the last export and is not tried
	// yet; a span ended then is counted in failed, never queued.
	down   *pause
	failed *atomic.Uint64
}

var _ sdktrace.SpanProcessor = (*queueProcessor)(nil)

func newQueueProcessor(next sdktrace.SpanProcessor, size int) *queueProcessor {
	q := &queueProcessor{
		next:  next,
		queue: make(chan sdktrace.ReadOnlySpan, size),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go q.forward()
	return q
}

func (q *queueProcessor) forward() {
	defer close(q.done)
	for {
		select {
		case s := <-q.queue:
			q.next.OnEnd(s)
		case <-q.stop:
			for {
				select {
				case s := <-q.queue:
					q.next.OnEnd(s)
				default:
					return
				}
			}
		}
	}
}

func (q *queueProcessor) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	q.next.OnStart(ctx, s)
}

func (q *queueProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if q.stopped.Load() || !s.SpanContext().IsSampled() {
		return
	}
	if q.down != nil && q.down.active() {
		q.failed.Add(1)
		return
	}
	select {
	case q.queue <- s:
	default:
		q.dropped.Add(1)
	}
}

// ForceFlush hands the queued spans over and flushes next.
func (q *queueProcessor) ForceFlush(ctx context.Context) error {
	for {
		select {
		case s := <-q.queue:
			q.next.OnEnd(s)
		case <-ctx.Done():
			return ctx.Err()
		default:
			return q.next.ForceFlush(ctx)
		}
	}
}

// Shutdown hands the queued spans over, within ctx, and shuts next down.
func (q *queueProcessor) Shutdown(ctx context.Context) error {
	q.once.Do(func() {
		q.stopped.Store(true)
		close(q.stop)
	})
	var err error
	select {
	case <-q.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	return errors.Join(err, q.next.Shutdown(ctx))
}

// countingExporter counts the spans whose export failed and reports the
// error to OnExportError rather than to OTel's global handler, which would
// print to stderr in the middle of idem's JSON logs.
//
// After a failure it pauses (see firstPause): the batches of the pause are
// counted as failed without an attempt.
type countingExporter struct {
	sdktrace.SpanExporter
	failed  atomic.Uint64
	onError func(error)
	down    pause
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.down.active() {
		e.failed.Add(uint64(len(spans)))
		return nil
	}
	if err := e.SpanExporter.ExportSpans(ctx, spans); err != nil {
		e.failed.Add(uint64(len(spans)))
		e.down.start(time.Now())
		if e.onError != nil {
			e.onError(err)
		}
		return nil
	}
	e.down.end()
	return nil
}

// pause is the time after a failed export during which no export is
// tried, doubling with each failure in a row.
type pause struct {
	until atomic.Int64 // Unix nanoseconds
	last  atomic.Int64 // the length of the last pause, 0 after a success
}

func (p *pause) active() bool { return time.Now().UnixNano() < p.until.Load() }

func (p *pause) start(now time.Time) {
	d := min(max(2*time.Duration(p.last.Load()), firstPause), maxPause)
	p.last.Store(int64(d))
	p.until.Store(now.Add(d).UnixNano())
}

func (p *pause) end() {
	p.last.Store(0)
	p.until.Store(0)
}

// pausingProvider hands out tracers that record nothing while exports are
// paused (the collector failed the last one): a span started then would
// only be counted as failed, after costing its allocation and copies on a
// load's path. It stands for its parent instead, so the trace context
// still reaches the events idem publishes, and counts as failed.
type pausingProvider struct {
	embedded.TracerProvider
	sdk    *sdktrace.TracerProvider
	down   *pause
	failed *atomic.Uint64
}

func (p *pausingProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &pausingTracer{sdk: p.sdk.Tracer(name, opts...), p: p}
}

type pausingTracer struct {
	embedded.Tracer
	sdk trace.Tracer
	p   *pausingProvider
}

func (t *pausingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.p.down.active() {
		return t.sdk.Start(ctx, name, opts...)
	}
	t.p.failed.Add(1)
	// A span that records nothing and carries ctx's span context (none
	// when ctx has none): ending it ends nothing.
	ctx = trace.ContextWithSpanContext(ctx, trace.SpanContextFromContext(ctx))
	return ctx, trace.SpanFromContext(ctx)
}
