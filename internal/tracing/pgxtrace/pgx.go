package pgxtrace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"

	"github.com/idem-data/idem/internal/tracing"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// MaxQueryTextBytes bounds db.query.text: a statement longer than that is
// cut, on a character boundary.
const MaxQueryTextBytes = 8 << 10

// AttrRowsAffected is the rows a statement's command tag reports.
const AttrRowsAffected = attribute.Key("idem.db.rows_affected")

// PgxTracer makes a client span per statement pgx sends. It records the
// statement's text, never its arguments.
type PgxTracer struct {
	tracer trace.Tracer
	// inTraces skips statements sent outside any span (see
	// NewPgxTracerInTraces).
	inTraces bool
}

var (
	_ pgx.QueryTracer    = (*PgxTracer)(nil)
	_ pgx.BatchTracer    = (*PgxTracer)(nil)
	_ pgx.CopyFromTracer = (*PgxTracer)(nil)
	_ pgx.ConnectTracer  = (*PgxTracer)(nil)
)

// NewPgxTracer returns a tracer whose spans come from tp.
func NewPgxTracer(tp trace.TracerProvider) *PgxTracer {
	return &PgxTracer{tracer: tp.Tracer(tracing.Instrumentation + "/pgx")}
}

// NewPgxTracerInTraces returns a tracer that records only the statements
// sent under a span (a load's): a service's own polls and reads (the
// outbox claims twice a second, the observer's, the fleet's) would each
// start a trace of their own, many times a minute, and bury the loads'.
func NewPgxTracerInTraces(tp trace.TracerProvider) *PgxTracer {
	t := NewPgxTracer(tp)
	t.inTraces = true
	return t
}

// skip reports whether a statement under ctx goes unrecorded.
func (t *PgxTracer) skip(ctx context.Context) bool {
	return t.inTraces && !trace.SpanContextFromContext(ctx).IsValid()
}

// WithPgxTracer adds a tracer of tp to cfg (a pgxpool.Config's ConnConfig
// too), alongside the tracer cfg already has, if any.
func WithPgxTracer(cfg *pgx.ConnConfig, tp trace.TracerProvider) {
	cfg.Tracer = CombineTracers(cfg.Tracer, NewPgxTracer(tp))
}

// CombineTracers returns a tracer calling existing, then t: existing
// itself is kept whole, every optional pgx interface it has included (a
// pool's acquire and release tracers too).
func CombineTracers(existing pgx.QueryTracer, t *PgxTracer) pgx.QueryTracer {
	if existing == nil {
		return t
	}
	return multitracer.New(existing, t)
}

func connAttrs(cfg *pgx.ConnConfig) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.DBSystemNamePostgreSQL}
	if cfg == nil {
		return attrs
	}
	if cfg.Database != "" {
		attrs = append(attrs, semconv.DBNamespace(cfg.Database))
	}
	if cfg.Host != "" && !strings.HasPrefix(cfg.Host, "/") {
		attrs = append(attrs, semconv.ServerAddress(cfg.Host), semconv.ServerPort(int(cfg.Port)))
	}
	return attrs
}

func configOf(conn *pgx.Conn) *pgx.ConnConfig {
	if conn == nil {
		return nil
	}
	return conn.Config()
}

// statementAttrs describe one statement: its text, cut to
// MaxQueryTextBytes, and the operation its first word names.
func statementAttrs(conn *pgx.Conn, sql string) (string, []attribute.KeyValue) {
	attrs := connAttrs(configOf(conn))
	op := operation(sql)
	if op != "" {
		attrs = append(attrs, semconv.DBOperationName(op))
	}
	attrs = append(attrs, semconv.DBQueryText(truncate(sql, MaxQueryTextBytes)))
	if op == "" {
		return "postgresql", attrs
	}
	return op, attrs
}

// operation is the statement's first keyword in upper case (SELECT, INSERT,
// WITH, BEGIN...), skipping leading space and comments; empty when it does
// not start with a word.
func operation(sql string) string {
	s := sql
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		switch {
		case strings.HasPrefix(s, "--"):
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[i+1:]
				continue
			}
			return ""
		case strings.HasPrefix(s, "/*"):
			if i := strings.Index(s, "*/"); i >= 0 {
				s = s[i+2:]
				continue
			}
			return ""
		}
		break
	}
	end := 0
	for end < len(s) && (s[end] >= 'a' && s[end] <= 'z' || s[end] >= 'A' && s[end] <= 'Z') {
		end++
	}
	return strings.ToUpper(s[:end])
}

