package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// The report is rendered from Results alone, so `idembench -report` can
// regenerate docs/BENCHMARKS.md and bench/FIGURES.md from a saved JSON file
// without a new run.

// methodLabels name the small-event methods in tables and the chart.
var methodLabels = []struct{ key, label string }{
	{MIdem, "idem end to end (publish → ack after commit)"},
	{MHandler, "idem handler in-process, no NATS"},
	{MLimit, "limit (i): idem's SQL replayed by a pgx loop"},
	{MFloor, "floor (ii): BEGIN; DELETE; INSERT..SELECT; COMMIT (pgx)"},
	{MPgbenchFloor, "floor (ii) under pgbench -M prepared"},
	{MPgbench1tx, "pgbench 1 tx: audit ins + DELETE + INSERT + audit upd"},
	{MNaive, "naive consumer (no idempotency)"},
}

func num(v float64) string {
	switch {
	case v == 0:
		return "–"
	case math.Abs(v) >= 100:
		return thousands(int64(math.Round(v)))
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func mb(b int64) string { return num(float64(b) / (1 << 20)) }

type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) String() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n|")
	for range t.head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// Markdown is every figure of r with its ratio to its limit, as tables.
func (r *Results) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	if len(r.Small) > 0 {
		w("### (a) Small partitions (10 rows): events/s\n\n")
		w("%d events per run, median of %d run(s); in brackets idem end to end ÷ the method (above 1.00× idem is faster).\n\n", r.Sizes.Events, r.Sizes.Reps)
		t := &table{head: []string{"method"}}
		for _, p := range r.Small {
			t.head = append(t.head, fmt.Sprintf("max_in_flight %d", p.InFlight))
		}
		for _, m := range methodLabels {
			row := []string{m.label}
			for _, p := range r.Small {
				mm := p.Methods[m.key]
				idem := p.Methods[MIdem]
				if mm == nil || mm.Throughput.PerSec == 0 {
					row = append(row, "–")
					continue
				}
				cell := num(mm.Throughput.PerSec)
				if m.key != MIdem && idem != nil {
					cell += " (" + ratio(idem.Throughput.PerSec, mm.Throughput.PerSec) + ")"
				}
				row = append(row, cell)
			}
			t.add(row...)
		}
		w("%s\n", t)
		if cpu := r.cpuTable(); cpu != "" {
			w("%s", cpu)
		}

		w("### (a) Small partitions: publish-to-commit latency, p50 / p99 ms\n\n")
		w("Paced at half the rate idem sustained at that max_in_flight (rate in the header), %d events; pgbench rows give its closed-loop average instead.\n\n", r.Sizes.PacedEvents)
		t = &table{head: []string{"method"}}
		for _, p := range r.Small {
			rate := 0.0
			if m := p.Methods[MIdem]; m != nil && m.Latency != nil {
				rate = m.Latency.RatePerSec
			}
			t.head = append(t.head, fmt.Sprintf("max_in_flight %d (%s ev/s)", p.InFlight, num(rate)))
		}
		for _, m := range methodLabels {
			row := []string{m.label}
			for _, p := range r.Small {
				mm := p.Methods[m.key]
				switch {
				case mm == nil:
					row = append(row, "–")
				case mm.Latency != nil:
					row = append(row, num(mm.Latency.P50)+" / "+num(mm.Latency.P99))
				case mm.AvgLatencyMs > 0:
					row = append(row, "avg "+num(mm.AvgLatencyMs)+" (closed loop)")
				default:
					row = append(row, "–")
				}
			}
			t.add(row...)
		}
		w("%s\n", t)
	}

	if len(r.Duplicates) > 0 {
		w("### (b) Every event delivered twice: idem against the naive consumer\n\n")
		t := &table{head: []string{"max_in_flight", "messages", "idem msgs/s", "idem rows doubled", "idem skipped", "naive msgs/s", "naive rows doubled", "idem ÷ naive"}}
		for _, d := range r.Duplicates {
			t.add(fmt.Sprint(d.InFlight), thousands(int64(d.Messages)), num(d.IdemPerSec), thousands(d.IdemDoubled), thousands(d.IdemSkipped),
				num(d.NaivePerSec), thousands(d.NaiveDoubled), ratio(d.IdemPerSec, d.NaivePerSec))
		}
		w("%s\n", t)
	}

	if len(r.Skipped) > 0 {
		w("### (f) Skipped duplicates: redeliveries of runs that already succeeded\n\n")
		t := &table{head: []string{"max_in_flight", "idem skips/s", "limit skips/s", "idem ÷ limit", "idem p50 / p99 ms", "limit p50 / p99 ms"}}
		for _, s := range r.Skipped {
			lat := func(l *Latency) string {
				if l == nil {
					return "–"
				}
				return num(l.P50) + " / " + num(l.P99)
			}
			t.add(fmt.Sprint(s.InFlight), num(s.Idem.Throughput.PerSec), num(s.Limit.Throughput.PerSec),
				ratio(s.Idem.Throughput.PerSec, s.Limit.Throughput.PerSec), lat(s.Idem.Latency), lat(s.Limit.Latency))
		}
		w("%s\n", t)
	}

	if len(r.Steps) > 0 {
		w("### Where a small event's time goes: idem's round trips, replayed at concurrency %d\n\n", r.stepsAt())
		t := &table{head: []string{"#", "round trip", "SQL", "mean µs", "share"}}
		var total float64
		for _, s := range r.Steps {
			total += s.MeanUs
			t.add(fmt.Sprint(s.Index), s.Kind, "`"+strings.ReplaceAll(s.SQL, "|", "\\|")+"`", num(s.MeanUs), fmt.Sprintf("%.0f%%", 100*s.Share))
		}
		t.add("", "", "**per event**", "**"+num(total)+"**", "")
		w("%s\n", t)
	}
	if len(r.Statements) > 0 {
		w("### Server time per statement during idem's run at max_in_flight %d (pg_stat_statements)\n\n", r.stepsAt())
		t := &table{head: []string{"statement", "calls / event", "mean µs", "µs / event", "plans / call", "planning µs / event"}}
		var total, plan float64
		for _, s := range r.Statements {
			total += s.UsPerEvent
			plan += s.PlanUsPerEvent
			t.add("`"+strings.ReplaceAll(s.Query, "|", "\\|")+"`", fmt.Sprintf("%.2f", s.CallsPerEvent), num(s.MeanUs), num(s.UsPerEvent),
				fmt.Sprintf("%.2f", s.PlansPerCall), num(s.PlanUsPerEvent))
		}
		t.add("**total server execution**", "", "", "**"+num(total)+"**", "", "**"+num(plan)+"**")
		w("%s\n", t)
	}

	for _, bs := range r.Big {
		w("### (c) Big partitions: %s rows per partition\n\n", thousands(int64(bs.Rows)))
		w("Every table holds four partitions of %s rows. idem: ms from publish to its ack (sent after the durable commit); references: BEGIN to acknowledged COMMIT. A CHECKPOINT precedes each.\n\n", thousands(int64(bs.Rows)))
		t := &table{head: []string{"load", "idem ms", "of which audit started→finished", "reference", "ref ms", "idem ÷ ref", "idem WAL MB", "ref WAL MB", "dead tuples after (idem / ref)", "route"}}
		row := func(label string, idem Op, refLabel string, ref Op) {
			t.add(label, num(idem.Ms), num(idem.InTxMs), refLabel, num(ref.Ms), ratio(idem.Ms, ref.Ms), mb(idem.WALBytes), mb(ref.WALBytes),
				thousands(idem.DeadTuples)+" / "+thousands(ref.DeadTuples), idem.Route)
		}
		c := bs.Cases
		med := bs.median
		reruns := len(bs.Reruns["plain"])
		rr := fmt.Sprintf(" (median of %d reruns)", reruns)
		row("delete_insert, plain table"+rr, med("plain"), "bare DELETE + INSERT..SELECT, one tx"+rr+", alternating", med("plain_bare"))
		row("delete_insert, plain table"+rr, med("plain"), "floor: INSERT..SELECT into an empty table, index(event_date)", c["floor_index"])
		row("delete_insert, partitioned"+rr, med("part"), "bare DELETE through the parent + INSERT into the child"+rr+", alternating", med("part_bare"))
		row("delete_insert, partitioned"+rr, med("part"), "bare TRUNCATE child + INSERT into the child"+rr+", alternating", med("part_bare_truncate"))
		row("delete_insert, partitioned"+rr, med("part"), "floor: INSERT..SELECT into an empty table, no index", c["floor_noindex"])
		row("delete_insert, partitioned"+rr, med("part"), "bare DELETE + INSERT through the parent (once)", c["part_bare_delete_parent"])
		for _, k := range []string{"new", "unchanged", "changed"} {
			row("merge, all "+k, c["merge_"+k+"_idem"], "guarded INSERT..ON CONFLICT DO UPDATE WHERE IS DISTINCT FROM", c["merge_"+k+"_bare"])
		}
		row("append_dedupe"+rr, med("append"), "bare INSERT..SELECT with run_id, load_seq"+rr, med("append_bare"))
		w("%s\n", t)
		t = &table{head: []string{"reference", "ms", "rows/s", "÷ floor with the same indexes", "WAL MB"}}
		ref := func(label string, op, floor Op) {
			rps := 0.0
			if op.Ms > 0 {
				rps = float64(bs.Rows) / (op.Ms / 1000)
			}
			t.add(label, num(op.Ms), num(rps), ratio(op.Ms, floor.Ms), mb(op.WALBytes))
		}
		ref(fmt.Sprintf("floor: INSERT..SELECT into an empty table, index(event_date) (median of %d)", floorReps), c["floor_index"], c["floor_index"])
		ref(fmt.Sprintf("floor: INSERT..SELECT into an empty table, no index (median of %d)", floorReps), c["floor_noindex"], c["floor_noindex"])
		ref(fmt.Sprintf("COPY (pgx CopyFrom, rows in Go memory), index(event_date) (median of %d)", floorReps), c["copy_index"], c["floor_index"])
		ref(fmt.Sprintf("COPY (pgx CopyFrom, rows in Go memory), no index (median of %d)", floorReps), c["copy_noindex"], c["floor_noindex"])
		ref("bare DELETE + INSERT, plain table"+rr, med("plain_bare"), c["floor_index"])
		ref("bare DELETE through the parent + INSERT into the child"+rr, med("part_bare"), c["floor_noindex"])
		ref("bare TRUNCATE child + INSERT into the child"+rr, med("part_bare_truncate"), c["floor_noindex"])
		w("%s\n", t)

		if len(bs.Reruns) > 0 {
			w("Successive reruns of the same partition (autovacuum off on the targets, no VACUUM between reruns); idem and the bare statements alternate, each on its own partition of the same table:\n\n")
			t = &table{head: []string{"series"}}
			for i := range reruns {
				t.head = append(t.head, fmt.Sprintf("run %d ms", i+1))
			}
			t.head = append(t.head, "last 2 ÷ first 2", "table MB, first → last", "dead tuples, first → last")
			for _, s := range []struct{ key, label string }{
				{"plain", "idem delete_insert, plain"}, {"plain_bare", "bare DELETE + INSERT, plain"},
				{"part", "idem delete_insert, partitioned"}, {"part_bare", "bare DELETE (parent) + INSERT (child)"},
				{"part_bare_truncate", "bare TRUNCATE child + INSERT"},
				{"append", "idem append_dedupe"}, {"append_bare", "bare append"},
			} {
				ops := bs.Reruns[s.key]
				if len(ops) == 0 {
					continue
				}
				row := []string{s.label}
				for i := range reruns {
					if i < len(ops) {
						row = append(row, num(ops[i].Ms))
					} else {
						row = append(row, "–")
					}
				}
				f, l := ops[0], ops[len(ops)-1]
				row = append(row, fmt.Sprintf("%.2f×", drift(ops)), mb(f.TableBytes)+" → "+mb(l.TableBytes), thousands(f.DeadTuples)+" → "+thousands(l.DeadTuples))
				t.add(row...)
			}
			w("%s\n", t)
		}
		if len(bs.View) > 0 {
			w("Reading one partition through the append_dedupe view (`SELECT count(*), sum(total) FROM view WHERE event_date = D0`, median of 3 warm reads):\n\n")
			t = &table{head: []string{"rows in the table", "ms", "÷ first"}}
			for _, v := range bs.View {
				t.add(thousands(v.TableRows), num(v.Ms), ratio(v.Ms, bs.View[0].Ms))
			}
			w("%s\n", t)
		}
	}

	if len(r.Backfill) > 0 {
		w("### (d) Backfill: `idem backfill --wait` into an empty target\n\n")
		t := &table{head: []string{"max_in_flight", "partitions × rows", "idem s (first publish → last commit)", "partitions/s", "bare s (same DELETE + INSERT, pgx workers)", "idem ÷ bare", "command s", "peak RSS MiB", "publisher"}}
		for _, p := range r.Backfill {
			t.add(fmt.Sprint(p.InFlight), fmt.Sprintf("%d × %s", p.Partitions, thousands(int64(p.Rows))), num(p.IdemSeconds),
				num(float64(p.Partitions)/p.IdemSeconds), num(p.BareSeconds), ratio(p.IdemSeconds, p.BareSeconds), num(p.CommandSeconds), num(p.PeakRSSMiB), p.Publisher)
		}
		w("%s\n", t)
	}
	if len(r.Memory) > 0 {
		w("### (e) Peak RSS of each `idem serve` child (VmHWM)\n\n")
		t := &table{head: []string{"phase", "max_in_flight", "peak RSS MiB"}}
		for _, m := range r.Memory {
			t.add(m.Phase, fmt.Sprint(m.InFlight), num(m.PeakMiB))
		}
		w("%s\n", t)
	}
	b.WriteString(r.checksMarkdown())
	b.WriteString(r.tracingMarkdown())
	b.WriteString(r.loneMarkdown())
	b.WriteString(r.statementModesMarkdown())
	b.WriteString(r.lanesMarkdown())
	return b.String()
}

