package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const bigBase = "2030-01-01"

// big is phase (c) for one partition size. Staging holds six dates D0..D5 of
// Rows rows; targets hold D0..D3, so every table has four partitions; D4 and
// D5 feed the floors and the merges.
type big struct {
	*env
	proc *idemProc
	conn *pgx.Conn
	rows int
	l    string
	out  *BigSize
	seq  int
}

func bigDatasets(l string) []dataset {
	src := "SELECT " + rowCols + " FROM bench.src_" + l + " WHERE event_date = @partition"
	return []dataset{
		{Name: "plain_" + l, Strategy: "delete_insert", Target: "bench.plain_" + l, PartitionColumn: "event_date", Source: src},
		{Name: "part_" + l, Strategy: "delete_insert", Target: "bench.part_" + l, PartitionColumn: "event_date", Source: src},
		{Name: "merge_" + l, Strategy: "merge", Target: "bench.merge_" + l, Key: []string{"order_id"},
			Source: "SELECT " + rowCols + " FROM bench.mstage_" + l + " WHERE event_date = @partition"},
		{Name: "app_" + l, Strategy: "append_dedupe", Target: "bench.app_" + l, Key: []string{"order_id"},
			PartitionColumn: "event_date", View: "bench.app_" + l + "_v", Source: src},
	}
}

func (b *big) d(i int) string { return dayKey(bigBase, i) }

// insertSQL copies date d of the staging table into t.
func (b *big) insertSQL(t string, d int) string {
	return "INSERT INTO " + t + " (" + rowCols + ") SELECT " + rowCols + " FROM bench.src_" + b.l + " WHERE event_date = '" + b.d(d) + "'"
}

func (e *env) setupBig(ctx context.Context, rows int) error {
	l := labelRows(rows)
	b := &big{env: e, rows: rows, l: l}
	e.logf("big %s: staging 6 x %d rows, four targets of 4 partitions", l, rows)
	noAV := " WITH (autovacuum_enabled = off)"
	pkDDL := strings.TrimSuffix(rowDDL, ")") + ", PRIMARY KEY (order_id))"
	appDDL := strings.TrimSuffix(rowDDL, ")") + ", run_id text, load_seq bigint)"
	sqls := []string{
		"CREATE TABLE bench.src_" + l + " " + rowDDL,
		"INSERT INTO bench.src_" + l + " " + rowsSQL(bigBase, 0, 6, rows),
		"CREATE INDEX ON bench.src_" + l + " (event_date)",
		"CREATE TABLE bench.plain_" + l + " " + rowDDL + noAV,
		"CREATE INDEX ON bench.plain_" + l + " (event_date)",
		"CREATE TABLE bench.part_" + l + " " + rowDDL + " PARTITION BY RANGE (event_date)",
	}
	for d := range 4 {
		sqls = append(sqls, fmt.Sprintf("CREATE TABLE bench.part_%s_d%d PARTITION OF bench.part_%s FOR VALUES FROM ('%s') TO ('%s')%s",
			l, d, l, b.d(d), b.d(d+1), noAV))
	}
	sqls = append(sqls,
		"CREATE TABLE bench.mstage_"+l+" "+rowDDL,
		"INSERT INTO bench.mstage_"+l+" SELECT * FROM bench.src_"+l+" WHERE event_date >= '"+b.d(4)+"'",
		"CREATE INDEX ON bench.mstage_"+l+" (event_date)",
		"CREATE TABLE bench.merge_"+l+" "+pkDDL+noAV,
		"CREATE TABLE bench.app_"+l+" "+appDDL+noAV,
	)
	for d := range 4 {
		sqls = append(sqls, b.insertSQL("bench.plain_"+l, d), b.insertSQL("bench.part_"+l, d), b.insertSQL("bench.merge_"+l, d))
	}
	sqls = append(sqls, "VACUUM ANALYZE bench.src_"+l+", bench.plain_"+l+", bench.part_"+l+", bench.mstage_"+l+", bench.merge_"+l+", bench.app_"+l)
	return e.exec(ctx, sqls...)
}

// warmDay is a 10-row partition of a staging table rerunTables makes: a
// dataset's first load in a process (its one-time setup) loads it, untimed.
const warmDay = 9

