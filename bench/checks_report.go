package bench

import (
	"fmt"
	"slices"
	"strings"
)

var checksLabels = map[string]string{
	ChecksNone:           "none",
	ChecksRowCountChange: "row_count_change alone",
	ChecksAll:            "all five: unique, not_null, accepted_values, accepted_range, row_count_change",
}

// medianLoad is the load of median time of a variant, and how many ran.
func (c *ChecksResult) medianLoad(v string) (Op, int) {
	ls := c.Big[v]
	if len(ls) == 0 {
		return Op{}, 0
	}
	ops := make([]Op, len(ls))
	for i, l := range ls {
		ops[i] = l.Op
	}
	return medianOp(ops), len(ls)
}

func (c *ChecksResult) medianOf(v string, f func(ChecksLoad) float64) float64 {
	var xs []float64
	for _, l := range c.Big[v] {
		xs = append(xs, f(l))
	}
	return median(xs)
}

// checksMarkdown renders (g).
func (r *Results) checksMarkdown() string {
	c := r.Checks
	if c == nil {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("### (g) Checks: the same loads with a dataset's checks and without\n\n")
	if f := c.From; f != nil {
		var load []string
		for _, l := range f.Load {
			load = append(load, fmt.Sprintf("%s %.2f", l.At, l.Load1))
		}
		w("_These figures come from a run of their own, `%s` (mode %s), started %s UTC, %s, commit %s; load average (1 min) %s. The other sections come from the run named at the top._\n\n",
			orDefault(f.Command, "idembench"), f.Mode, f.Started.Format("2006-01-02 15:04"), f.Finished.Sub(f.Started).Round(1e9), orDefault(f.Commit, "unknown"), strings.Join(load, "; "))
	}
	if len(c.Big) > 0 {
		none, _ := c.medianLoad(ChecksNone)
		w("delete_insert of one partition of %s rows into a plain table of four such partitions (index on event_date), through `idem serve` at max_in_flight 1, publish → ack (after the durable commit). "+
			"The three datasets load the same partition of the same table from the same staging table and take turns, %d rounds, the order rotating each round; VACUUM (ANALYZE) and CHECKPOINT before every load, so each starts from the same table. Medians.\n\n",
			thousands(int64(c.Rows)), c.Reps)
		t := &table{head: []string{"checks", "ms", "÷ none", "in transaction (audit started → finished) ms", "÷ none", "the checks' round trip, idem's timing, ms", "every load, ms (round 1, 2, …)"}}
		for _, v := range checksVariants {
			op, n := c.medianLoad(v)
			if n == 0 {
				continue
			}
			var runs []string
			for _, l := range c.Big[v] {
				runs = append(runs, num(l.Ms))
			}
			inTx := c.medianOf(v, func(l ChecksLoad) float64 { return l.InTxMs })
			noneTx := c.medianOf(ChecksNone, func(l ChecksLoad) float64 { return l.InTxMs })
			t.add(checksLabels[v], num(op.Ms), ratio(op.Ms, none.Ms), num(inTx), ratio(inTx, noneTx),
				num(c.medianOf(v, func(l ChecksLoad) float64 { return l.ChecksMs })), strings.Join(runs, ", "))
		}
		w("%s\n", t)
		if d := c.Dissect; d != nil {
			w("Where the time goes: the statements the checks of `all five` build, captured from idem's handler, run on the same partition in one transaction that does the same DELETE + INSERT .. SELECT and rolls back, on a connection with idem's session settings (medians of 3):\n\n")
			t = &table{head: []string{"step", "ms", "÷ the load without checks"}}
			t.add("DELETE + INSERT .. SELECT of the partition, in this transaction", num(d.LoadMs), ratio(d.LoadMs, none.Ms))
			t.add("row_count_change's baseline, `SELECT count(*)` of the partition before the load: not run (the DELETE's row count is the baseline)", num(d.BaselineMs), ratio(d.BaselineMs, none.Ms))
			t.add("the checks' statement (one statement: every check's failing count)", num(d.StatementMs), ratio(d.StatementMs, none.Ms))
			for _, a := range d.Alone {
				t.add("— "+a.Name+", alone", num(a.Ms), ratio(a.Ms, none.Ms))
			}
			t.add("— for comparison, a bare `SELECT count(*)` of the produced rows", num(d.CountMs), ratio(d.CountMs, none.Ms))
			for _, k := range sortedKeys(d.Settings) {
				t.add("— the checks' statement with `SET LOCAL "+k+"`", num(d.Settings[k]), ratio(d.Settings[k], none.Ms))
			}
			w("%s\n", t)
			w("The checks' statement under EXPLAIN (ANALYZE, BUFFERS), %s ms (its per-row timing makes it slower than above; the shares are indicative), by part:\n\n", num(d.ExplainMs))
			t = &table{head: []string{"part", "ms", "share", "plan, outermost node first"}}
			for _, p := range d.Parts {
				t.add(p.Name, num(p.Ms), fmt.Sprintf("%.0f%%", 100*p.Ms/max(d.ExplainMs, 1e-9)), p.Detail)
			}
			w("%s\n", t)
			w("<details><summary>The statement and its plan</summary>\n\n```sql\n%s\n```\n\n```\n%s\n```\n\n</details>\n\n", strings.TrimSpace(d.Statement), strings.TrimSpace(d.Plan))
		}
	}
	if rp := c.Replay; rp != nil && len(rp.StepsWith) > 0 {
		w("Where a small event's time goes: idem's round trips for one load of each dataset, captured from its handler and replayed %d times each in turns on one connection with idem's session settings (no NATS): %s events/s without the check, %s with (%s the time per event).\n\n",
			rp.Events, num(rp.Without.PerSec), num(rp.With.PerSec), ratio(rp.Without.PerSec, rp.With.PerSec))
		t := &table{head: []string{"#", "round trip", "SQL", "µs with the check", "µs without"}}
		j := 0
		var with, without float64
		for _, s := range rp.StepsWith {
			other := "– (added by the check)"
			if j < len(rp.StepsWithout) && rp.StepsWithout[j].SQL == s.SQL && rp.StepsWithout[j].Kind == s.Kind {
				other = num(rp.StepsWithout[j].MeanUs)
				without += rp.StepsWithout[j].MeanUs
				j++
			}
			with += s.MeanUs
			t.add(fmt.Sprint(s.Index), s.Kind, "`"+strings.ReplaceAll(s.SQL, "|", "\\|")+"`", num(s.MeanUs), other)
		}
		for ; j < len(rp.StepsWithout); j++ {
			s := rp.StepsWithout[j]
			without += s.MeanUs
			t.add("", s.Kind, "`"+strings.ReplaceAll(s.SQL, "|", "\\|")+"`", "– (not with the check)", num(s.MeanUs))
		}
		t.add("", "", "**per event**", "**"+num(with)+"**", "**"+num(without)+"**")
		w("%s\n", t)
	}
	if len(c.Small) > 0 {
		w("10-row partitions (every load a rerun), %d events per run published at once, first publish → last ack. A dataset with `checks: [row_count: {min: 1}]` and one without load the same partitions of the same table and take turns, %d runs each; medians.\n\n",
			r.Sizes.Events, c.Reps)
		t := &table{head: []string{"max_in_flight", "without: events/s", "with row_count: events/s", "time per event, with ÷ without", "runs without", "runs with"}}
		for _, p := range c.Small {
			runs := func(th Throughput) string {
				var s []string
				for _, x := range th.Runs {
					s = append(s, num(x))
				}
				return strings.Join(s, ", ")
			}
			t.add(fmt.Sprint(p.InFlight), num(p.Without.PerSec), num(p.With.PerSec), ratio(p.Without.PerSec, p.With.PerSec), runs(p.Without), runs(p.With))
		}
		w("%s\n", t)
	}
	return b.String()
}

// checksVerdicts are (g)'s targets.
func (r *Results) checksVerdicts(add func(met bool, target, format string, args ...any)) {
	c := r.Checks
	if c == nil {
		return
	}
	none, n := c.medianLoad(ChecksNone)
	all, _ := c.medianLoad(ChecksAll)
	rcc, _ := c.medianLoad(ChecksRowCountChange)
	if none.Ms > 0 && all.Ms > 0 {
		x := all.Ms / none.Ms
		inTx := c.medianOf(ChecksAll, func(l ChecksLoad) float64 { return l.InTxMs }) / max(c.medianOf(ChecksNone, func(l ChecksLoad) float64 { return l.InTxMs }), 1e-9)
		add(x <= 1.30, c.Label+" delete_insert with five checks (unique, not_null, accepted_values, accepted_range, row_count_change): ≤ 1.30× without",
			"%s vs %s ms = %.2f× (medians of %d loads each, in turns; in transaction %.2f×; row_count_change alone %.2f×)", num(all.Ms), num(none.Ms), x, n, inTx, rcc.Ms/none.Ms)
	}
	for _, p := range c.Small {
		if p.With.PerSec == 0 || p.Without.PerSec == 0 {
			continue
		}
		x := p.Without.PerSec / p.With.PerSec
		add(x <= 1.05, fmt.Sprintf("small, max_in_flight %d: a row_count check ≤ 1.05× the time without", p.InFlight),
			"%s vs %s events/s: %.2f× the time per event (medians of %d runs each, in turns)", num(p.With.PerSec), num(p.Without.PerSec), x, len(p.With.Runs))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
