package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/strategies"
)

// (g) Checks: the same delete_insert load of one partition with a dataset's
// checks and without, in turns, on one table; and 10-row partitions with a
// row_count check and without, end to end through idem serve.

// Variants of (g)'s big loads.
const (
	ChecksNone           = "none"             // no checks
	ChecksRowCountChange = "row_count_change" // the one check that counts the replaced rows first
	ChecksAll            = "all_five"         // unique, not_null, accepted_values, accepted_range, row_count_change
)

var checksVariants = []string{ChecksNone, ChecksRowCountChange, ChecksAll}

func checksYAML(variant string) string {
	switch variant {
	case ChecksRowCountChange:
		return "      - row_count_change: {max_drop: 50%}\n"
	case ChecksAll:
		return `      - unique: [order_id]
      - not_null: [order_id, total]
      - accepted_values: {column: status, values: [new, paid, shipped, cancelled]}
      - accepted_range: {column: total, min: 0, max: 100000}
      - row_count_change: {max_drop: 50%}
`
	}
	return ""
}

// checksDataset is a big variant: every variant loads the same table from
// the same staging table.
func checksDataset(l, variant string) dataset {
	return dataset{Name: "chk_" + variant + "_" + l, Strategy: "delete_insert", Target: "bench.chk_" + l, PartitionColumn: "event_date",
		Source: "SELECT " + rowCols + " FROM bench.chk_src_" + l + " WHERE event_date = @partition", Checks: checksYAML(variant)}
}

// checksSmallDS is a small variant: with a row_count check or without.
func checksSmallDS(with bool) dataset {
	d := smallDataset("chks_without", "chk_small")
	if with {
		d.Name, d.Checks = "chks_row_count", "      - row_count: {min: 1}\n"
	}
	return d
}

func (e *env) setupChecks(ctx context.Context, rows int) error {
	l := labelRows(rows)
	p := e.sizes.Partitions
	e.logf("checks %s: staging 1 x %d rows, a target of 4 partitions; %d partitions of 10 rows", l, rows, p)
	if err := e.rerunTables(ctx, "bench.chk_src_"+l, "bench.chk_"+l, rows); err != nil {
		return err
	}
	return e.smallTables(ctx, e.pool, "chk_small", p)
}

// runChecks is (g).
func (e *env) runChecks(ctx context.Context) error {
	n := e.sizes.ChecksRows
	if n == 0 {
		return nil
	}
	out := &ChecksResult{Rows: n, Label: labelRows(n), Reps: max(e.sizes.ChecksReps, 1), Big: map[string][]ChecksLoad{}}
	e.res.Checks = out
	if err := e.setupChecks(ctx, n); err != nil {
		return err
	}
	e.sampleLoad("checks " + out.Label)
	if err := e.checksBig(ctx, out); err != nil {
		return fmt.Errorf("checks %s: %w", out.Label, err)
	}
	if err := e.checksReplay(ctx, out); err != nil {
		return fmt.Errorf("checks, small events replayed: %w", err)
	}
	for _, c := range e.sizes.InFlight {
		e.sampleLoad(fmt.Sprintf("checks small c=%d", c))
		if err := e.checksSmall(ctx, c, out); err != nil {
			return fmt.Errorf("checks, small events at max_in_flight %d: %w", c, err)
		}
	}
	return nil
}

