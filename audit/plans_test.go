package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

// planStatement is one statement idem runs per event or per group, as its
// Queue function queues it, and the indexes its plan must use.
type planStatement struct {
	name string
	sql  string
	args []any
	// uses are index names the plan must name; avoid, ones it must not.
	uses, avoid []string
	// from is the size from which the plan must hold: 0 for a statement
	// whose shape holds at any size; the relay's claim and marks, which
	// join a batch of rows to the outbox, read a small outbox whole and
	// rely on the service preparing them again as it grows
	// (internal/service's plan ages).
	from int
	// custom: the statement is planned at each execution for its values
	// (force_custom_plan around it), so its plan is checked as such.
	custom bool
}

// perEventStatements are the audit statements of one load, one group and
// one skipped duplicate, each queued by the function the handler calls,
// about partitions the seeded history holds (p-<n>) and new ones.
func perEventStatements(t *testing.T) []planStatement {
	t.Helper()
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	attempt := func(part string, force bool, seq uint64) Attempt {
		return Attempt{RunKey: RunKey{Pipeline: "plans", Dataset: "orders", Partition: part, RunID: "r-new"},
			LogicalDate: &day, StreamSeq: seq, Force: force, Attributes: map[string]string{"a": "b"}}
	}
	var out []planStatement
	add := func(name string, b *pgx.Batch, uses, avoid []string) {
		t.Helper()
		require.NotEmpty(t, b.QueuedQueries, name)
		custom := false
		for i, q := range b.QueuedQueries {
			n := name
			if len(b.QueuedQueries) > 1 {
				n = fmt.Sprintf("%s/%d", name, i)
			}
			if strings.HasPrefix(q.SQL, "SET LOCAL plan_cache_mode") {
				custom = strings.Contains(q.SQL, "force_custom_plan")
				continue
			}
			s := planStatement{name: n, sql: q.SQL, args: q.Arguments, uses: uses, avoid: avoid, custom: custom}
			if custom {
				// A table of a few pages is read whole, as it should be.
				s.from = 10000
			}
			out = append(out, s)
		}
	}
	const (
		partIdx   = "pipeline_audit_partition_idx"
		dateIdx   = "pipeline_audit_date_idx"
		ledgerPK  = "run_ledger_pkey"
		auditPK   = "pipeline_audit_pkey"
		resultIdx = "outbox_result"
	)
	lookups := []string{partIdx, ledgerPK}
	for _, force := range []bool{false, true} {
		for _, result := range [][]byte{nil, []byte(`{"status":"skipped"}`)} {
			b := &pgx.Batch{}
			var into Begun
			var ran bool
			QueueBegin(b, attempt("p-7", force, 77), 5, result, &into, &ran)
			uses := []string{partIdx}
			if !force {
				uses = lookups
			}
			add(fmt.Sprintf("begin force=%v result=%v", force, result != nil), b, uses, []string{dateIdx})
		}
	}
	{
		b := &pgx.Batch{}
		var gs []GroupBegin
		for i := range 8 {
			gs = append(gs, GroupBegin{Attempt: attempt(fmt.Sprintf("p-%d", 10+i), i == 3, uint64(100+i)), Budget: 5,
				SkipResult: []byte(`{"status":"skipped"}`), Into: new(Begun)})
		}
		var ran bool
		require.NoError(t, QueueBeginGroup(b, gs, &ran))
		add("begin group", b, lookups, []string{dateIdx})
		b = &pgx.Batch{}
		require.NoError(t, QueueSkipDone(b, gs, &ran))
		add("skip done", b, lookups, []string{dateIdx})
	}
	{
		// A partition's retraction: its latest success found through the
		// partition's index, never by reading the audit back from its
		// newest row.
		b := &pgx.Batch{}
		var why string
		QueueRetracted(b, attempt("p-7", false, 0).RunKey, &why)
		add("retracted", b, []string{partIdx}, []string{auditPK})
	}
	{
		b := &pgx.Batch{}
		var done bool
		QueueLookupRun(b, attempt("p-7", false, 0).RunKey, &done)
		add("lookup run", b, []string{ledgerPK}, nil)
		b = &pgx.Batch{}
		QueueLookupMessage(b, attempt("p-7", true, 77).RunKey, 77, &done)
		add("lookup message", b, []string{partIdx}, []string{dateIdx})
	}
	{
		b := &pgx.Batch{}
		var ls []RunLookup
		for i := range 8 {
			ls = append(ls, RunLookup{RunKey: attempt(fmt.Sprintf("p-%d", 10+i), false, 0).RunKey, Force: i == 3,
				Seq: uint64(100 + i), Done: new(bool)})
		}
		require.NoError(t, QueueLookupRuns(b, ls))
		add("lookup runs", b, lookups, []string{dateIdx})
	}
	{
		b := &pgx.Batch{}
		require.NoError(t, QueueMarkSucceeded(b, []Success{{RunKey: attempt("p-7", false, 0).RunKey, ID: 4242, Rows: Rows{Inserted: 10}}}))
		add("mark succeeded", b, []string{auditPK}, nil)
		b = &pgx.Batch{}
		QueueSkip(b, 4242)
		add("skip", b, []string{auditPK}, nil)
	}
	for _, force := range []bool{false, true} {
		b := &pgx.Batch{}
		var ss []Success
		for i := range 8 {
			ss = append(ss, Success{RunKey: attempt(fmt.Sprintf("p-%d", 10+i), force, 0).RunKey, ID: int64(4000 + i),
				Rows: Rows{Inserted: 10}, Force: force, Result: []byte(`{"status":"loaded"}`)})
		}
		require.NoError(t, QueueMarkSucceeded(b, ss))
		add(fmt.Sprintf("mark succeeded group force=%v", force), b, []string{auditPK}, nil)
	}
	{
		b := &pgx.Batch{}
		QueueEnqueueResult(b, attempt("p-7", false, 0).RunKey, 4242, []byte(`{"status":"skipped"}`), true)
		add("skip result", b, []string{ledgerPK, auditPK}, nil)
	}
	// Not per event, but read over the whole history of a dataset
	// (`idem audit outdated`, the reload of outdated partitions): one
	// partition at a time, by the partition index.
	{
		rec := &recorder{}
		_, err := LatestSuccesses(context.Background(), rec, "plans", "orders", "p-10", "p-20")
		require.ErrorIs(t, err, errRecorded)
		out = append(out, planStatement{name: "latest successes", sql: rec.sql, args: rec.args, uses: []string{partIdx}, avoid: []string{dateIdx}})
	}
	// Not per event, but asked by every watch at each pass: the newest
	// partitions' latest success, its files and latest attempt, each
	// through the partition's index.
	{
		rec := &recorder{}
		_, err := LastLoadedListings(context.Background(), rec, "plans", "orders", []string{"p-7", "p-10", "p-new"})
		require.ErrorIs(t, err, errRecorded)
		out = append(out, planStatement{name: "loaded listings", sql: rec.sql, args: rec.args, uses: []string{partIdx}, avoid: []string{dateIdx}})
	}
	// The relay's claim and its marks, per batch of results published.
	for _, run := range []func(q Querier) error{
		func(q Querier) error { _, err := ClaimOutbox(context.Background(), q, 64, time.Minute); return err },
		func(q Querier) error {
			return MarkOutboxSent(context.Background(), q, []OutboxSent{{ID: 1, StreamSeq: 2}, {ID: 3, StreamSeq: 4}})
		},
		func(q Querier) error {
			return MarkOutboxFailed(context.Background(), q, day, []OutboxFailed{{ID: 1, Err: errors.New("x"), RetryIn: time.Second}})
		},
	} {
		rec := &recorder{}
		require.ErrorIs(t, run(rec), errRecorded)
		out = append(out, planStatement{name: "relay: " + firstLine(rec.sql), sql: rec.sql, args: rec.args,
			uses: []string{"outbox_pkey"}, from: 10000})
	}
	return out
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i > 0 {
		return s[:i]
	}
	return s
}