func (r *Results) stepsAt() int {
	if len(r.Sizes.InFlight) > 0 {
		return r.Sizes.InFlight[0]
	}
	return 1
}

// Verdict is one benchmark target, as measured.
type Verdict struct {
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	// Where names the history sizes a day-one target missed at.
	Where string `json:"where,omitempty"`
}

// Verdicts checks the benchmark targets against r. The 1M-row targets use the
// largest size measured, which the text names.
func (r *Results) Verdicts() []Verdict {
	var out []Verdict
	add := func(met bool, target, format string, args ...any) {
		out = append(out, Verdict{Target: target, Measured: fmt.Sprintf(format, args...), Met: met})
	}
	for _, p := range r.Small {
		idem, ref := p.Methods[MIdem], p.Methods[MPgbench1tx]
		if idem == nil || ref == nil || ref.Throughput.PerSec == 0 {
			continue
		}
		x := idem.Throughput.PerSec / ref.Throughput.PerSec
		// Where events queue, level with the hand-written transaction;
		// under concurrency, group loads are to go beyond it.
		want := 1.0
		if p.InFlight >= 4 {
			want = 1.5
		}
		add(x >= want, fmt.Sprintf("small, max_in_flight %d: idem ≥ %.1f× pgbench 1 tx", p.InFlight, want),
			"%s vs %s events/s = %.2f×; limit (i) %.2f×, floor (ii) %.2f×", num(idem.Throughput.PerSec), num(ref.Throughput.PerSec), x,
			frac(idem, p.Methods[MLimit]), frac(idem, p.Methods[MFloor]))
	}
	if len(r.Big) > 0 {
		bs := r.Big[len(r.Big)-1]
		size := bs.Label
		c := bs.Cases
		if part, bare := bs.median("part"), bs.median("part_bare"); part.Ms > 0 && bare.Ms > 0 {
			x := part.Ms / bare.Ms
			add(x <= 1.10, size+" delete_insert, partitioned target, default route: ≤ 1.10× bare DELETE (parent) + INSERT (child)",
				"%s vs %s ms = %.2f× (medians of alternating reruns, route %s; the floor: %.2f×)", num(part.Ms), num(bare.Ms), x, part.Route,
				part.Ms/max(c["floor_noindex"].Ms, 1e-9))
		}
		if plain, bare := bs.median("plain"), bs.median("plain_bare"); plain.Ms > 0 && bare.Ms > 0 {
			x := plain.Ms / bare.Ms
			add(x <= 1.05, size+" delete_insert, plain-table rerun: ≤ 1.05× bare DELETE + INSERT", "%s vs %s ms = %.2f× (medians of alternating reruns)", num(plain.Ms), num(bare.Ms), x)
		}
		for _, s := range []string{"plain", "part", "append"} {
			ops := bs.Reruns[s]
			if len(ops) < 2 {
				continue
			}
			f, l := ops[0], ops[len(ops)-1]
			tx, sx := drift(ops), float64(l.TableBytes)/float64(max(f.TableBytes, 1))
			grow := sx
			if s == "append" {
				// An append-only table grows by design: drift is growth beyond the rows appended.
				grow = 1
			}
			add(tx <= 1.10 && grow <= 1.05, fmt.Sprintf("%s %s: no drift over %d reruns", size, s, len(ops)),
				"time last 2 ÷ first 2 %.2f× (bare: %.2f×), table %s → %s MB, dead tuples %s → %s", tx, drift(bs.Reruns[s+"_bare"]),
				mb(f.TableBytes), mb(l.TableBytes), thousands(f.DeadTuples), thousands(l.DeadTuples))
		}
		for _, k := range []string{"new", "unchanged", "changed"} {
			i, b := c["merge_"+k+"_idem"], c["merge_"+k+"_bare"]
			if i.Ms == 0 || b.Ms == 0 {
				continue
			}
			limit := 1.15
			if k == "unchanged" {
				limit = 1.0
			}
			add(i.Ms <= limit*b.Ms, fmt.Sprintf("%s merge, all %s: ≤ %.2f× guarded INSERT..ON CONFLICT", size, k, limit), "%s vs %s ms = %.2f×", num(i.Ms), num(b.Ms), i.Ms/b.Ms)
		}
		if u, ch := c["merge_unchanged_idem"], c["merge_changed_idem"]; u.Ms > 0 {
			walOK := ch.WALBytes > 0 && float64(u.WALBytes) < 0.01*float64(ch.WALBytes)
			add(walOK && u.DeadTuples == 0, size+" merge, unchanged rerun: no WAL for the rows, no dead tuples",
				"%s MB of WAL (changed rows: %s MB), %s dead tuples", mb(u.WALBytes), mb(ch.WALBytes), thousands(u.DeadTuples))
		}
		if len(bs.View) >= 2 {
			f, l := bs.View[0], bs.View[len(bs.View)-1]
			x := l.Ms / f.Ms
			add(x <= 1.2, size+" append_dedupe view: reading one partition costs the same whatever the table size",
				"%s ms at %s rows, %s ms at %s rows = %.2f×", num(f.Ms), thousands(f.TableRows), num(l.Ms), thousands(l.TableRows), x)
		}
	}
	if len(r.Backfill) > 0 {
		peak := 0.0
		for _, p := range r.Backfill {
			peak = max(peak, p.PeakRSSMiB)
		}
		add(peak <= 48, "peak RSS ≤ 48 MiB through the backfill", "%s MiB (max over max_in_flight %s)", num(peak), joinInts(r.Sizes.BackfillInFlight))
	}
	for _, s := range r.Skipped {
		if s.Idem.Latency == nil {
			continue
		}
		add(s.Idem.Latency.P50 < 2, fmt.Sprintf("skipped duplicate, max_in_flight %d: under 2 ms", s.InFlight),
			"p50 %s ms, p99 %s ms publish → ack; %s skips/s", num(s.Idem.Latency.P50), num(s.Idem.Latency.P99), num(s.Idem.Throughput.PerSec))
	}
	if l := r.Lone; l != nil && l.Baseline != nil && l.Baseline.P50 > 0 {
		add(l.Current.P50 <= l.Baseline.P50, "a lone event's latency (publish → ack, nothing queued) no worse than the baseline's",
			"p50 %s ms vs %s ms = %.2f× (runs %s vs %s); p99 %s vs %s ms", num(l.Current.P50), num(l.Baseline.P50), l.Current.P50/l.Baseline.P50,
			spread(l.Current.Runs50), spread(l.Baseline.Runs50), num(l.Current.P99), num(l.Baseline.P99))
	}
	r.checksVerdicts(add)
	return out
}

