package bench

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/handlers"
)

// The limit of the small-event figures is "the very SQL idem issues per
// event, run by a plain pgx loop". Rather than a hand-written copy that goes
// stale when the handler changes, the harness records the round trips idem's
// handler makes for one sample event, through recDB, and replays them with the
// partition, run_id and audit id of each new event.

// trip is one round trip to the server: one statement, or one pipelined
// batch of them.
type trip struct {
	batch bool
	stmts []*stmt
}

type stmt struct {
	sql   string
	args  []any
	query bool // sent with Query/QueryRow (rows expected), else Exec
	// scanned holds the values the handler scanned from the first row.
	scanned []any
}

// recorder collects trips while on.
type recorder struct {
	mu    sync.Mutex
	on    bool
	trips []*trip
}

func (r *recorder) add(t *trip) *trip {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.trips = append(r.trips, t)
	}
	return t
}

func (r *recorder) one(sql string, args []any, query bool) *stmt {
	s := &stmt{sql: sql, args: args, query: query}
	r.add(&trip{stmts: []*stmt{s}})
	return s
}

// recDB wraps the pool handed to idem's handler. It carries every method a
// handler could reasonably use, so the wrapper keeps compiling when
// handlers.DB grows. What runs on a connection the handler holds (Acquire)
// is recorded by a tracer on a pool of its own, set up as the pool is.
type recDB struct {
	pool   *pgxpool.Pool
	rec    *recorder
	traced *pgxpool.Pool
}

// newRecDB returns a recDB over pool; close it with closeTraced.
func newRecDB(ctx context.Context, pool *pgxpool.Pool, rec *recorder) (*recDB, error) {
	cfg := pool.Config()
	cfg.MaxConns = 2
	cfg.ConnConfig.Tracer = &recTracer{rec: rec}
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &recDB{pool: pool, rec: rec, traced: traced}, nil
}

func (d *recDB) closeTraced() { d.traced.Close() }

func (d *recDB) Acquire(ctx context.Context) (*pgxpool.Conn, error) { return d.traced.Acquire(ctx) }

// recTracer records the statements sent on a held connection: a batch as
// one trip, any other statement as a trip of its own. It sees no result
// values; the template finds the audit id by its column's name.
type recTracer struct {
	rec *recorder
	cur *trip
}

func (t *recTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	t.rec.one(data.SQL, data.Args, true)
	return ctx
}

func (t *recTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *recTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.cur = t.rec.add(&trip{batch: true})
	return ctx
}

func (t *recTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if t.cur != nil {
		t.rec.mu.Lock()
		t.cur.stmts = append(t.cur.stmts, &stmt{sql: data.SQL, args: data.Args, query: true})
		t.rec.mu.Unlock()
	}
}

func (t *recTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) { t.cur = nil }

var _ handlers.DB = (*recDB)(nil)

func (d *recDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	d.rec.one("begin", nil, false)
	return &recTx{Tx: tx, rec: d.rec}, nil
}

func (d *recDB) BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error) {
	tx, err := d.pool.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	d.rec.one("begin", nil, false)
	return &recTx{Tx: tx, rec: d.rec}, nil
}

func (d *recDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	d.rec.one(sql, args, false)
	return d.pool.Exec(ctx, sql, args...)
}

func (d *recDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	s := d.rec.one(sql, args, true)
	rows, err := d.pool.Query(ctx, sql, args...)
	return &recRows{Rows: rows, s: s}, err
}

func (d *recDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	s := d.rec.one(sql, args, true)
	return &recRow{Row: d.pool.QueryRow(ctx, sql, args...), s: s}
}

func (d *recDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return recordBatch(d.rec, b, func(b *pgx.Batch) pgx.BatchResults { return d.pool.SendBatch(ctx, b) })
}

func (d *recDB) CopyFrom(ctx context.Context, t pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	d.rec.one("-- COPY "+t.Sanitize()+" (not replayed)", nil, false)
	return d.pool.CopyFrom(ctx, t, cols, src)
}

// recTx records what runs inside a transaction.
type recTx struct {
	pgx.Tx
	rec    *recorder
	nested bool
}

func (t *recTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	t.rec.one("savepoint sp", nil, false)
	return &recTx{Tx: tx, rec: t.rec, nested: true}, nil
}

func (t *recTx) Commit(ctx context.Context) error {
	if t.nested {
		t.rec.one("release savepoint sp", nil, false)
	} else {
		t.rec.one("commit", nil, false)
	}
	return t.Tx.Commit(ctx)
}

func (t *recTx) Rollback(ctx context.Context) error {
	// pgx rolls back after a commit as a no-op; record only real ones.
	err := t.Tx.Rollback(ctx)
	if err == nil {
		if t.nested {
			t.rec.one("rollback to savepoint sp", nil, false)
		} else {
			t.rec.one("rollback", nil, false)
		}
	}
	return err
}

func (t *recTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t.rec.one(sql, args, false)
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *recTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	s := t.rec.one(sql, args, true)
	rows, err := t.Tx.Query(ctx, sql, args...)
	return &recRows{Rows: rows, s: s}, err
}