// rerunTables creates the tables of big loads that rerun one partition: a
// staging table src of one partition of rows rows (day 0) and the 10-row
// warmDay, and a plain target t of four partitions of rows rows (days 0 to
// 3), index(event_date) on both. Autovacuum is off on the target: the
// phase vacuums it before each load, so each starts from the same table.
func (e *env) rerunTables(ctx context.Context, src, t string, rows int) error {
	return e.exec(ctx,
		"CREATE TABLE "+src+" "+rowDDL,
		"INSERT INTO "+src+" "+rowsSQL(bigBase, 0, 1, rows),
		"INSERT INTO "+src+" "+rowsSQL(bigBase, warmDay, 1, 10),
		"CREATE INDEX ON "+src+" (event_date)",
		"CREATE TABLE "+t+" "+rowDDL+" WITH (autovacuum_enabled = off)",
		"CREATE INDEX ON "+t+" (event_date)",
		"INSERT INTO "+t+" "+rowsSQL(bigBase, 0, 4, rows),
		"VACUUM ANALYZE "+src+", "+t,
	)
}

// startAlone starts `idem serve` on dss at max_in_flight 1, so each load
// it is sent runs alone, and connects to the database; stop ends both.
func (e *env) startAlone(ctx context.Context, name string, dss []dataset) (proc *idemProc, conn *pgx.Conn, stop func(), err error) {
	if proc, err = e.startIdem(ctx, name, 1, dss); err != nil {
		return nil, nil, nil, err
	}
	if conn, err = pgx.Connect(ctx, e.dbURL); err != nil {
		proc.kill()
		return nil, nil, nil, err
	}
	return proc, conn, func() { conn.Close(context.WithoutCancel(ctx)); proc.kill() }, nil
}

// runBig runs phase (c) for every size with one idem serve, max_in_flight 1.
func (e *env) runBig(ctx context.Context) error {
	var dss []dataset
	for _, n := range e.sizes.Big {
		if err := e.setupBig(ctx, n); err != nil {
			return err
		}
		dss = append(dss, bigDatasets(labelRows(n))...)
	}
	proc, conn, stop, err := e.startAlone(ctx, "big", dss)
	if err != nil {
		return err
	}
	defer stop()
	for _, n := range e.sizes.Big {
		e.sampleLoad("big " + labelRows(n))
		b := &big{env: e, proc: proc, conn: conn, rows: n, l: labelRows(n),
			out: &BigSize{Rows: n, Label: labelRows(n), Cases: map[string]Op{}, Reruns: map[string][]Op{}}}
		if err := b.run(ctx); err != nil {
			return fmt.Errorf("big %s: %w", b.l, err)
		}
		e.res.Big = append(e.res.Big, *b.out)
	}
	e.res.Memory = append(e.res.Memory, MemSample{Phase: "big partitions", InFlight: 1, PeakMiB: proc.peakMiB()})
	err = proc.stop()
	// idem logs a load's route after its commit: read them once it stopped.
	for i := range e.res.Big {
		bs := &e.res.Big[i]
		for k, op := range bs.Cases {
			if op.Run != "" {
				op.Route = proc.route(op.Run)
				bs.Cases[k] = op
			}
		}
		for _, ops := range bs.Reruns {
			for j := range ops {
				ops[j].Route = proc.route(ops[j].Run)
			}
		}
	}
	return err
}

func (b *big) run(ctx context.Context) error {
	l := b.l
	steps := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"floors and COPY", b.floors},
		{"delete_insert, plain table", b.plain},
		{"delete_insert, partitioned table", b.partitioned},
		{"merge", b.merge},
		{"append_dedupe", b.appendDedupe},
	}
	for _, s := range steps {
		b.logf("big %s: %s", l, s.what)
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

func (b *big) lsn(ctx context.Context) (string, error) {
	var lsn string
	err := b.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn)
	return lsn, err
}

func (b *big) walSince(ctx context.Context, from string) (int64, error) {
	var n int64
	err := b.conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint", from).Scan(&n)
	return n, err
}