var errRecorded = errors.New("recorded")

// recorder is a Querier that keeps the statement it is given, to explain
// it; it runs nothing.
type recorder struct {
	sql  string
	args []any
}

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.sql, r.args = sql, args
	return pgconn.CommandTag{}, errRecorded
}

func (r *recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.sql, r.args = sql, args
	return nil, errRecorded
}

func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.sql, r.args = sql, args
	return errRow{}
}

type errRow struct{}

func (errRow) Scan(...any) error { return errRecorded }

// literal renders a queued argument as an SQL literal for EXPLAIN EXECUTE.
func literal(t *testing.T, v any) string {
	t.Helper()
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	switch v := v.(type) {
	case nil:
		return "NULL"
	case string:
		return quote(v)
	case []byte:
		return quote(string(v))
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case *int64:
		if v == nil {
			return "NULL"
		}
		return strconv.FormatInt(*v, 10)
	case *string:
		if v == nil {
			return "NULL"
		}
		return quote(*v)
	case []int64:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = strconv.FormatInt(x, 10)
		}
		return quote("{" + strings.Join(parts, ",") + "}")
	case []string:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = strconv.Quote(x)
		}
		return quote("{" + strings.Join(parts, ",") + "}")
	case time.Time:
		return quote(v.Format(time.RFC3339Nano))
	case *time.Time:
		if v == nil {
			return "NULL"
		}
		return quote(v.Format(time.DateOnly))
	case map[string]string:
		if v == nil {
			return "NULL"
		}
		var parts []string
		for k, x := range v {
			parts = append(parts, strconv.Quote(k)+":"+strconv.Quote(x))
		}
		return quote("{" + strings.Join(parts, ",") + "}")
	}
	t.Fatalf("literal: unsupported argument %T", v)
	return ""
}