func (t *recTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	s := t.rec.one(sql, args, true)
	return &recRow{Row: t.Tx.QueryRow(ctx, sql, args...), s: s}
}

func (t *recTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return recordBatch(t.rec, b, func(b *pgx.Batch) pgx.BatchResults { return t.Tx.SendBatch(ctx, b) })
}

func (t *recTx) CopyFrom(ctx context.Context, id pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	t.rec.one("-- COPY "+id.Sanitize()+" (not replayed)", nil, false)
	return t.Tx.CopyFrom(ctx, id, cols, src)
}

// recordBatch records a pipelined batch as one trip, and what the handler
// scans from its results, whether it reads them directly or through the
// queued queries' callbacks.
func recordBatch(rec *recorder, b *pgx.Batch, send func(*pgx.Batch) pgx.BatchResults) pgx.BatchResults {
	tr := &trip{batch: true}
	for _, qq := range b.QueuedQueries {
		s := &stmt{sql: qq.SQL, args: qq.Arguments, query: true}
		tr.stmts = append(tr.stmts, s)
		if qq.Fn != nil {
			fn := qq.Fn
			qq.Fn = func(br pgx.BatchResults) error { return fn(&recBatchAt{BatchResults: br, s: s}) }
		}
	}
	rec.add(tr)
	return &recBatch{BatchResults: send(b), tr: tr}
}

// recBatch maps direct reads of batch results to the queued statements, in order.
type recBatch struct {
	pgx.BatchResults
	tr *trip
	i  int
}

func (b *recBatch) next() *stmt {
	if b.i < len(b.tr.stmts) {
		b.i++
		return b.tr.stmts[b.i-1]
	}
	return &stmt{}
}

func (b *recBatch) Exec() (pgconn.CommandTag, error) { b.next(); return b.BatchResults.Exec() }
func (b *recBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	return &recRows{Rows: rows, s: b.next()}, err
}
func (b *recBatch) QueryRow() pgx.Row { return &recRow{Row: b.BatchResults.QueryRow(), s: b.next()} }

// recBatchAt is the results a queued query's callback sees.
type recBatchAt struct {
	pgx.BatchResults
	s *stmt
}

func (b *recBatchAt) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	return &recRows{Rows: rows, s: b.s}, err
}
func (b *recBatchAt) QueryRow() pgx.Row { return &recRow{Row: b.BatchResults.QueryRow(), s: b.s} }

type recRow struct {
	pgx.Row
	s *stmt
}

func (r *recRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if err == nil {
		r.s.scanned = derefAll(dest)
	}
	return err
}

type recRows struct {
	pgx.Rows
	s    *stmt
	seen bool
}

func (r *recRows) Scan(dest ...any) error {
	err := r.Rows.Scan(dest...)
	if err == nil && !r.seen {
		r.seen = true
		r.s.scanned = derefAll(dest)
	}
	return err
}

func derefAll(dest []any) []any {
	out := make([]any, len(dest))
	for i, d := range dest {
		v := reflect.ValueOf(d)
		for v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		if v.IsValid() && v.CanInterface() {
			out[i] = v.Interface()
		}
	}
	return out
}

// template is a recorded event, ready to replay with other values.
type template struct {
	trips []*trip
	// The sample event's values, replaced in every argument.
	partition, run string
	date           time.Time
	auditID        int64
	// Where the audit id comes back: trip, statement, column; trip -1 when
	// the handler never read it back (then nothing is rebound).
	idTrip, idStmt, idCol int
}

// newTemplate builds a template from the trips of one handled event whose
// audit row is auditID.
func newTemplate(trips []*trip, partition, run string, date time.Time, auditID int64) *template {
	t := &template{trips: trips, partition: partition, run: run, date: date, auditID: auditID, idTrip: -1}
	if auditID == 0 {
		return t
	}
	for i, tr := range trips {
		for j, s := range tr.stmts {
			for k, v := range s.scanned {
				if n, ok := v.(int64); ok && n == auditID {
					t.idTrip, t.idStmt, t.idCol = i, j, k
					return t
				}
			}
		}
	}
	// Traced trips carry no results: the statement that inserts the audit
	// row returns its id in a column named id.
	for i, tr := range trips {
		for j, s := range tr.stmts {
			if strings.Contains(s.sql, "INSERT INTO idem.pipeline_audit") {
				t.idTrip, t.idStmt, t.idCol = i, j, -1
				return t
			}
		}
	}
	return t
}

// usesAuditID reports whether an argument of the template is the audit id.
func (t *template) usesAuditID() bool {
	var has func(v any) bool
	has = func(v any) bool {
		switch x := v.(type) {
		case int64:
			return x == t.auditID
		case *int64:
			return x != nil && *x == t.auditID
		case pgx.NamedArgs:
			for _, a := range x {
				if has(a) {
					return true
				}
			}
		case pgx.StrictNamedArgs:
			for _, a := range x {
				if has(a) {
					return true
				}
			}
		}
		return false
	}
	for _, tr := range t.trips {
		for _, s := range tr.stmts {
			for _, a := range s.args {
				if t.auditID != 0 && has(a) {
					return true
				}
			}
		}
	}
	return false
}