// bare times one transaction of sqls, from BEGIN to the acknowledged COMMIT.
func (b *big) bare(ctx context.Context, sqls ...string) (Op, error) {
	if _, err := b.conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return Op{}, err
	}
	lsn, err := b.lsn(ctx)
	if err != nil {
		return Op{}, err
	}
	start := time.Now()
	err = pgx.BeginFunc(ctx, b.conn, func(tx pgx.Tx) error {
		for _, s := range sqls {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%w\nSQL: %s", err, s)
			}
		}
		return nil
	})
	el := time.Since(start)
	if err != nil {
		return Op{}, err
	}
	wal, err := b.walSince(ctx, lsn)
	return Op{Ms: ms(el), WALBytes: wal}, err
}

// idem publishes one event and times it until idem acknowledges it, which
// it does after the load's durable commit.
func (b *big) idem(ctx context.Context, ds string, d int) (Op, error) {
	b.seq++
	run := fmt.Sprintf("big-%s-%d", ds, b.seq)
	if _, err := b.conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return Op{}, err
	}
	lsn, err := b.lsn(ctx)
	if err != nil {
		return Op{}, err
	}
	m, err := b.msg(event{ds, b.d(d), run})
	if err != nil {
		return Op{}, err
	}
	start := time.Now()
	ack, err := b.js.PublishMsg(ctx, m)
	if err != nil {
		return Op{}, err
	}
	acked, err := b.proc.acks.wait(ctx, []uint64{ack.Sequence}, 10*time.Minute)
	if err != nil {
		return Op{}, fmt.Errorf("load %s: %w\n%s", run, err, b.proc.tail())
	}
	var status string
	var msg *string
	if err := b.conn.QueryRow(ctx, "SELECT status, error FROM idem.pipeline_audit WHERE run_id = $1 ORDER BY id DESC LIMIT 1", run).Scan(&status, &msg); err != nil {
		return Op{}, err
	}
	if status != "success" {
		return Op{}, fmt.Errorf("idem load %s: %s: %s", run, status, deref(msg))
	}
	el := acked[0].Sub(start)
	op := Op{Run: run, Ms: ms(el)}
	if op.WALBytes, err = b.walSince(ctx, lsn); err != nil {
		return op, err
	}
	var inTx float64
	var rows *int64
	err = b.conn.QueryRow(ctx, `SELECT extract(epoch FROM finished_at - started_at)::float8 * 1000, row_count
		FROM idem.pipeline_audit WHERE run_id = $1 AND status = 'success'`, run).Scan(&inTx, &rows)
	op.InTxMs = inTx
	if rows != nil {
		op.Rows = *rows
	}
	return op, err
}

// measure fills the table's size and exact dead tuples into op; a
// partitioned table counts its leaves.
func (b *big) measure(ctx context.Context, table string, op *Op) error {
	const rels = `WITH rels AS (
		SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf
		UNION SELECT $1::regclass WHERE (SELECT relkind FROM pg_class WHERE oid = $1::regclass) <> 'p')`
	if err := b.conn.QueryRow(ctx, rels+" SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint FROM rels",
		table).Scan(&op.TableBytes); err != nil {
		return err
	}
	if b.tuples {
		return b.conn.QueryRow(ctx, rels+" SELECT coalesce(sum((pgstattuple(relid)).dead_tuple_count), 0)::bigint FROM rels",
			table).Scan(&op.DeadTuples)
	}
	if _, err := b.conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return err
	}
	return b.conn.QueryRow(ctx, rels+" SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE relid IN (SELECT relid FROM rels)",
		table).Scan(&op.DeadTuples)
}

func (b *big) keep(ctx context.Context, name, table string, op Op) error {
	if table != "" {
		if err := b.measure(ctx, table, &op); err != nil {
			return err
		}
	}
	b.out.Cases[name] = op
	return nil
}

// floorReps repeats each floor and COPY; the median is kept.
const floorReps = 3