var seqScanOnIdem = regexp.MustCompile(`Seq Scan on (pipeline_audit|run_ledger|outbox|check_results)\b`)

// genericPlan is the plan the server keeps for a prepared statement once
// it stops planning each execution: what a connection runs for as long as
// the statement stays prepared.
func genericPlan(ctx context.Context, t *testing.T, c *pgxpool.Conn, s planStatement) string {
	t.Helper()
	args := make([]string, len(s.args))
	for i, a := range s.args {
		args[i] = literal(t, a)
	}
	tx, err := c.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "PREPARE plan_check AS "+s.sql)
	require.NoError(t, err, s.name)
	mode := "force_generic_plan"
	if s.custom {
		mode = "force_custom_plan"
	}
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	q := "EXPLAIN (COSTS OFF) EXECUTE plan_check"
	if len(args) > 0 {
		q += "(" + strings.Join(args, ", ") + ")"
	}
	rows, err := tx.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err, s.name)
	var lines []string
	for rows.Next() {
		var l string
		require.NoError(t, rows.Scan(&l))
		lines = append(lines, l)
	}
	require.NoError(t, rows.Err())
	_, err = c.Exec(ctx, "DEALLOCATE ALL")
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// seedPlans adds n attempts of the queried dataset to the audit (five per
// partition, as a history of retries and reruns makes them), their ledger
// entries and results.
func seedPlans(ctx context.Context, t *testing.T, pool *pgxpool.Pool, from, n int) {
	t.Helper()
	_, err := pool.Exec(ctx, `
		WITH a AS (
		  INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt,
		                                   stream_seq, started_at, finished_at, row_count)
		  SELECT 'plans', 'orders', date '2000-01-01' + g / 5, 'p-' || g / 5, 'r-' || g % 5,
		         CASE WHEN g % 5 = 4 THEN 'started' ELSE 'success' END, 1, g,
		         now(), CASE WHEN g % 5 = 4 THEN NULL ELSE now() END, 10
		    FROM generate_series($1::int, $2::int - 1) g
		  RETURNING id, partition_key, run_id, status),
		l AS (
		  INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id)
		  SELECT 'plans', 'orders', partition_key, run_id, id FROM a WHERE status = 'success')
		INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, result)
		SELECT 'orders', partition_key, run_id, id, '{}' FROM a WHERE status = 'success'`, from, from+n)
	require.NoError(t, err)
	// The relay sent all but the newest.
	_, err = pool.Exec(ctx, `UPDATE idem.outbox SET sent_at = now() WHERE sent_at IS NULL AND audit_id < $1`, from+n-20)
	require.NoError(t, err)
}

// TestPerEventPlansUseTheirIndexes checks the plan every per-event and
// per-group audit statement keeps once prepared, at each state a young
// installation passes through: the tables as migrate leaves them, then
// 1k and 100k attempts, each unanalyzed, analyzed, and analyzed when the
// tables were a tenth of that size. A plan made while a table was small
// is kept while it grows, so each must take its index whatever the size
// and statistics it was planned with.
func TestPerEventPlansUseTheirIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	_, err := Migrate(ctx, db.Pool)
	require.NoError(t, err)
	// migrate leaves empty tables unanalyzed: planned as ten pages at
	// least, not as empty.
	require.Negative(t, db.Int(t, "SELECT reltuples::bigint FROM pg_class WHERE oid = 'idem.pipeline_audit'::regclass"))
	// Only this test decides when the tables are analyzed.
	for _, tbl := range []string{"pipeline_audit", "run_ledger", "outbox"} {
		db.Exec(t, "ALTER TABLE idem."+tbl+" SET (autovacuum_enabled = false)")
	}
	// Statistics from every row, not ANALYZE's random sample of 30,000:
	// the same plans on every run (a sample of the 100k outbox rows once
	// tipped the relay's UPDATE onto outbox_due).
	analyze := func() {
		db.Exec(t, `BEGIN; SET LOCAL default_statistics_target = 1000;
			ANALYZE idem.pipeline_audit, idem.run_ledger, idem.outbox; COMMIT`)
	}
	c, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	stmts := perEventStatements(t)
	check := func(state string, rows int) {
		t.Helper()
		for _, s := range stmts {
			if rows < s.from {
				continue
			}
			plan := genericPlan(ctx, t, c, s)
			if os.Getenv("IDEM_PLANS_VERBOSE") != "" {
				t.Logf("%s: %s\n%s", state, s.name, plan)
			}
			if m := seqScanOnIdem.FindString(plan); m != "" {
				t.Errorf("%s: %s: its plan reads a whole table (%s):\n%s", state, s.name, m, plan)
			}
			for _, idx := range s.uses {
				if !strings.Contains(plan, idx) {
					t.Errorf("%s: %s: its plan does not use %s:\n%s", state, s.name, idx, plan)
				}
			}
			for _, idx := range s.avoid {
				if strings.Contains(plan, idx) {
					t.Errorf("%s: %s: its plan uses %s:\n%s", state, s.name, idx, plan)
				}
			}
		}
	}
	check("0 rows, as migrate leaves them", 0)
	seedPlans(ctx, t, db.Pool, 0, 100)
	analyze()
	seedPlans(ctx, t, db.Pool, 100, 900)
	check("1k rows, analyzed at 100", 1000)
	analyze()
	check("1k rows, analyzed", 1000)
	seedPlans(ctx, t, db.Pool, 1000, 9000)
	check("10k rows, analyzed at 1k", 10000)
	seedPlans(ctx, t, db.Pool, 10000, 90000)
	analyze()
	check("100k rows, analyzed", 100000)
}