func (e *env) checksBig(ctx context.Context, out *ChecksResult) error {
	l := out.Label
	target := "bench.chk_" + l
	var dss []dataset
	for _, v := range checksVariants {
		dss = append(dss, checksDataset(l, v))
	}
	proc, conn, stop, err := e.startAlone(ctx, "checks-big", dss)
	if err != nil {
		return err
	}
	defer stop()
	b := &big{env: e, proc: proc, conn: conn, rows: out.Rows, l: l}
	for _, d := range dss {
		if _, err := b.idem(ctx, d.Name, warmDay); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	for rep := range out.Reps {
		for turn := range checksVariants {
			v := checksVariants[(rep+turn)%len(checksVariants)]
			e.logf("checks %s: round %d, %s", l, rep+1, v)
			// Every load starts from the same table: no dead tuples of the
			// previous one, the visibility map set. (b.idem checkpoints.)
			if err := e.exec(ctx, "VACUUM (ANALYZE) "+target); err != nil {
				return err
			}
			op, err := b.idem(ctx, checksDataset(l, v).Name, 0)
			if err != nil {
				return err
			}
			if op.Rows != int64(out.Rows) {
				return fmt.Errorf("%s loaded %d rows, want %d", op.Run, op.Rows, out.Rows)
			}
			ld := ChecksLoad{Op: op, Turn: turn}
			if v != ChecksNone {
				if err := e.checkOutcomes(ctx, &ld, strings.Count(checksYAML(v), "- ")); err != nil {
					return err
				}
			}
			out.Big[v] = append(out.Big[v], ld)
		}
	}
	if err := e.exec(ctx, "VACUUM (ANALYZE) "+target); err != nil {
		return err
	}
	if out.Dissect, err = b.dissectChecks(ctx, checksDataset(l, ChecksAll)); err != nil {
		return fmt.Errorf("the checks' statement: %w", err)
	}
	err = proc.stop()
	for _, ops := range out.Big {
		for i := range ops {
			ops[i].Route = proc.route(ops[i].Run)
		}
	}
	return err
}

// checkOutcomes reads what idem recorded of a load's checks (before its
// ack): want outcomes, every one a pass, and the checks' round trip time.
func (e *env) checkOutcomes(ctx context.Context, ld *ChecksLoad, want int) error {
	var n, notPass int64
	err := e.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status <> 'pass'), coalesce(max(duration_ms), 0),
		coalesce(string_agg(name || ' ' || status || coalesce(' (' || note || ')', ''), '; ' ORDER BY id), '')
		FROM idem.check_results WHERE run_id = $1`, ld.Run).Scan(&n, &notPass, &ld.ChecksMs, &ld.Outcomes)
	if err != nil {
		return err
	}
	if n != int64(want) || notPass > 0 {
		return fmt.Errorf("%s: %d check outcomes, want %d, every one a pass: %s", ld.Run, n, want, ld.Outcomes)
	}
	return nil
}

// dissectChecks captures the statements the checks of d build, from idem's
// handler loading the warm partition in process, then runs them on the
// measured partition in a transaction that does the load and rolls back.
func (b *big) dissectChecks(ctx context.Context, d dataset) (*ChecksDissect, error) {
	rec := &recorder{}
	db, err := newRecDB(ctx, b.pool, rec)
	if err != nil {
		return nil, err
	}
	defer db.closeTraced()
	h, err := handlerFor(db, d)
	if err != nil {
		return nil, err
	}
	warm := b.d(warmDay)
	rec.on = true
	o, err := handle(ctx, h, event{d.Name, warm, "checks-capture"}, 1)
	rec.on = false
	if err != nil || o.Status != audit.StatusSuccess {
		return nil, fmt.Errorf("capture: %v (status %q)", err, o.Status)
	}
	var stmt *stmt
	for _, tr := range rec.trips {
		for i, s := range tr.stmts {
			if tr.batch && strings.HasPrefix(s.sql, "SAVEPOINT idem_checks") && i+1 < len(tr.stmts) {
				stmt = tr.stmts[i+1]
			}
		}
	}
	if stmt == nil {
		return nil, fmt.Errorf("the checks' statement not found in the %d round trips of a load", len(rec.trips))
	}
	tpl := &template{partition: warm}
	bind := binding{partition: b.d(0)}
	stmtArgs := tpl.args(stmt, bind)
	// The statement is "SELECT <one count per check> <the produced rows>";
	// the produced rows of delete_insert are the partition, which is also
	// what row_count_change's baseline would count. idem no longer runs
	// that count (the DELETE's row count is the baseline); it is timed
	// here as the cost that saves, and as a bare count for comparison.
	i := strings.LastIndex(stmt.sql, " FROM "+strategies.Ident(d.Target)+" AS t WHERE ")
	if i < 0 {
		return nil, fmt.Errorf("the checks' statement does not end with the produced rows of %s: %s", d.Target, stmt.sql)
	}
	from := stmt.sql[i+1:]
	baseSQL, baseArgs := renumber("SELECT count(*) "+from, stmtArgs)

	conn, err := b.connectAsIdem(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	run := func(sql string, args []any) ([]any, error) {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var first []any
		for rows.Next() {
			if first == nil {
				if first, err = rows.Values(); err != nil {
					return nil, err
				}
			}
		}
		return first, rows.Err()
	}
	timed := func(reps int, sql string, args ...any) (float64, []any, error) {
		var ts []float64
		var vals []any
		for range reps {
			start := time.Now()
			v, err := run(sql, args)
			if err != nil {
				return 0, nil, fmt.Errorf("%w\nSQL: %s", err, sql)
			}
			ts, vals = append(ts, ms(time.Since(start))), v
		}
		return median(ts), vals, nil
	}
	ds := &ChecksDissect{Statement: stmt.sql, Settings: map[string]float64{}}
	if ds.BaselineMs, _, err = timed(3, baseSQL, baseArgs...); err != nil {
		return nil, err
	}
	start := time.Now()
	for _, s := range []string{"DELETE FROM " + d.Target + " WHERE event_date = '" + b.d(0) + "'",
		"INSERT INTO " + d.Target + " (" + rowCols + ") SELECT " + rowCols + " FROM bench.chk_src_" + b.l + " WHERE event_date = '" + b.d(0) + "'"} {
		if _, err := tx.Exec(ctx, s); err != nil {
			return nil, fmt.Errorf("%w\nSQL: %s", err, s)
		}
	}
	ds.LoadMs = ms(time.Since(start))
	if ds.CountMs, _, err = timed(3, baseSQL, baseArgs...); err != nil {
		return nil, err
	}
	var vals []any
	if ds.StatementMs, vals, err = timed(3, stmt.sql, stmtArgs...); err != nil {
		return nil, err
	}
	if len(vals) == 0 || fmt.Sprint(vals[0]) != fmt.Sprint(b.rows) {
		return nil, fmt.Errorf("the checks' statement counted %v, want %d rows first", vals, b.rows)
	}
	for _, v := range vals[1:] {
		if fmt.Sprint(v) != "0" {
			return nil, fmt.Errorf("the checks' statement found failing rows: %v", vals)
		}
	}
	if list, ok := strings.CutSuffix(strings.TrimPrefix(stmt.sql, "SELECT "), " "+from); ok {
		var shared []string
		for _, item := range selectItems(list) {
			if !strings.HasPrefix(item, "(SELECT") {
				shared = append(shared, item)
				continue
			}
			name := "a subquery"
			if strings.Contains(item, "GROUP BY") || strings.Contains(item, "DISTINCT") {
				name = "the unique check's subquery"
			}
			q, a := renumber("SELECT "+item, stmtArgs)
			ms, _, err := timed(3, q, a...)
			if err != nil {
				return nil, err
			}
			ds.Alone = append(ds.Alone, PlanPart{Name: name, Ms: ms, Detail: abbrev(item)})
		}
		q, a := renumber("SELECT "+strings.Join(shared, ", ")+" "+from, stmtArgs)
		ms, _, err := timed(3, q, a...)
		if err != nil {
			return nil, err
		}
		ds.Alone = append(ds.Alone, PlanPart{Name: "the shared scan: count(*) and the FILTER'ed counts", Ms: ms, Detail: fmt.Sprintf("%d counts", len(shared))})
	}
	for _, set := range [][2]string{{"work_mem", "64MB"}, {"enable_hashagg", "off"}} {
		if _, err := tx.Exec(ctx, "SET LOCAL "+set[0]+" = '"+set[1]+"'"); err != nil {
			return nil, err
		}
		if ds.Settings[set[0]+" = "+set[1]], _, err = timed(3, stmt.sql, stmtArgs...); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL "+set[0]+" TO DEFAULT"); err != nil {
			return nil, err
		}
	}
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+stmt.sql, stmtArgs...).Scan(&plan); err != nil {
		return nil, err
	}
	if ds.ExplainMs, ds.Parts, err = planParts(plan); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+stmt.sql, stmtArgs...)
	if err != nil {
		return nil, err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	ds.Plan = strings.Join(lines, "\n")
	return ds, nil
}

// renumber keeps the arguments a piece of a statement uses, its $n
// renumbered from $1 in order of first use.
func renumber(sql string, args []any) (string, []any) {
	var out []any
	seen := map[int]int{}
	re := regexp.MustCompile(`\$([0-9]+)`)
	sql = re.ReplaceAllStringFunc(sql, func(m string) string {
		n, _ := strconv.Atoi(m[1:])
		k, ok := seen[n]
		if !ok && n >= 1 && n <= len(args) {
			out = append(out, args[n-1])
			k = len(out)
			seen[n] = k
		}
		if k == 0 {
			return m
		}
		return "$" + strconv.Itoa(k)
	})
	return sql, out
}

// selectItems splits a select list at its top-level commas (outside
// parentheses, quotes and quoted identifiers).
func selectItems(list string) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(list); i++ {
		ch := list[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '(':
			depth++
		case ch == ')':
			depth--
		case ch == ',' && depth == 0:
			out = append(out, strings.TrimSpace(list[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(list[start:]))
}

// planNode is the part of EXPLAIN (FORMAT JSON) the report reads.
type planNode struct {
	NodeType      string     `json:"Node Type"`
	Strategy      string     `json:"Strategy"`
	Relationship  string     `json:"Parent Relationship"`
	SubplanName   string     `json:"Subplan Name"`
	Relation      string     `json:"Relation Name"`
	IndexName     string     `json:"Index Name"`
	TotalMs       float64    `json:"Actual Total Time"`
	Loops         float64    `json:"Actual Loops"`
	Workers       *int       `json:"Workers Launched"`
	Batches       int        `json:"HashAgg Batches"`
	DiskKB        float64    `json:"Disk Usage"`
	PeakKB        float64    `json:"Peak Memory Usage"`
	SortMethod    string     `json:"Sort Method"`
	SortSpaceKB   float64    `json:"Sort Space Used"`
	SortSpaceType string     `json:"Sort Space Type"`
	TempWritten   int64      `json:"Temp Written Blocks"`
	Plans         []planNode `json:"Plans"`
}

// planParts splits an EXPLAIN ANALYZE of the checks' statement into the
// subqueries its root runs (the unique check's, a relationships or sql
// check's) and the rest: the shared scan and its FILTER'ed counts.
func planParts(js []byte) (float64, []PlanPart, error) {
	var out []struct {
		Plan          planNode `json:"Plan"`
		ExecutionTime float64  `json:"Execution Time"`
	}
	if err := json.Unmarshal(js, &out); err != nil || len(out) != 1 {
		return 0, nil, fmt.Errorf("EXPLAIN (FORMAT JSON): %v", err)
	}
	root := out[0].Plan
	var parts []PlanPart
	var sub float64
	var shared []planNode
	for _, p := range root.Plans {
		if p.Relationship == "InitPlan" || p.Relationship == "SubPlan" {
			t := p.TotalMs * max(p.Loops, 1)
			sub += t
			parts = append(parts, PlanPart{Name: p.SubplanName, Ms: t, Detail: describePlan(p)})
		} else {
			shared = append(shared, p)
		}
	}
	// The root's time includes its subqueries'.
	root.Plans, root.TotalMs = shared, root.TotalMs-sub
	parts = append(parts, PlanPart{Name: "the rest: the shared scan and its counts", Ms: out[0].ExecutionTime - sub, Detail: describePlan(root)})
	return out[0].ExecutionTime, parts, nil
}

// describePlan lists a plan's nodes, outermost first, with what says where
// the time went: hash batches and spills, sort methods, parallel workers.
func describePlan(n planNode) string {
	var parts []string
	var walk func(n planNode)
	walk = func(n planNode) {
		s := n.NodeType
		if n.NodeType == "Aggregate" && n.Strategy != "" && n.Strategy != "Plain" {
			s = map[string]string{"Hashed": "HashAggregate", "Sorted": "GroupAggregate", "Mixed": "MixedAggregate"}[n.Strategy]
		}
		var notes []string
		if n.IndexName != "" {
			notes = append(notes, "on "+n.IndexName)
		} else if n.Relation != "" {
			notes = append(notes, "on "+n.Relation)
		}
		if n.Workers != nil {
			notes = append(notes, fmt.Sprintf("%d workers", *n.Workers))
		}
		if n.Batches > 1 {
			notes = append(notes, fmt.Sprintf("%d batches, %s MB on disk", n.Batches, num(n.DiskKB/1024)))
		} else if n.PeakKB > 0 {
			notes = append(notes, fmt.Sprintf("%s MB in memory", num(n.PeakKB/1024)))
		}
		if n.SortMethod != "" {
			notes = append(notes, fmt.Sprintf("%s, %s MB %s", n.SortMethod, num(n.SortSpaceKB/1024), strings.ToLower(n.SortSpaceType)))
		}
		// Per loop, as EXPLAIN has it: under a Gather, each process's.
		s += fmt.Sprintf(" %s ms", num(n.TotalMs))
		if n.Loops > 1 {
			notes = append(notes, fmt.Sprintf("%.0f loops", n.Loops))
		}
		if len(notes) > 0 {
			s += " (" + strings.Join(notes, ", ") + ")"
		}
		parts = append(parts, s)
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(parts, " ← ")
}

// checksSmall is (g)'s small events at max_in_flight c: the datasets with a
// row_count check and without take turns, each run its own n partitions
// of 10 rows (the same ones for both), through one idem serve.
func (e *env) checksSmall(ctx context.Context, c int, out *ChecksResult) error {
	n := min(e.sizes.Events, e.sizes.Partitions-1)
	without, with := checksSmallDS(false), checksSmallDS(true)
	proc, err := e.startIdem(ctx, fmt.Sprintf("checks-small-c%d", c), c, []dataset{without, with})
	if err != nil {
		return err
	}
	defer proc.kill()
	s := &small{env: e}
	fresh := func() error {
		return e.settle(ctx, "bench.chk_small_t", "idem.pipeline_audit", "idem.run_ledger", "idem.check_results")
	}
	evs := func(d dataset, prefix string, k int) []event {
		out := make([]event, k)
		for i := range out {
			out[i] = event{d.Name, dayKey(smallBase, i), fmt.Sprintf("%s-%05d", prefix, i)}
		}
		return out
	}
	// Each dataset's first load in the process does its one-time setup.
	for _, d := range []dataset{without, with} {
		p := fmt.Sprintf("chks-warm-%s-c%d", d.Name, c)
		ev := []event{{d.Name, dayKey(smallBase, e.sizes.Partitions-1), p}}
		if _, err := s.idemRun(ctx, proc, ev, p, audit.StatusSuccess); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	pt := ChecksSmall{InFlight: c}
	for rep := range max(e.sizes.ChecksReps, 1) {
		order := []dataset{without, with}
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, d := range order {
			if err := fresh(); err != nil {
				return err
			}
			prefix := fmt.Sprintf("chks-%s-c%d-r%d", d.Name, c, rep)
			el, err := s.idemRun(ctx, proc, evs(d, prefix, n), prefix, audit.StatusSuccess)
			if err != nil {
				return err
			}
			if d.Checks != "" {
				pt.With.add(n, el)
			} else {
				pt.Without.add(n, el)
			}
		}
	}
	// Every load with the check recorded its outcome, a pass.
	var got int64
	if got, err = e.int64(ctx, `SELECT count(*) FROM idem.check_results WHERE run_id LIKE 'chks-chks_row_count-c' || $1::int || '-%' AND status = 'pass'`, c); err != nil {
		return err
	}
	if want := int64(n * max(e.sizes.ChecksReps, 1)); got != want {
		return fmt.Errorf("%d passing row_count outcomes, want %d", got, want)
	}
	out.Small = append(out.Small, pt)
	return proc.stop()
}

// checksReplay captures the round trips of one small load of each small
// variant from idem's handler and replays them in turns on one connection
// set up as idem's pool is, timing each round trip.
func (e *env) checksReplay(ctx context.Context, out *ChecksResult) error {
	last := e.sizes.Partitions - 2
	n := min(e.sizes.Events, last-1)
	// An audit id no row count or sequence can be mistaken for (only ever
	// moved forward).
	if err := e.exec(ctx, "SELECT setval(pg_get_serial_sequence('idem.pipeline_audit', 'id'), greatest(nextval(pg_get_serial_sequence('idem.pipeline_audit', 'id')), 950000000))"); err != nil {
		return err
	}
	tpls := map[bool]*template{}
	for _, with := range []bool{false, true} {
		d := checksSmallDS(with)
		rec := &recorder{}
		db, err := newRecDB(ctx, e.pool, rec)
		if err != nil {
			return err
		}
		h, err := handlerFor(db, d)
		if err == nil {
			// The dataset's one-time setup first, not captured.
			_, err = handle(ctx, h, event{d.Name, dayKey(smallBase, last-1), "chks-warm-" + d.Name}, 1)
		}
		part, run := dayKey(smallBase, last), "chks-capture-"+d.Name
		var o handlers.Outcome
		if err == nil {
			rec.on = true
			o, err = handle(ctx, h, event{d.Name, part, run}, 2)
			rec.on = false
		}
		db.closeTraced()
		if err != nil || o.Status != audit.StatusSuccess {
			return fmt.Errorf("capture %s: %v (status %q)", d.Name, err, o.Status)
		}
		tpls[with] = newTemplate(rec.trips, part, run, day(smallBase, last), o.AuditID)
	}
	conn, err := e.connectAsIdem(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rp := &ChecksReplay{Events: n}
	spent := map[bool]*tripTimes{}
	for with, t := range tpls {
		spent[with] = &tripTimes{d: make([]time.Duration, len(t.trips))}
	}
	reps := max(e.sizes.ChecksReps, 1)
	for rep := range reps {
		order := []bool{false, true}
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, with := range order {
			if err := e.settle(ctx, "bench.chk_small_t", "idem.pipeline_audit", "idem.run_ledger", "idem.check_results"); err != nil {
				return err
			}
			prefix := fmt.Sprintf("chks-replay-%s-r%d", checksSmallDS(with).Name, rep)
			start := time.Now()
			for i := range n {
				if err := tpls[with].replay(ctx, conn, dayKey(smallBase, i), fmt.Sprintf("%s-%05d", prefix, i), day(smallBase, i), spent[with]); err != nil {
					return err
				}
			}
			el := time.Since(start)
			if with {
				rp.With.add(n, el)
			} else {
				rp.Without.add(n, el)
			}
			got, err := e.int64(ctx, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id LIKE $1 || '%' AND status = 'success'", prefix)
			if err != nil {
				return err
			}
			if got != int64(n) {
				return fmt.Errorf("the replay %s left %d successful audit rows for %d events (bench/capture.go)", prefix, got, n)
			}
		}
	}
	steps := func(t *template, tt *tripTimes) []Step {
		st := t.describe()
		var total time.Duration
		for _, d := range tt.d {
			total += d
		}
		for i := range st {
			st[i].MeanUs = float64(tt.d[i].Microseconds()) / float64(n*reps)
			st[i].Share = float64(tt.d[i]) / float64(max(total, 1))
		}
		return st
	}
	rp.StepsWithout, rp.StepsWith = steps(tpls[false], spent[false]), steps(tpls[true], spent[true])
	out.Replay = rp
	return nil
}
