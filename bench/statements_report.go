package bench

import (
	"fmt"
	"strings"
)

var stmLabels = map[string]string{
	StmPrepare:  "prepare (named prepared statements), directly",
	StmDescribe: "describe (unnamed, descriptions cached), directly",
	StmExec:     "exec (unnamed, nothing cached), directly",
	StmPooled:   "auto through PgBouncer, transaction pooling (→ describe)",
}

var stmShort = map[string]string{StmDescribe: "describe", StmExec: "exec", StmPooled: "auto through PgBouncer"}

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
	w("The same delete_insert loads through `idem serve` with `postgres.statement_mode` prepare, describe and exec against PostgreSQL itself, and auto through PgBouncer (%s). "+
		"Every rep each way runs in turn, the order rotating, each in an `idem serve` of its own after a warm-up event; %d rep(s). Small events: %d 10-row partitions (every load a rerun) published at once, first publish → last ack, VACUUM (ANALYZE) and CHECKPOINT before each run; CPU per event from /proc over the same run. "+
		"Big loads: one partition into a plain table of four such partitions (index(event_date)), publish → ack, VACUUM (ANALYZE) and CHECKPOINT before each. Medians; ratios are to prepare, the mode auto picks when idem talks to PostgreSQL itself.\n\n",
		pooler, s.Reps, s.Events)
	t := &table{head: []string{"max_in_flight", "statement mode", "events/s", "÷ prepare", "runs, events/s", "CPU µs / event: idem", "PostgreSQL", "PgBouncer"}}
	for _, p := range s.Small {
		ref := p.Ways[StmPrepare]
		for _, k := range []string{StmPrepare, StmDescribe, StmExec, StmPooled} {
			m := p.Ways[k]
			if m == nil {
				continue
			}
			var runs []string
			for _, x := range m.Throughput.Runs {
				runs = append(runs, num(x))
			}
			idem, pg, pool := "–", "–", "–"
			if c := m.CPU; c != nil {
				idem, pg = num(c.Idem), num(c.Postgres)
				if k == StmPooled {
					pool = num(c.Pooler)
				}
			}
			rel := "–"
			if ref != nil {
				rel = ratio(m.Throughput.PerSec, ref.Throughput.PerSec)
			}
			t.add(fmt.Sprint(p.InFlight), stmLabels[k], num(m.Throughput.PerSec), rel, strings.Join(runs, ", "), idem, pg, pool)
		}
	}
	w("%s\n", t)
	if len(s.Big) > 0 {
		t = &table{head: []string{"rows", "statement mode", "s", "÷ prepare", "in transaction (audit started → finished) s", "every load, s"}}
		for _, bs := range s.Big {
			ref := medianOf(bs.Ways[StmPrepare])
			for _, k := range []string{StmPrepare, StmDescribe, StmExec, StmPooled} {
				ops := bs.Ways[k]
				if len(ops) == 0 {
					continue
				}
				op := medianOf(ops)
				var runs []string
				var tx []float64
				for _, o := range ops {
					runs = append(runs, fmt.Sprintf("%.3f", o.Ms/1000))
					tx = append(tx, o.InTxMs)
				}
				t.add(thousands(int64(bs.Rows)), stmLabels[k], fmt.Sprintf("%.3f", op.Ms/1000), ratio(op.Ms, ref.Ms),
					fmt.Sprintf("%.3f", median(tx)/1000), strings.Join(runs, ", "))
			}
		}
		w("%s\n", t)
	}
	if len(s.Routes) > 0 {
		var rs []string
		for _, k := range []string{StmPrepare, StmDescribe, StmExec, StmPooled} {
			if v, ok := s.Routes[k]; ok {
				rs = append(rs, "*"+k+"*: "+v)
			}
		}
		w("What each `idem serve` said at start: %s.\n\n", strings.Join(rs, "; "))
	}
	w("auto sends named prepared statements when it talks to PostgreSQL itself and unnamed ones (describe) behind a pooler, where a named statement would live on a server connection other clients get. ")
	if p := s.Small[0]; p.Ways[StmPrepare] != nil {
		ref := p.Ways[StmPrepare].Throughput.PerSec
		var parts []string
		for _, k := range []string{StmDescribe, StmExec, StmPooled} {
			if m := p.Ways[k]; m != nil && ref > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f×", stmShort[k], m.Throughput.PerSec/ref))
			}
		}
		w("At max_in_flight %d this run measured, in events/s against prepare: %s.", p.InFlight, strings.Join(parts, "; "))
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