// median is the op of median time in a rerun series.
func (bs BigSize) median(series string) Op {
	if len(bs.Reruns[series]) == 0 {
		return Op{}
	}
	return medianOp(bs.Reruns[series])
}

// drift compares the mean time of the last two runs with the first two.
func drift(ops []Op) float64 {
	if len(ops) < 2 {
		return 0
	}
	k := min(2, len(ops)/2)
	var f, l float64
	for i := range k {
		f += ops[i].Ms
		l += ops[len(ops)-1-i].Ms
	}
	if f == 0 {
		return 0
	}
	return l / f
}

func frac(a, b *Method) float64 {
	if a == nil || b == nil || b.Throughput.PerSec == 0 {
		return 0
	}
	return a.Throughput.PerSec / b.Throughput.PerSec
}

// VerdictTable renders the verdicts.
func (r *Results) VerdictTable() string { return verdictTable(r.Verdicts()) }

func verdictTable(vs []Verdict) string {
	t := &table{head: []string{"target", "measured", "verdict"}}
	for _, v := range vs {
		verdict := "**missed**"
		switch {
		case v.Met:
			verdict = "met"
		case v.Where != "":
			verdict += " at " + v.Where
		}
		t.add(v.Target, v.Measured, verdict)
	}
	return t.String()
}

