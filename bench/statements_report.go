package bench

import (
	"fmt"
	"slices"
	"strings"
)

var stmLabels = map[string]string{
	StmPrepare:  "prepare (named prepared statements), directly",
	StmDescribe: "describe (unnamed, descriptions cached), directly",
	StmExec:     "pgx's exec (unnamed, nothing cached; not a statement_mode), directly",
	StmPooled:   "auto through PgBouncer, transaction pooling (→ describe)",
}

var stmShort = map[string]string{StmDescribe: "describe", StmExec: "exec", StmPooled: "auto through PgBouncer"}

// stmOrder is the order of (j)'s rows; prepare, the reference, first.
var stmOrder = []string{StmPrepare, StmDescribe, StmExec, StmPooled}

// pairedRatio is the median and range of a way's ratios to prepare, rep by
// rep: each pair ran one turn apart, so drift between reps falls out.
type pairedRatio struct {
	n              int
	median, lo, hi float64
}

func pairedOf(xs, ref []float64) pairedRatio {
	var rs []float64
	for i := range min(len(xs), len(ref)) {
		if ref[i] > 0 {
			rs = append(rs, xs[i]/ref[i])
		}
	}
	if len(rs) == 0 {
		return pairedRatio{}
	}
	return pairedRatio{n: len(rs), median: median(rs), lo: slices.Min(rs), hi: slices.Max(rs)}
}

func (r pairedRatio) String() string {
	if r.n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", r.median, r.lo, r.hi)
}

// paired is way k's events/s over prepare's, rep by rep.
func (p StatementModesSmall) paired(k string) pairedRatio {
	m, ref := p.Ways[k], p.Ways[StmPrepare]
	if m == nil || ref == nil {
		return pairedRatio{}
	}
	return pairedOf(m.Throughput.Runs, ref.Throughput.Runs)
}

// paired is way k's load time over prepare's, rep by rep.
func (b StatementModesBig) paired(k string) pairedRatio {
	ms := func(ops []Op) []float64 {
		out := make([]float64, len(ops))
		for i, o := range ops {
			out[i] = o.Ms
		}
		return out
	}
	return pairedOf(ms(b.Ways[k]), ms(b.Ways[StmPrepare]))
}

