package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// span is one span a collector received, flattened.
type span struct {
	Trace, ID, Parent string
	Name              string
	Attrs             map[string]string
	Links             []string // span ids
}

// collector stands in for an OpenTelemetry collector: it decodes the
// OTLP/HTTP protobuf export requests posted to /v1/traces and keeps every
// span.
type collector struct {
	mu    sync.Mutex
	spans []span
	srv   *httptest.Server
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			z, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = z
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					sp := span{Trace: hex.EncodeToString(s.TraceId), ID: hex.EncodeToString(s.SpanId),
						Parent: hex.EncodeToString(s.ParentSpanId), Name: s.Name, Attrs: map[string]string{}}
					for _, kv := range s.Attributes {
						sp.Attrs[kv.Key] = anyValue(kv.Value)
					}
					for _, l := range s.Links {
						sp.Links = append(sp.Links, hex.EncodeToString(l.SpanId))
					}
					c.spans = append(c.spans, sp)
				}
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}

func (c *collector) all() []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]span(nil), c.spans...)
}

// named waits for a span called name and returns the first.
func (c *collector) named(t *testing.T, name string) span {
	t.Helper()
	var found span
	require.Eventually(t, func() bool {
		for _, s := range c.all() {
			if s.Name == name {
				found = s
				return true
			}
		}
		return false
	}, 60*time.Second, 50*time.Millisecond, "no span %q", name)
	return found
}

const (
	publisherTrace = "0af7651916cd43dd8448eb211c80319c"
	publisherSpan  = "b7ad6b7169203331"
	// The distinctive values: bound in every statement, in the rows, in the
	// DSN. None may reach a span but the event's own message id.
	tracedRunID = "run-TRACED-9f3e71"
	rowSecret   = "row-SECRET-5d1c0a"
	dbPassword  = "pw-SECRET-44b2e9"
)

// traceYAML is a downstream dataset of orders and the tracing section.
func traceYAML(endpoint string) string {
	return `  b:
    strategy: delete_insert
    target: analytics.b
    partition_column: event_date
    source: SELECT event_date, count(*) AS n, sum(amount) AS total FROM analytics.t WHERE event_date = @partition GROUP BY event_date
    retry_delay: 300ms
tracing:
  otlp:
    endpoint: ` + endpoint + `
`
}

// exportSoon makes the batch span processor export every 100 ms instead of
// every 5 s: the test waits for spans, not for a timer.
const exportSoon = "OTEL_BSP_SCHEDULE_DELAY=100"