func (b *big) floors(ctx context.Context) error {
	l := b.l
	for _, f := range []struct {
		name  string
		index bool
	}{{"floor_index", true}, {"floor_noindex", false}} {
		t := "bench." + f.name + "_" + l
		var ops []Op
		for range floorReps {
			sqls := []string{"CREATE TABLE " + t + " " + rowDDL}
			if f.index {
				sqls = append(sqls, "CREATE INDEX ON "+t+" (event_date)")
			}
			if err := b.exec(ctx, sqls...); err != nil {
				return err
			}
			op, err := b.bare(ctx, b.insertSQL(t, 4))
			if err != nil {
				return err
			}
			if err := b.measure(ctx, t, &op); err != nil {
				return err
			}
			ops = append(ops, op)
			if err := b.exec(ctx, "DROP TABLE "+t); err != nil {
				return err
			}
		}
		b.out.Cases[f.name] = medianOp(ops)
	}
	// COPY from rows already in Go memory: the cost of ingesting from outside.
	rows, err := b.conn.Query(ctx, "SELECT "+rowCols+" FROM bench.src_"+l+" WHERE event_date = $1", b.d(4))
	if err != nil {
		return err
	}
	data, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	if err != nil {
		return err
	}
	cols := strings.Split(strings.ReplaceAll(rowCols, " ", ""), ",")
	for _, f := range []struct {
		name  string
		index bool
	}{{"copy_index", true}, {"copy_noindex", false}} {
		t := "copy_" + l
		var ops []Op
		for range floorReps {
			sqls := []string{"CREATE TABLE bench." + t + " " + rowDDL}
			if f.index {
				sqls = append(sqls, "CREATE INDEX ON bench."+t+" (event_date)")
			}
			if err := b.exec(ctx, append(sqls, "CHECKPOINT")...); err != nil {
				return err
			}
			lsn, err := b.lsn(ctx)
			if err != nil {
				return err
			}
			start := time.Now()
			err = pgx.BeginFunc(ctx, b.conn, func(tx pgx.Tx) error {
				_, err := tx.CopyFrom(ctx, pgx.Identifier{"bench", t}, cols, pgx.CopyFromRows(data))
				return err
			})
			el := time.Since(start)
			if err != nil {
				return err
			}
			op := Op{Ms: ms(el)}
			if op.WALBytes, err = b.walSince(ctx, lsn); err != nil {
				return err
			}
			if err := b.measure(ctx, "bench."+t, &op); err != nil {
				return err
			}
			ops = append(ops, op)
			if err := b.exec(ctx, "DROP TABLE bench."+t); err != nil {
				return err
			}
		}
		b.out.Cases[f.name] = medianOp(ops)
	}
	return nil
}

// medianOp is the op of median time.
func medianOp(ops []Op) Op {
	s := slices.Clone(ops)
	slices.SortFunc(s, func(a, b Op) int { return cmp.Compare(a.Ms, b.Ms) })
	return s[len(s)/2]
}

// ref is a bare reference: the statements of one transaction, recorded
// under series.
type ref struct {
	series string
	sqls   []string
}

// alternate runs the bare references and idem in turns, Reruns times, each
// on its own partition of the same table, so all see the same table and the
// same dead tuples, and the box's noise falls on all alike.
func (b *big) alternate(ctx context.Context, series, table string, refs []ref, ds string, d int) error {
	for range b.sizes.Reruns {
		for _, r := range refs {
			op, err := b.bare(ctx, r.sqls...)
			if err != nil {
				return err
			}
			if err := b.measure(ctx, table, &op); err != nil {
				return err
			}
			b.out.Reruns[r.series] = append(b.out.Reruns[r.series], op)
		}
		op, err := b.idem(ctx, ds, d)
		if err != nil {
			return err
		}
		if err := b.measure(ctx, table, &op); err != nil {
			return err
		}
		b.out.Reruns[series] = append(b.out.Reruns[series], op)
	}
	return nil
}

func (b *big) plain(ctx context.Context) error {
	t := "bench.plain_" + b.l
	return b.alternate(ctx, "plain", t, []ref{{"plain_bare", []string{"DELETE FROM " + t + " WHERE event_date = '" + b.d(1) + "'", b.insertSQL(t, 1)}}},
		"plain_"+b.l, 0)
}