// TestPerEventPlansUnanalyzed checks the same plans on tables that grew to
// 1k and 100k attempts without ever being analyzed (autovacuum off, or
// not yet come round).
//
// Without statistics, a seek on pipeline_audit_partition_idx and one on
// pipeline_audit_date_idx, several times smaller (deduplicated), cost
// within the planner's 1% fuzz at 100k rows (the start of an attempt:
// 17.01 against 16.90, measured), so either may win, for every statement
// that reads a partition's attempts: both seek the pipeline and dataset,
// neither reads the table whole. Only a table autovacuum never reaches
// stays so (idem migrate analyses the ones that hold rows); analysed, each
// takes the partition's index at every size
// (TestPerEventPlansUseTheirIndexes).
func TestPerEventPlansUnanalyzed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, f := range unanalyzedPlanFaults(ctx, t, perEventStatements(t)) {
		t.Error(f)
	}
}

// unanalyzedPlanFaults grows a never-analyzed database to 1k and 100k
// attempts and returns every plan of stmts that reads a whole table or
// misses its index.
func unanalyzedPlanFaults(ctx context.Context, t *testing.T, stmts []planStatement) []string {
	db := unanalyzedDB(ctx, t, "pipeline_audit", "run_ledger", "outbox")
	c, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	var out []string
	for _, n := range []int{1000, 100000} {
		have := int(db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"))
		seedPlans(ctx, t, db.Pool, have, n-have)
		for _, s := range stmts {
			if n < s.from {
				continue
			}
			plan := genericPlan(ctx, t, c, s)
			if m := seqScanOnIdem.FindString(plan); m != "" {
				out = append(out, fmt.Sprintf("%d rows, never analyzed: %s: its plan reads a whole table (%s):\n%s", n, s.name, m, plan))
			}
			for _, idx := range s.uses {
				if idx == "pipeline_audit_partition_idx" && n >= 100000 && strings.Contains(plan, "pipeline_audit_date_idx") {
					continue // the planner's coin at this size, without statistics
				}
				if !strings.Contains(plan, idx) {
					out = append(out, fmt.Sprintf("%d rows, never analyzed: %s: its plan does not use %s:\n%s", n, s.name, idx, plan))
				}
			}
		}
	}
	return out
}

// unanalyzedDB is a migrated database whose tables have never been
// analyzed or vacuumed, with autovacuum off for them. Autovacuum may reach
// a table between the migration that creates it and the ALTER that turns
// it off (seen under load: the planner then had statistics of an empty
// table); such a database is dropped and made again, so the plans read
// are those of a table the planner knows nothing about.
func unanalyzedDB(ctx context.Context, t *testing.T, tables ...string) *pgtest.DB {
	t.Helper()
	for try := 1; ; try++ {
		db := pgtest.NewDB(t)
		_, err := Migrate(ctx, db.Pool)
		require.NoError(t, err)
		for _, tbl := range tables {
			db.Exec(t, "ALTER TABLE idem."+tbl+" SET (autovacuum_enabled = false)")
		}
		var touched []string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(c.relname::text), '{}') FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'idem' AND c.relname = ANY($1) AND c.reltuples >= 0`, tables).Scan(&touched))
		if len(touched) == 0 {
			return db
		}
		if try == 5 {
			t.Fatalf("autovacuum analyzed %v before it could be turned off, %d times in a row", touched, try)
		}
		t.Logf("autovacuum analyzed %v before it could be turned off: a new database", touched)
	}
}
