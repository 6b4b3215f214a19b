package tracing

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// stuckExporter is a collector that never answers until released: every
// export waits. A span-end path that called it would wait too.
type stuckExporter struct {
	entered  chan struct{} // closed when the first export starts
	once     sync.Once
	release  chan struct{}
	exported atomic.Int64
}

func newStuckExporter() *stuckExporter {
	return &stuckExporter{entered: make(chan struct{}), release: make(chan struct{})}
}

func (e *stuckExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.once.Do(func() { close(e.entered) })
	select {
	case <-e.release:
		e.exported.Add(int64(len(spans)))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *stuckExporter) Shutdown(context.Context) error { return nil }

// wait waits for ch with a generous deadline: a condition, not a speed.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("gave up waiting: %s", what)
	}
}

// TestEndingSpansNeverWaitsForTheCollector: with the collector stuck, a
// load ends far more spans than any buffer holds. Every End returns while
// the export is still stuck, so none waited for it; the spans that did not
// fit are dropped and counted, and every span is exported or counted.
func TestEndingSpansNeverWaitsForTheCollector(t *testing.T) {
	t.Parallel()
	exp := newStuckExporter()
	p := newProvider(exp, Config{SampleRatio: 1, QueueSize: 8})
	tr := p.Tracer()
	const n = 1000

	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for range n {
			_, s := tr.Start(context.Background(), "statement")
			s.End()
		}
	}()
	wait(t, exp.entered, "the first export")
	wait(t, ended, "every span ended while the collector is stuck")
	select {
	case <-exp.release:
		t.Fatal("released too early")
	default: // still stuck: no End waited for it
	}
	dropped := p.DroppedSpans()
	require.Positive(t, dropped, "a full queue drops")
	// At most the queue, the batch processor's buffer and the batch being
	// exported hold spans; the rest are dropped.
	require.GreaterOrEqual(t, dropped, uint64(n-8-8-8-1))

	close(exp.release)
	require.NoError(t, p.Shutdown(context.Background()))
	require.Equal(t, uint64(n), uint64(exp.exported.Load())+dropped, "every span exported or counted as dropped")
	require.Zero(t, p.FailedSpans())

	_, late := tr.Start(context.Background(), "after shutdown")
	late.End()
	require.Equal(t, dropped, p.DroppedSpans(), "a span after shutdown is neither exported nor counted")
}

type failingExporter struct{ calls atomic.Int64 }

func (e *failingExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	e.calls.Add(1)
	return errors.New("collector says no")
}
func (e *failingExporter) Shutdown(context.Context) error { return nil }

func TestFailedExportsAreCounted(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var heard []error
	p := newProvider(&failingExporter{}, Config{SampleRatio: 1, OnExportError: func(err error) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, err)
	}})
	for range 3 {
		_, s := p.Tracer().Start(context.Background(), "s")
		s.End()
	}
	require.NoError(t, p.Shutdown(context.Background()))
	require.Equal(t, uint64(3), p.FailedSpans())
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, heard)
	require.ErrorContains(t, heard[0], "collector says no")
}

func TestUnsampledSpansAreNotQueued(t *testing.T) {
	t.Parallel()
	exp := newStuckExporter()
	close(exp.release)
	p := newProvider(exp, Config{SampleRatio: 0, QueueSize: 1})
	for range 100 {
		_, s := p.Tracer().Start(context.Background(), "s")
		s.End()
	}
	require.NoError(t, p.Shutdown(context.Background()))
	require.Zero(t, p.DroppedSpans())
	require.Zero(t, exp.exported.Load())
}

// TestSetupWithAClosedPort: both exporters, pointed where nothing listens,
// build without connecting; ending spans and shutting down do not hang.
func TestSetupWithAClosedPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	for _, cfg := range []Config{
		{Endpoint: "http://" + addr, Protocol: ProtocolHTTP, SampleRatio: 1},
		{Endpoint: addr, Protocol: ProtocolHTTP, Insecure: true, Headers: map[string]string{"authorization": "Bearer x"}, SampleRatio: 1},
		{Endpoint: addr, Protocol: ProtocolGRPC, Insecure: true, SampleRatio: 1},
		{Endpoint: "http://" + addr, Protocol: ProtocolGRPC, SampleRatio: 1},
	} {
		p, err := Setup(context.Background(), cfg)
		require.NoError(t, err, cfg)
		require.True(t, p.Enabled())
		for range 10 {
			_, s := p.Tracer().Start(context.Background(), "s")
			s.End()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = p.Shutdown(ctx) // the export fails or times out: either is fine
		cancel()
	}
}

func TestSetupRefuses(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Endpoint: "collector:4318", Protocol: "http"},
		{Endpoint: "ftp://collector:4318"},
		{Endpoint: "collector:4318/v1/traces"},
	} {
		_, err := Setup(context.Background(), cfg)
		require.Error(t, err, cfg)
	}
}

func TestSplitEndpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		endpoint string
		insecure bool
		host     string
		path     string
		plain    bool
	}{
		{"collector:4318", false, "collector:4318", "", false},
		{"collector:4318", true, "collector:4318", "", true},
		{"http://collector:4318", false, "collector:4318", "", true},
		{"https://collector.example.com/otlp/v1/traces", true, "collector.example.com", "/otlp/v1/traces", false},
	} {
		host, path, plain, err := splitEndpoint(c.endpoint, c.insecure)
		require.NoError(t, err)
		require.Equal(t, []any{c.host, c.path, c.plain}, []any{host, path, plain}, c.endpoint)
	}
}

// TestAFailedExportPausesTheNextOnes: after a failure, the spans of the
// pause are counted as failed without an attempt, and a success ends it.
func TestAFailedExportPausesTheNextOnes(t *testing.T) {
	t.Parallel()
	exp := &failingExporter{}
	c := &countingExporter{SpanExporter: exp}
	spans := make([]sdktrace.ReadOnlySpan, 4)
	require.NoError(t, c.ExportSpans(context.Background(), spans))
	require.NoError(t, c.ExportSpans(context.Background(), spans))
	require.EqualValues(t, 1, exp.calls.Load(), "the second batch waits out the pause")
	require.EqualValues(t, 8, c.failed.Load())
	require.True(t, c.down.active())
	require.Equal(t, firstPause, time.Duration(c.down.last.Load()))
	c.down.start(time.Now())
	require.Equal(t, 2*firstPause, time.Duration(c.down.last.Load()), "doubling while it keeps failing")
	for range 10 {
		c.down.start(time.Now())
	}
	require.Equal(t, maxPause, time.Duration(c.down.last.Load()))
	c.down.end()
	require.False(t, c.down.active())

	// Spans ended during a pause are never queued.
	p := newProvider(&failingExporter{}, Config{SampleRatio: 1})
	p.exporter.down.start(time.Now())
	for range 5 {
		_, s := p.Tracer().Start(context.Background(), "s")
		s.End()
	}
	require.EqualValues(t, 5, p.FailedSpans())
	// Nor recorded: a span of the pause stands for its parent.
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx, s := p.Tracer().Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "s")
	require.False(t, s.IsRecording())
	require.Equal(t, parent, trace.SpanContextFromContext(ctx), "the trace context goes on")
	s.End()
	require.NoError(t, p.Shutdown(context.Background()))
	require.EqualValues(t, 6, p.FailedSpans(), "nothing was queued to fail again")
}