// partitioned compares idem's default route (delete_child: DELETE through
// the parent, INSERT into the child) with the same two statements by hand,
// and shows TRUNCATE of the child and DELETE + INSERT through the parent
// beside them. idem loads D0, the references D1, D2 and D3.
func (b *big) partitioned(ctx context.Context) error {
	t := "bench.part_" + b.l
	child := func(d int) string { return fmt.Sprintf("bench.part_%s_d%d", b.l, d) }
	refs := []ref{
		{"part_bare", []string{"DELETE FROM " + t + " WHERE event_date = '" + b.d(1) + "'", b.insertSQL(child(1), 1)}},
		{"part_bare_truncate", []string{"TRUNCATE " + child(2), b.insertSQL(child(2), 2)}},
	}
	if err := b.alternate(ctx, "part", t, refs, "part_"+b.l, 0); err != nil {
		return err
	}
	op, err := b.bare(ctx, "DELETE FROM "+t+" WHERE event_date = '"+b.d(3)+"'", b.insertSQL(t, 3))
	if err != nil {
		return err
	}
	return b.keep(ctx, "part_bare_delete_parent", t, op)
}

// mergeSQL is the bare guarded upsert of date d: the statement to beat.
func (b *big) mergeSQL(d int) string {
	cols := strings.Split(strings.ReplaceAll(rowCols, " ", ""), ",")
	var set, tv, ev []string
	for _, c := range cols[1:] {
		set = append(set, c+" = EXCLUDED."+c)
		tv = append(tv, "t."+c)
		ev = append(ev, "EXCLUDED."+c)
	}
	return "INSERT INTO bench.merge_" + b.l + " AS t (" + rowCols + ") SELECT " + rowCols + " FROM bench.mstage_" + b.l +
		" WHERE event_date = '" + b.d(d) + "' ON CONFLICT (order_id) DO UPDATE SET " + strings.Join(set, ", ") +
		" WHERE (" + strings.Join(tv, ", ") + ") IS DISTINCT FROM (" + strings.Join(ev, ", ") + ")"
}

func (b *big) merge(ctx context.Context) error {
	t := "bench.merge_" + b.l
	for _, kase := range []string{"new", "unchanged", "changed"} {
		if kase == "changed" {
			if err := b.exec(ctx, "UPDATE bench.mstage_"+b.l+" SET total = total + 1, updated_at = updated_at + interval '1 hour'",
				"VACUUM ANALYZE bench.mstage_"+b.l); err != nil {
				return err
			}
		}
		if err := b.exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return err
		}
		op, err := b.bare(ctx, b.mergeSQL(4))
		if err != nil {
			return err
		}
		if err := b.keep(ctx, "merge_"+kase+"_bare", t, op); err != nil {
			return err
		}
		if err := b.exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return err
		}
		if op, err = b.idem(ctx, "merge_"+b.l, 5); err != nil {
			return err
		}
		if err := b.keep(ctx, "merge_"+kase+"_idem", t, op); err != nil {
			return err
		}
	}
	return nil
}

func (b *big) appendDedupe(ctx context.Context) error {
	t := "bench.app_" + b.l
	ins := func(d int, run string) string {
		return "INSERT INTO " + t + " (" + rowCols + ", run_id, load_seq) SELECT " + rowCols + ", '" + run +
			"', (SELECT nextval('idem.load_seq')) FROM bench.src_" + b.l + " WHERE event_date = '" + b.d(d) + "'"
	}
	if err := b.alternate(ctx, "append", t, []ref{{"append_bare", []string{ins(1, "bare")}}}, "app_"+b.l, 0); err != nil {
		return err
	}
	read := func() error {
		if err := b.exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return err
		}
		var rows int64
		if err := b.conn.QueryRow(ctx, "SELECT count(*) FROM "+t).Scan(&rows); err != nil {
			return err
		}
		q := "SELECT count(*), sum(total) FROM " + t + "_v WHERE event_date = '" + b.d(0) + "'"
		var times []float64
		for i := range 4 {
			start := time.Now()
			var n int64
			var sum any
			if err := b.conn.QueryRow(ctx, q).Scan(&n, &sum); err != nil {
				return err
			}
			if n != int64(b.rows) {
				return fmt.Errorf("the view shows %d rows of the partition, want %d", n, b.rows)
			}
			if i > 0 { // the first read warms the cache
				times = append(times, ms(time.Since(start)))
			}
		}
		b.out.View = append(b.out.View, ViewRead{TableRows: rows, Ms: median(times)})
		return nil
	}
	if err := read(); err != nil {
		return err
	}
	// The same partition, read again from a table holding more partitions.
	for range 2 {
		for d := 2; d <= 5; d++ {
			if err := b.exec(ctx, ins(d, "fill")); err != nil {
				return err
			}
		}
	}
	return read()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