// TestTracingJoinsOnePipelineRunIntoOneTrace: an event published with a
// traceparent loads orders, whose downstream event loads b, all in the
// publisher's trace: receive and process under the publisher's span, the
// load and its statements under process, the relay's publish under the
// upstream's process span, b's receive and process under that publish,
// whose span the downstream message names in a lower-case traceparent. No
// span holds a bound value, row data or the database password.
func TestTracingJoinsOnePipelineRunIntoOneTrace(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	w := newWorld(t, opts{then: "[b]", extraYAML: traceYAML(col.srv.URL),
		serveURL: func(u string) string { return strings.Replace(u, "postgres@", "postgres:"+dbPassword+"@", 1) }})
	w.db.Exec(t, "CREATE TABLE analytics.b (event_date date NOT NULL, n bigint, total numeric(14,2))")
	w.db.Exec(t, "UPDATE staging.src SET note = $1 WHERE event_date = '2026-11-05'", rowSecret)
	p := w.serve(exportSoon)
	defer func() {
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 30*time.Second))
	}()

	w.publish("2026-11-05", tracedRunID, nats.Header{"traceparent": {"00-" + publisherTrace + "-" + publisherSpan + "-01"}})
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'b' AND run_id = $1", tracedRunID)

	// The downstream event as JetStream stores it.
	s, err := w.js.Stream(context.Background(), "IDEM_EVENTS")
	require.NoError(t, err)
	down, err := s.GetLastMsgForSubject(context.Background(), "idem.ready.b")
	require.NoError(t, err)
	var keys []string
	for k := range down.Header {
		if strings.EqualFold(k, "traceparent") {
			keys = append(keys, k)
		}
	}
	require.Equal(t, []string{"traceparent"}, keys, "one trace context, in lower case")
	require.Equal(t, "", down.Header.Get("tracestate"))

	upReceive := col.named(t, "receive idem.ready.orders")
	upProcess := col.named(t, "process idem.ready.orders")
	load := col.named(t, "load orders")
	publish := col.named(t, "publish idem.ready.b")
	downReceive := col.named(t, "receive idem.ready.b")
	downProcess := col.named(t, "process idem.ready.b")
	downLoad := col.named(t, "load b")
	col.named(t, "ack idem.ready.b")
	require.Equal(t, "00-"+publisherTrace+"-"+publish.ID+"-01", down.Header["traceparent"][0], "the relay's publish span")

	for _, sp := range []span{upReceive, upProcess, load, publish, downReceive, downProcess, downLoad} {
		require.Equal(t, publisherTrace, sp.Trace, "%s: one pipeline run, one trace", sp.Name)
	}
	require.Equal(t, publisherSpan, upReceive.Parent, "receive under the publisher's span")
	require.Equal(t, publisherSpan, upProcess.Parent, "process under the publisher's span")
	require.Equal(t, upProcess.ID, load.Parent, "the load under process")
	require.Equal(t, upProcess.ID, publish.Parent, "the relay continues the load's trace")
	require.Equal(t, publish.ID, downReceive.Parent, "downstream receive under the relay's publish")
	require.Equal(t, publish.ID, downProcess.Parent, "downstream process under the relay's publish")
	require.Equal(t, downProcess.ID, downLoad.Parent)
	require.Equal(t, "nats", upProcess.Attrs["messaging.system"])
	require.Equal(t, "idem.ready.orders", upProcess.Attrs["messaging.destination.name"])

	// Statements: under process (through their batch), the strategy's under
	// load; their text as written, with placeholders.
	spans := col.all()
	byID := map[string]span{}
	for _, sp := range spans {
		byID[sp.ID] = sp
	}
	under := func(sp span, ancestor string) bool {
		for i := 0; i < 10 && sp.Parent != ""; i++ {
			if sp.Parent == ancestor {
				return true
			}
			sp = byID[sp.Parent]
		}
		return false
	}
	var statements, inLoad, placeholders int
	for _, sp := range spans {
		if sp.Attrs["db.system.name"] != "postgresql" || sp.Trace != publisherTrace || sp.Attrs["db.query.text"] == "" {
			continue
		}
		statements++
		require.True(t, under(sp, upProcess.ID) || under(sp, downProcess.ID), "statement %q outside a process span", sp.Attrs["db.query.text"])
		if under(sp, load.ID) {
			inLoad++
		}
		if strings.Contains(sp.Attrs["db.query.text"], "$1") {
			placeholders++
		}
	}
	require.Positive(t, inLoad, "the strategy's statements under the load span")
	require.Greater(t, statements, inLoad)
	require.Positive(t, placeholders, "values travel as $n parameters")

	// Nothing but the event's message id (its identity, dataset:partition:
	// run_id) names the run; nothing holds a row's data or the password.
	for _, sp := range spans {
		for k, v := range sp.Attrs {
			require.NotContains(t, v, rowSecret, "%s %s", sp.Name, k)
			require.NotContains(t, v, dbPassword, "%s %s", sp.Name, k)
			if k != "messaging.message.id" {
				require.NotContains(t, v, tracedRunID, "%s %s", sp.Name, k)
			}
		}
	}
}