// statementModesMarkdown renders (j).
func (r *Results) statementModesMarkdown() string {
	s := r.StatementModes
	if s == nil || len(s.Small) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("### (j) Statement modes: prepare, describe, exec, and through PgBouncer\n\n")
	if f := s.From; f != nil {
		var load []string
		for _, l := range f.Load {
			load = append(load, fmt.Sprintf("%s %.2f", l.At, l.Load1))
		}
		w("_These figures come from a run of their own, `%s` (mode %s), started %s UTC, %s, commit %s; load average (1 min) %s. The other sections come from the run named at the top._\n\n",
			orDefault(f.Command, "idembench"), f.Mode, f.Started.Format("2006-01-02 15:04"), f.Finished.Sub(f.Started).Round(1e9), orDefault(f.Commit, "unknown"), strings.Join(load, "; "))
	}
	pooler := "no pgbouncer was found, so that row is empty"
	if s.Pooler != "" {
		pooler = s.Pooler + ", default settings otherwise; idem's session settings (synchronous_commit = off, jit = off) set on its role for the database, as deploy/postgres/grants.sql does, since behind a pooler idem sends none at connect"
	}
	w("The same delete_insert loads through `idem serve` with `postgres.statement_mode` prepare and describe, and pgx's exec mode (set through the URL's default_query_exec_mode; it is no statement_mode, since it binds a []byte as bytea and idem passes JSON so), against PostgreSQL itself, and auto through PgBouncer (%s). "+
		"Every rep each way runs in turn, the order rotating, each in an `idem serve` of its own after a warm-up event; %d rep(s). Small events: %d 10-row partitions (every load a rerun) published at once, first publish → last ack, VACUUM (ANALYZE) and CHECKPOINT before each run; CPU per event from /proc over the same run. "+
		"Big loads: one partition into a plain table of four such partitions (index(event_date)), publish → ack, VACUUM (ANALYZE) and CHECKPOINT before each. Medians. Ratios are to prepare, the mode auto picks when idem talks to PostgreSQL itself, and taken rep by rep (each way against prepare's run of the same rep, one turn apart), so the box's drift between reps falls out; their range is the spread.\n\n",
		pooler, s.Reps, s.Events)
	t := &table{head: []string{"max_in_flight", "statement mode", "events/s", "runs, events/s", "events/s ÷ prepare's, same rep: median (lo–hi)",
		"CPU µs / event: idem", "PostgreSQL", "PgBouncer", "PostgreSQL CPU ÷ prepare's"}}
	for _, p := range s.Small {
		for _, k := range stmOrder {
			m := p.Ways[k]
			if m == nil {
				continue
			}
			var runs []string
			for _, x := range m.Throughput.Runs {
				runs = append(runs, num(x))
			}
			idem, pg, pool, pgRel := "–", "–", "–", "–"
			if c := m.CPU; c != nil {
				idem, pg = num(c.Idem), num(c.Postgres)
				if k == StmPooled {
					pool = num(c.Pooler)
				}
				if ref := p.Ways[StmPrepare]; ref != nil && ref.CPU != nil {
					pgRel = ratio(c.Postgres, ref.CPU.Postgres)
				}
			}
			t.add(fmt.Sprint(p.InFlight), stmLabels[k], num(m.Throughput.PerSec), strings.Join(runs, ", "), p.paired(k).String(), idem, pg, pool, pgRel)
		}
	}
	w("%s\n", t)
	if len(s.Big) > 0 {
		t = &table{head: []string{"rows", "statement mode", "s", "every load, s", "time ÷ prepare's, same rep: median (lo–hi)", "in transaction (audit started → finished) s"}}
		for _, bs := range s.Big {
			for _, k := range stmOrder {
				ops := bs.Ways[k]
				if len(ops) == 0 {
					continue
				}
				var runs []string
				var tx []float64
				for _, o := range ops {
					runs = append(runs, fmt.Sprintf("%.3f", o.Ms/1000))
					tx = append(tx, o.InTxMs)
				}
				t.add(thousands(int64(bs.Rows)), stmLabels[k], fmt.Sprintf("%.3f", medianOf(ops).Ms/1000), strings.Join(runs, ", "),
					bs.paired(k).String(), fmt.Sprintf("%.3f", median(tx)/1000))
			}
		}
		w("%s\n", t)
	}
	if len(s.Routes) > 0 {
		var rs []string
		for _, k := range stmOrder {
			if v, ok := s.Routes[k]; ok {
				rs = append(rs, "*"+k+"*: "+v)
			}
		}
		w("What each `idem serve` said at start: %s.\n\n", strings.Join(rs, "; "))
	}
	w("auto sends named prepared statements when it talks to PostgreSQL itself and unnamed ones (describe) behind a pooler, where a named statement would live on a server connection other clients get. ")
	var parts, cpu []string
	for _, p := range s.Small {
		var each, pg []string
		ref := p.Ways[StmPrepare]
		for _, k := range stmOrder[1:] {
			if r := p.paired(k); r.n > 0 {
				each = append(each, fmt.Sprintf("%s %.2f×", stmShort[k], r.median))
			}
			if m := p.Ways[k]; m != nil && m.CPU != nil && ref != nil && ref.CPU != nil && ref.CPU.Postgres > 0 {
				pg = append(pg, fmt.Sprintf("%s %.2f×", stmShort[k], m.CPU.Postgres/ref.CPU.Postgres))
			}
		}
		parts = append(parts, fmt.Sprintf("at max_in_flight %d %s", p.InFlight, strings.Join(each, ", ")))
		if len(pg) > 0 {
			cpu = append(cpu, fmt.Sprintf("at max_in_flight %d %s", p.InFlight, strings.Join(pg, ", ")))
		}
	}
	w("In this run, small events' events/s against prepare's in the same rep (medians): %s.", strings.Join(parts, "; "))
	if len(cpu) > 0 {
		w(" PostgreSQL's CPU per event against prepare's: %s.", strings.Join(cpu, "; "))
	}
	w("\n\n")
	return b.String()
}

// medianOf is the op of median time of ops (zero when none ran).
func medianOf(ops []Op) Op {
	if len(ops) == 0 {
		return Op{}
	}
	return medianOp(ops)
}