// sortedLoad returns the load samples, for the machine section.
func (r *Results) loadSummary() string {
	if len(r.Load) == 0 {
		return "not recorded"
	}
	parts := make([]string, 0, len(r.Load))
	for _, l := range r.Load {
		parts = append(parts, fmt.Sprintf("%s %.2f", l.At, l.Load1))
	}
	return strings.Join(parts, "; ")
}

// shared says whether the machine was busy with more than this run.
func (r *Results) shared() bool {
	return slices.ContainsFunc(r.Load, func(l LoadSample) bool { return l.At == "start" && l.Load1 >= 0.5 })
}

// cpuTable is the processor time per event of each closed-loop method, by
// process: where the box's cores went.
func (r *Results) cpuTable() string {
	t := &table{head: []string{"method"}}
	for _, p := range r.Small {
		t.head = append(t.head, fmt.Sprintf("max_in_flight %d: PostgreSQL / client / all", p.InFlight))
	}
	any := false
	for _, m := range methodLabels {
		row := []string{m.label}
		for _, p := range r.Small {
			mm := p.Methods[m.key]
			if mm == nil || mm.CPU == nil {
				row = append(row, "–")
				continue
			}
			any = true
			client := mm.CPU.Idem + mm.CPU.Harness
			cell := num(mm.CPU.Postgres) + " / " + num(client) + " / " + num(mm.CPU.Postgres+client)
			if m.key == MPgbench1tx || m.key == MPgbenchFloor {
				cell = num(mm.CPU.Postgres) + " / – / –"
			}
			row = append(row, cell)
		}
		t.add(row...)
	}
	if !any {
		return ""
	}
	var idem []string
	for _, p := range r.Small {
		if m := p.Methods[MIdem]; m != nil && m.CPU != nil {
			idem = append(idem, fmt.Sprintf("%s µs in idem serve and %s µs in NATS and the harness at max_in_flight %d",
				num(m.CPU.Idem), num(m.CPU.Harness), p.InFlight))
		}
	}
	return "### (a) Small partitions: CPU per event, by process, µs\n\n" +
		"User and system time read from /proc around each closed-loop run, mean of the runs: PostgreSQL is every process of the cluster (backends, WAL writer, checkpointer, autovacuum); the client is the harness's own process (the pgx loops, the in-process handler, the embedded NATS server, the publisher) and, end to end, idem serve. pgbench's own process is not counted. " +
		"Of idem end to end's client share: " + strings.Join(idem, "; ") + ".\n\n" +
		t.String() + "\n"
}

// spread is "lo–hi" of xs.
func spread(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	return num(slices.Min(xs)) + "–" + num(slices.Max(xs))
}