func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// end records the outcome of a statement and ends its span. Error text is
// kept out: PostgreSQL quotes the value it could not read in some messages
// (invalid input syntax for type integer: "..."), and so does pgx when it
// cannot encode an argument. A server error is recorded by its SQLSTATE, a
// cancelled or timed-out statement as such, anything else by its Go type.
func end(span trace.Span, tag pgconn.CommandTag, err error, opts ...trace.SpanEndOption) {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		span.SetStatus(codes.Error, "SQLSTATE "+pgErr.Code)
		span.SetAttributes(semconv.DBResponseStatusCode(pgErr.Code), semconv.ErrorTypeKey.String(pgErr.Code))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		span.SetStatus(codes.Error, "cancelled or timed out")
		span.SetAttributes(semconv.ErrorTypeKey.String("timeout"))
	case err != nil:
		span.SetStatus(codes.Error, "failed")
		span.SetAttributes(semconv.ErrorTypeKey.String(fmt.Sprintf("%T", err)))
	case tag.String() != "":
		span.SetAttributes(AttrRowsAffected.Int64(tag.RowsAffected()))
	}
	span.End(opts...)
}

// TraceQueryStart starts the span of a Query, QueryRow or Exec.
func (t *PgxTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if t.skip(ctx) {
		return ctx
	}
	name, attrs := statementAttrs(conn, data.SQL)
	ctx, _ = t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx
}

// TraceQueryEnd ends it.
func (t *PgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	end(trace.SpanFromContext(ctx), data.CommandTag, data.Err)
}

// TraceBatchStart starts the span of a batch; each statement gets a child
// span when its result is read.
func (t *PgxTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if t.skip(ctx) {
		return ctx
	}
	attrs := connAttrs(configOf(conn))
	if data.Batch != nil {
		attrs = append(attrs, semconv.DBOperationBatchSize(data.Batch.Len()))
	}
	ctx, _ = t.tracer.Start(ctx, "BATCH", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, semconv.DBOperationName("BATCH"))...))
	return ctx
}

// TraceBatchQuery records one statement of the batch, from when pgx began
// reading its result.
func (t *PgxTracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if t.skip(ctx) {
		return
	}
	name, attrs := statementAttrs(conn, data.SQL)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}
	if !data.ReadStartTime.IsZero() {
		opts = append(opts, trace.WithTimestamp(data.ReadStartTime))
	}
	_, span := t.tracer.Start(ctx, name, opts...)
	end(span, data.CommandTag, data.Err, trace.WithTimestamp(time.Now()))
}

// TraceBatchEnd ends the batch's span.
func (t *PgxTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	end(trace.SpanFromContext(ctx), pgconn.CommandTag{}, data.Err)
}

// TraceCopyFromStart starts the span of a COPY FROM, naming the table and
// columns (COPY has no statement text of its own in pgx).
func (t *PgxTracer) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	if t.skip(ctx) {
		return ctx
	}
	table := data.TableName.Sanitize()
	attrs := append(connAttrs(configOf(conn)),
		semconv.DBOperationName("COPY"),
		semconv.DBCollectionName(table),
		semconv.DBQueryText(truncate("COPY "+table+" ("+quoteColumns(data.ColumnNames)+") FROM STDIN", MaxQueryTextBytes)))
	ctx, _ = t.tracer.Start(ctx, "COPY "+table, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx
}

// TraceCopyFromEnd ends it.
func (t *PgxTracer) TraceCopyFromEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceCopyFromEndData) {
	end(trace.SpanFromContext(ctx), data.CommandTag, data.Err)
}

func quoteColumns(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(q, ", ")
}

// TraceConnectStart starts the span of opening a connection.
func (t *PgxTracer) TraceConnectStart(ctx context.Context, data pgx.TraceConnectStartData) context.Context {
	if t.skip(ctx) {
		return ctx
	}
	ctx, _ = t.tracer.Start(ctx, "connect", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(connAttrs(data.ConnConfig)...))
	return ctx
}

// TraceConnectEnd ends it. A connection error carries no arguments, so its
// text is recorded.
func (t *PgxTracer) TraceConnectEnd(ctx context.Context, data pgx.TraceConnectEndData) {
	span := trace.SpanFromContext(ctx)
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, data.Err.Error())
	}
	span.End()
}