type binding struct {
	partition, run string
	date           time.Time
	id             int64
}

// bind replaces the sample event's values inside one argument.
func (t *template) bind(v any, b binding) any {
	switch x := v.(type) {
	case string:
		if b.run != "" {
			x = strings.ReplaceAll(x, t.run, b.run)
		}
		if b.partition != "" {
			x = strings.ReplaceAll(x, t.partition, b.partition)
		}
		return x
	case pgx.NamedArgs:
		out := make(pgx.NamedArgs, len(x))
		for k, a := range x {
			out[k] = t.bind(a, b)
		}
		return out
	case pgx.StrictNamedArgs:
		out := make(pgx.StrictNamedArgs, len(x))
		for k, a := range x {
			out[k] = t.bind(a, b)
		}
		return out
	case time.Time:
		if !b.date.IsZero() && x.Equal(t.date) {
			return b.date
		}
	case *time.Time:
		if x != nil && !b.date.IsZero() && x.Equal(t.date) {
			d := b.date
			return &d
		}
	case int64:
		if t.auditID != 0 && x == t.auditID && b.id != 0 {
			return b.id
		}
	case *int64:
		if x != nil && t.auditID != 0 && *x == t.auditID && b.id != 0 {
			id := b.id
			return &id
		}
	}
	return v
}

func (t *template) args(s *stmt, b binding) []any {
	out := make([]any, len(s.args))
	for i, a := range s.args {
		out[i] = t.bind(a, b)
	}
	return out
}

// tripTimes accumulates the time spent in each trip, from any worker.
type tripTimes struct {
	mu sync.Mutex
	d  []time.Duration
}

func (tt *tripTimes) add(local []time.Duration) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	for i, d := range local {
		tt.d[i] += d
	}
}

// replay runs the template for one event on conn; spent, when not nil,
// accumulates the time of each trip.
func (t *template) replay(ctx context.Context, conn *pgx.Conn, partition, run string, date time.Time, spent *tripTimes) error {
	b := binding{partition: partition, run: run, date: date}
	var local []time.Duration
	if spent != nil {
		local = make([]time.Duration, len(t.trips))
		defer spent.add(local)
	}
	for i, tr := range t.trips {
		start := time.Now()
		if tr.batch {
			batch := &pgx.Batch{}
			for _, s := range tr.stmts {
				batch.Queue(s.sql, t.args(s, b)...)
			}
			br := conn.SendBatch(ctx, batch)
			for j := range tr.stmts {
				rows, _ := br.Query()
				if err := t.drain(rows, i, j, &b); err != nil {
					br.Close()
					return fmt.Errorf("replay trip %d.%d: %w", i, j, err)
				}
			}
			if err := br.Close(); err != nil {
				return fmt.Errorf("replay trip %d: %w", i, err)
			}
		} else {
			s := tr.stmts[0]
			if strings.HasPrefix(s.sql, "-- COPY") {
				continue
			}
			if s.query {
				rows, err := conn.Query(ctx, s.sql, t.args(s, b)...)
				if err == nil {
					err = t.drain(rows, i, 0, &b)
				}
				if err != nil {
					return fmt.Errorf("replay trip %d (%s): %w", i, abbrev(s.sql), err)
				}
			} else if _, err := conn.Exec(ctx, s.sql, t.args(s, b)...); err != nil {
				return fmt.Errorf("replay trip %d (%s): %w", i, abbrev(s.sql), err)
			}
		}
		if local != nil {
			local[i] += time.Since(start)
		}
	}
	return nil
}

// drain reads a statement's rows, keeping the audit id when it is the one.
func (t *template) drain(rows pgx.Rows, trip, st int, b *binding) error {
	defer rows.Close()
	first := true
	for rows.Next() {
		if first && trip == t.idTrip && st == t.idStmt {
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			col := t.idCol
			if col < 0 {
				for k, f := range rows.FieldDescriptions() {
					if f.Name == "id" {
						col = k
					}
				}
			}
			if col >= 0 && col < len(vals) {
				if n, ok := vals[col].(int64); ok {
					b.id = n
				}
			}
		}
		first = false
	}
	return rows.Err()
}

// describe lists the template's trips for the report.
func (t *template) describe() []Step {
	out := make([]Step, len(t.trips))
	for i, tr := range t.trips {
		kind := "exec"
		sql := abbrev(tr.stmts[0].sql)
		switch {
		case tr.batch:
			kind = fmt.Sprintf("batch of %d", len(tr.stmts))
			parts := make([]string, len(tr.stmts))
			for j, s := range tr.stmts {
				parts[j] = abbrev(s.sql)
			}
			sql = strings.Join(parts, " | ")
		case tr.stmts[0].query:
			kind = "query"
		}
		out[i] = Step{Index: i + 1, Kind: kind, SQL: sql}
	}
	return out
}

// abbrev is a statement on one line, cut to a readable length.
func abbrev(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	if len(s) > 90 {
		s = s[:87] + "..."
	}
	return s
}
