package pgxtrace

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/testkit/pgtest"
)

// secret looks like what must never reach a span: a bound argument.
const secret = "s3cr3t-Arg-Value-9f2c"

// noSecret checks every attribute, event and status of every span.
func noSecret(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	for _, s := range spans {
		require.NotContains(t, s.Name, secret)
		require.NotContains(t, s.Status.Description, secret, s.Name)
		for _, kv := range s.Attributes {
			require.NotContains(t, kv.Value.String(), secret, "%s: %s", s.Name, kv.Key)
		}
		for _, e := range s.Events {
			for _, kv := range e.Attributes {
				require.NotContains(t, kv.Value.String(), secret, "%s: event %s: %s", s.Name, e.Name, kv.Key)
			}
		}
	}
}

type countingTracer struct{ starts, ends int }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.starts++
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) { c.ends++ }

// tracedConn connects to a new database with a recording provider,
// after install set the config's tracer.
func tracedConn(t *testing.T, install func(*pgx.ConnConfig, *sdktrace.TracerProvider)) (*pgx.Conn, *sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	db := pgtest.NewDB(t)
	tp, exp := recorder(t)
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	install(cfg, tp)
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, tp, exp
}

func TestPgxTracer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	existing := &countingTracer{}
	conn, tp, exp := tracedConn(t, func(cfg *pgx.ConnConfig, tp *sdktrace.TracerProvider) {
		cfg.Tracer = existing
		WithPgxTracer(cfg, tp)
	})

	_, err := conn.Exec(ctx, `CREATE TABLE secrets (id int PRIMARY KEY, v text)`)
	require.NoError(t, err)
	require.Equal(t, 1, existing.starts, "the tracer the config had still runs")
	require.Equal(t, 1, existing.ends)

	ctx, parent := tp.Tracer("t").Start(ctx, "process idem.ready.orders")
	statements := []string{
		`INSERT INTO secrets (id, v) VALUES ($1, $2)`,
		`UPDATE secrets SET v = $1 WHERE id = $2`,
		`SELECT v FROM secrets WHERE v = $1`,
	}
	b := &pgx.Batch{}
	b.Queue(statements[0], 1, secret)
	b.Queue(statements[1], secret+"-2", 1)
	b.Queue(statements[2], secret+"-2")
	require.NoError(t, conn.SendBatch(ctx, b).Close())
	parent.End()

	var batch tracetest.SpanStub
	var children tracetest.SpanStubs
	for _, s := range exp.GetSpans() {
		if s.Name == "BATCH" {
			batch = s
		}
	}
	for _, s := range exp.GetSpans() { // in the order they ended: the batch's order
		if s.Parent.SpanID() == batch.SpanContext.SpanID() {
			children = append(children, s)
		}
	}
	require.Equal(t, parent.SpanContext().SpanID(), batch.Parent.SpanID(), "the batch is the load's child")
	require.Equal(t, int64(3), attrMap(batch)["db.operation.batch.size"].AsInt64())
	require.Len(t, children, 3, "one span per statement of the batch")
	for i, s := range children {
		a := attrMap(s)
		require.Equal(t, statements[i], a["db.query.text"].AsString(), "the text as written")
		require.Equal(t, "postgresql", a["db.system.name"].AsString())
		require.Equal(t, conn.Config().Database, a["db.namespace"].AsString())
		require.Equal(t, trace.SpanKindClient, s.SpanKind)
		require.Equal(t, []string{"INSERT", "UPDATE", "SELECT"}[i], s.Name)
		require.Equal(t, codes.Unset, s.Status.Code)
	}
	require.Equal(t, int64(1), attrMap(children[0])["idem.db.rows_affected"].AsInt64())
	noSecret(t, exp.GetSpans())

	// A failing statement: its SQLSTATE, not PostgreSQL's message, which
	// quotes the value it could not read.
	exp.Reset()
	_, err = conn.Exec(ctx, `SELECT $1::int`, secret)
	require.ErrorContains(t, err, secret, "PostgreSQL does quote it")
	var q pgx.Rows
	q, err = conn.Query(ctx, `SELECT id FROM secrets WHERE id = $1`, secret) // pgx cannot encode it as int
	if err == nil {
		q.Close()
		err = q.Err()
	}
	require.Error(t, err)
	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	require.Equal(t, codes.Error, spans[0].Status.Code)
	require.Equal(t, "SQLSTATE 22P02", spans[0].Status.Description)
	require.Equal(t, "22P02", attrMap(spans[0])["db.response.status_code"].AsString())
	require.Equal(t, codes.Error, spans[1].Status.Code)
	noSecret(t, spans)
}

func TestPgxTracerCopyAndConnect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, _, exp := tracedConn(t, func(cfg *pgx.ConnConfig, tp *sdktrace.TracerProvider) { WithPgxTracer(cfg, tp) })
	_, err := conn.Exec(ctx, `CREATE TABLE t (id int, v text)`)
	require.NoError(t, err)
	n, err := conn.CopyFrom(ctx, pgx.Identifier{"public", "t"}, []string{"id", "v"}, pgx.CopyFromRows([][]any{{1, secret}, {2, secret}}))
	require.NoError(t, err)
	require.Equal(t, int64(2), n)

	names := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		names[s.Name] = s
	}
	require.Contains(t, names, "connect")
	cp := names[`COPY "public"."t"`]
	require.Equal(t, `COPY "public"."t" ("id", "v") FROM STDIN`, attrMap(cp)["db.query.text"].AsString())
	require.Equal(t, int64(2), attrMap(cp)["idem.db.rows_affected"].AsInt64())
	noSecret(t, exp.GetSpans())
}

func TestOperation(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]string{
		"select 1":                            "SELECT",
		"  \n-- note\n/* c */ WITH x AS (..)": "WITH",
		"begin":                               "BEGIN",
		"(SELECT 1)":                          "",
		"-- only a comment":                   "",
		"/* unterminated":                     "",
	} {
		require.Equal(t, want, operation(sql), sql)
	}
	long := strings.Repeat("é", MaxQueryTextBytes)
	cut := truncate(long, MaxQueryTextBytes)
	require.LessOrEqual(t, len(cut), MaxQueryTextBytes)
	require.True(t, strings.HasPrefix(long, cut))
	require.Equal(t, "short", truncate("short", MaxQueryTextBytes))
}

// TestPgxTracerInTracesSkipsStatementsOutsideASpan: a service's own polls
// start no trace; a load's statements are recorded under its span.
func TestPgxTracerInTracesSkipsStatementsOutsideASpan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, tp, exp := tracedConn(t, func(cfg *pgx.ConnConfig, tp *sdktrace.TracerProvider) { cfg.Tracer = NewPgxTracerInTraces(tp) })
	_, err := conn.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
	b := &pgx.Batch{}
	b.Queue(`SELECT 2`)
	require.NoError(t, conn.SendBatch(ctx, b).Close())
	require.Empty(t, exp.GetSpans(), "no connect, statement or batch span outside a trace")

	sctx, parent := tp.Tracer("t").Start(ctx, "process")
	_, err = conn.Exec(sctx, `SELECT $1::int`, 3)
	require.NoError(t, err)
	parent.End()
	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	require.Equal(t, "SELECT", spans[0].Name)
	require.Equal(t, parent.SpanContext().SpanID(), spans[0].Parent.SpanID())
}

// recorder is a provider that keeps every ended span in memory.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}
func attrMap(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}