// TestTracingGroupLoadLinksItsMembers: events of one dataset loaded in one
// group transaction each keep their own trace: the group's span is a child
// of one member's process span and links to the others', and every
// member's downstream event continues its own member's trace.
func TestTracingGroupLoadLinksItsMembers(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	w := newWorld(t, opts{then: "[b]", inFlight: 1, extraYAML: traceYAML(col.srv.URL)})
	w.db.Exec(t, "CREATE TABLE analytics.b (event_date date NOT NULL, n bigint, total numeric(14,2))")
	w.streams()
	// A backlog before idem starts, so the messages are fetched together
	// and wait for the one load slot.
	traces := map[string]string{}
	for i := range 6 {
		day := fmt.Sprintf("2026-11-%02d", i+1)
		tid := fmt.Sprintf("%032x", 0xabc0+i)
		traces[day] = tid
		w.publish(day, "g1", nats.Header{"traceparent": {"00-" + tid + "-" + publisherSpan + "-01"}})
	}
	p := w.serve(exportSoon, "IDEM_NATS_MAX_GROUP=8")
	defer func() {
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 30*time.Second))
	}()
	w.waitCount(6, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'b' AND run_id = 'g1'")

	group := col.named(t, "load group orders")
	require.NotEmpty(t, group.Links, "the group links its other members")
	var processes []span
	require.Eventually(t, func() bool {
		processes = processes[:0]
		for _, sp := range col.all() {
			if sp.Name == "process idem.ready.orders" && sp.Parent == publisherSpan {
				processes = append(processes, sp)
			}
		}
		return len(processes) == 6
	}, 30*time.Second, 50*time.Millisecond)
	ids := map[string]span{}
	for _, sp := range processes {
		ids[sp.ID] = sp
	}
	require.Contains(t, ids, group.Parent, "a child of one member's process span")
	require.Equal(t, ids[group.Parent].Trace, group.Trace)
	loads := 0
	for _, sp := range col.all() {
		if sp.Parent == group.ID && sp.Attrs["db.system.name"] == "postgresql" {
			loads++
		}
	}
	require.Positive(t, loads, "the group's statements are its children")
	for _, l := range group.Links {
		require.Contains(t, ids, l, "a link to another member's process span")
		require.NotEqual(t, group.Parent, l)
	}
	// Each downstream event continues its own upstream's trace.
	s, err := w.js.Stream(context.Background(), "IDEM_EVENTS")
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	seen := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		if m.Subject != "idem.ready.b" || !bytes.Contains(m.Data, []byte(`"g1"`)) {
			continue
		}
		day := ""
		for d := range traces {
			if bytes.Contains(m.Data, []byte(d)) {
				day = d
			}
		}
		require.NotEmpty(t, day, "%s", m.Data)
		require.Contains(t, m.Header.Get("traceparent"), "-"+traces[day]+"-", "%s continues its own trace", day)
		seen++
	}
	require.Equal(t, 6, seen)
}

// TestTracingCollectorDownCostsNothingButSpans: with the collector's port
// closed, loads run as usual; the spans that could not be exported are
// counted on /metrics, and the process stops promptly.
func TestTracingCollectorDownCostsNothingButSpans(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	w := newWorld(t, opts{then: "[b]", extraYAML: traceYAML(closed)})
	w.db.Exec(t, "CREATE TABLE analytics.b (event_date date NOT NULL, n bigint, total numeric(14,2))")
	p := w.serve(exportSoon)
	start := time.Now()
	days := []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05"}
	for _, d := range days {
		w.publish(d, "down1", nats.Header{"traceparent": {"00-" + publisherTrace + "-" + publisherSpan + "-01"}})
	}
	w.waitCount(int64(len(days)), "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'b' AND run_id = 'down1'")
	t.Logf("%d events and their downstream loads in %s with the collector down", len(days), time.Since(start).Round(time.Millisecond))
	require.Equal(t, w.expected(days...), w.target())
	var failed, dropped float64
	require.Eventually(t, func() bool {
		failed, dropped = scrapeValue(t, p, "idem_trace_spans_failed_total"), scrapeValue(t, p, "idem_trace_spans_dropped_total")
		return failed+dropped > 0
	}, 30*time.Second, 100*time.Millisecond, "spans that never reached the collector are counted")
	t.Logf("spans failed %v, dropped %v", failed, dropped)
	stopped := time.Now()
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second))
	require.Less(t, time.Since(stopped), 20*time.Second, "the shutdown does not wait on the collector")
}

// scrapeValue reads one unlabelled sample from the process's /metrics.
func scrapeValue(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.httpAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			_, err := fmt.Sscan(v, &f)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}
