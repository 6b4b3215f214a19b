package bench

import (
	"fmt"
	"strings"
)

// The day-one rows of docs/BENCHMARKS.md's targets (Verdicts) and the
// day-one section of bench/FIGURES.md (its table, method and statements),
// rendered from ColdResults alone (`idembench -report … -coldreport FILE
// -docs docs`).

// coldTarget is one row of the day-one table that has a target: its value
// at each history size and whether that value meets it.
type coldTarget struct {
	target string
	ok     func(v float64) bool
}

var (
	atLeast12   = coldTarget{"≥ 1.20×", func(v float64) bool { return v >= 1.2 }}
	atLeast1    = coldTarget{"≥ 1.00×", func(v float64) bool { return v >= 1 }}
	atLeast09   = coldTarget{"≥ 0.90×", func(v float64) bool { return v >= 0.9 }}
	atMost03ms  = coldTarget{"≤ 0.3 ms", func(v float64) bool { return v <= 0.3 }}
	atMost06    = coldTarget{"≤ 0.60×", func(v float64) bool { return v <= 0.6 }}
	atMost250us = coldTarget{"≤ 250 µs", func(v float64) bool { return v <= 250 }}
	atMost64MiB = coldTarget{"≤ 64 MiB", func(v float64) bool { return v <= 64 }}
	within10pc  = coldTarget{"≤ 1.10×", func(v float64) bool { return v <= 1.1 }}
)

// historyLabel names a history size in a column head: 0, 1k, 10M.
func historyLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return thousands(int64(n))
}

func div(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}

func (p *ColdPass) perSec() float64 {
	if p == nil {
		return 0
	}
	return p.PerSec
}

func (p *ColdPass) cpu() ColdCPU {
	if p == nil || p.CPU == nil {
		return ColdCPU{}
	}
	return *p.CPU
}

func (p *ColdPgbench) tps() float64 {
	if p == nil {
		return 0
	}
	return p.TPS
}

func (p *ColdPgbench) cpuPerTx() float64 {
	if p == nil {
		return 0
	}
	return p.PostgresUsPerTx
}

// Markdown is the whole day-one section: Summary, then Details.
func (r *ColdResults) Markdown() string { return r.Summary() + r.Details() }

// Summary is the head of the day-one section: what was run, and the table.
func (r *ColdResults) Summary() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("## Day one: a fresh install's first backfill\n\n")
	w("What a new user meets: empty tables, a backlog, a nats-server of its own and a young audit history, at %s attempts of other datasets. ", r.historyList())
	w("From one `%s` run (mode **%s**, %d events per backlog) that started %s UTC and took %s, commit %s, on %d vCPU; figures of their own, apart from the rest of this file. Ratios above 1.00× mean idem is faster.\n\n",
		orDefault(r.Command, "idembench"), r.Mode, r.Events, r.Started.Format("2006-01-02 15:04"), r.Finished.Sub(r.Started).Round(1e9),
		orDefault(r.Machine.Commit, "unknown"), r.Machine.CPUs)
	t, _ := r.table()
	w("%s\n", t)
	return b.String()
}

// Verdicts are the day-one table's targets, one per row that has one: its
// value at every history size (in the order of r.Sizes, slashed), and the
// sizes where it was missed.
func (r *ColdResults) Verdicts() []Verdict {
	_, v := r.table()
	return v
}

// Details is the rest of the day-one section: the method, the run's
// remarks, then the top statements of every pass.
func (r *ColdResults) Details() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%s", r.method())
	if len(r.Notes) > 0 {
		w("Remarks of the run:\n\n")
		for _, n := range r.Notes {
			w("- %s\n", n)
		}
		w("\n")
	}
	w("%s", r.statements())
	return b.String()
}

func (r *ColdResults) historyList() string {
	var xs []string
	for _, s := range r.Sizes {
		xs = append(xs, historyLabel(s.Rows))
	}
	return strings.Join(xs, ", ")
}

// table is the day-one table: one column per history size, the target and
// its verdict; and the verdicts of its rows that have a target.
func (r *ColdResults) table() (string, []Verdict) {
	var verdicts []Verdict
	t := &table{head: []string{"history (attempts of other datasets)"}}
	for _, s := range r.Sizes {
		t.head = append(t.head, historyLabel(s.Rows))
	}
	t.head = append(t.head, "target", "verdict")
	base := func(f func(ColdSize) float64) float64 {
		if len(r.Sizes) == 0 {
			return 0
		}
		return f(r.Sizes[0])
	}
	plain := func(label string, f func(ColdSize) string) {
		row := []string{label}
		for _, s := range r.Sizes {
			row = append(row, f(s))
		}
		t.add(append(row, "", "")...)
	}
	value := func(label string, f func(ColdSize) float64) {
		plain(label, func(s ColdSize) string { return num(f(s)) })
	}
	targeted := func(label, unit string, tg coldTarget, f func(ColdSize) float64) {
		row := []string{label}
		var missed, at []string
		measured := 0
		for _, s := range r.Sizes {
			v := f(s)
			if v == 0 {
				row = append(row, "–")
				continue
			}
			measured++
			cell := fmt.Sprintf("%.2f%s", v, unit)
			if !tg.ok(v) {
				missed = append(missed, historyLabel(s.Rows))
				cell = "**" + cell + "**"
			}
			row = append(row, cell)
			at = append(at, cell)
		}
		verdict := "met"
		switch {
		case measured == 0:
			verdict = "–"
		case len(missed) > 0:
			verdict = "**missed** at " + strings.Join(missed, ", ")
		}
		t.add(append(row, tg.target, verdict)...)
		if measured > 0 {
			verdicts = append(verdicts, Verdict{Target: "day one: " + label + " " + tg.target,
				Measured: strings.Join(at, " / "), Met: len(missed) == 0, Where: strings.Join(missed, ", ")})
		}
	}
	pair := func(label string, f func(*ColdPass) float64) {
		plain(label, func(s ColdSize) string { return num(f(s.Cold)) + " / " + num(f(s.Warm)) })
	}

	e, q := r.Events, max(1, r.Events/4)
	value(fmt.Sprintf("cold: events/s, %s events into the empty target, max_in_flight 4", thousands(int64(e))), func(s ColdSize) float64 { return s.Cold.perSec() })
	value(fmt.Sprintf("warm: events/s, %s reruns after VACUUM ANALYZE, max_in_flight 4", thousands(int64(e))), func(s ColdSize) float64 { return s.Warm.perSec() })
	value(fmt.Sprintf("max_in_flight 1: events/s, %s reruns", thousands(int64(q))), func(s ColdSize) float64 { return s.InFlight1.perSec() })
	value("pgbench -c 4 -M prepared: tps (same pattern, advisory lock included)", func(s ColdSize) float64 { return s.Pgbench4.tps() })
	value("pgbench -c 1 -M prepared: tps", func(s ColdSize) float64 { return s.Pgbench1.tps() })
	targeted("cold ÷ warm", "×", atLeast09, func(s ColdSize) float64 { return div(s.Cold.perSec(), s.Warm.perSec()) })
	targeted("cold ÷ pgbench -c 4", "×", atLeast12, func(s ColdSize) float64 { return div(s.Cold.perSec(), s.Pgbench4.tps()) })
	targeted("warm ÷ pgbench -c 4", "×", atLeast12, func(s ColdSize) float64 { return div(s.Warm.perSec(), s.Pgbench4.tps()) })
	targeted("max_in_flight 1 ÷ pgbench -c 1", "×", atLeast1, func(s ColdSize) float64 { return div(s.InFlight1.perSec(), s.Pgbench1.tps()) })
	targeted(fmt.Sprintf("skipped duplicate: ms each (%s exact duplicates, max_in_flight 4)", thousands(int64(q))), " ms", atMost03ms,
		func(s ColdSize) float64 { return s.Skipped.MsPer() })
	pair("PostgreSQL CPU µs per event, cold / warm", func(p *ColdPass) float64 { return p.cpu().Postgres })
	value("pgbench -c 4: PostgreSQL CPU µs per transaction", func(s ColdSize) float64 { return s.Pgbench4.cpuPerTx() })
	targeted("PostgreSQL CPU per event ÷ pgbench's per transaction, cold", "×", atMost06,
		func(s ColdSize) float64 { return div(s.Cold.cpu().Postgres, s.Pgbench4.cpuPerTx()) })
	targeted("PostgreSQL CPU per event ÷ pgbench's per transaction, warm", "×", atMost06,
		func(s ColdSize) float64 { return div(s.Warm.cpu().Postgres, s.Pgbench4.cpuPerTx()) })
	targeted("idem serve CPU µs per event, cold", " µs", atMost250us, func(s ColdSize) float64 { return s.Cold.cpu().Idem })
	targeted("idem serve CPU µs per event, warm", " µs", atMost250us, func(s ColdSize) float64 { return s.Warm.cpu().Idem })
	pair("nats-server CPU µs per event, cold / warm", func(p *ColdPass) float64 { return p.cpu().NATS })
	// What the per-process CPU projects on a bigger machine, were the CPU
	// the only limit (it ignores locks, fsyncs and round trips; pgbench's
	// own client is not counted): cores ÷ CPU per event, idem's over
	// pgbench's.
	for _, cores := range []float64{4, 8} {
		plain(fmt.Sprintf("projected on %.0f cores, cold: idem ÷ pgbench -c 4 events/s (CPU-bound)", cores), func(s ColdSize) string {
			c := s.Cold.cpu()
			idem, pg := c.Postgres+c.Idem+c.NATS, s.Pgbench4.cpuPerTx()
			if idem == 0 || pg == 0 {
				return "–"
			}
			return fmt.Sprintf("%s ÷ %s = %.2f×", num(cores*1e6/idem), num(cores*1e6/pg), pg/idem)
		})
	}
	peak := func(p *ColdPass) float64 {
		if p == nil {
			return 0
		}
		return p.PeakMiB
	}
	targeted("idem serve peak RSS (VmHWM) MiB, the larger of cold and warm", " MiB", atMost64MiB,
		func(s ColdSize) float64 { return max(peak(s.Cold), peak(s.Warm)) })
	flat := func(label string, pass func(ColdSize) *ColdPass, cost func(*ColdPass) float64) {
		b := base(func(s ColdSize) float64 { return cost(pass(s)) })
		targeted(label, "×", within10pc, func(s ColdSize) float64 { return div(cost(pass(s)), b) })
	}
	cold := func(s ColdSize) *ColdPass { return s.Cold }
	warm := func(s ColdSize) *ColdPass { return s.Warm }
	pgCPU := func(p *ColdPass) float64 { return p.cpu().Postgres }
	perEvent := func(p *ColdPass) float64 { return div(1, p.perSec()) }
	flat("flat: PostgreSQL CPU per event ÷ at 0 attempts, cold", cold, pgCPU)
	flat("flat: time per event (1 ÷ events/s) ÷ at 0 attempts, cold", cold, perEvent)
	flat("flat: PostgreSQL CPU per event ÷ at 0 attempts, warm", warm, pgCPU)
	flat("flat: time per event (1 ÷ events/s) ÷ at 0 attempts, warm", warm, perEvent)
	plain("the audit at the cold pass: analysed by autovacuum, reltuples", func(s ColdSize) string {
		switch {
		case s.Rows == 0:
			return "empty"
		case s.Autovacuum.AuditAnalyzed:
			return "yes, " + thousands(int64(s.Autovacuum.AuditReltuples))
		}
		return "no, " + thousands(int64(s.Autovacuum.AuditReltuples))
	})
	return t.String(), verdicts
}

// method is the paragraph that says how the table was measured.
func (r *ColdResults) method() string {
	e, q := r.Events, max(1, r.Events/4)
	return fmt.Sprintf(`**Method.** For each history size, in turn: a new database on the benchmark's PostgreSQL (pg_stat_statements loaded), migrated by `+"`idem migrate`"+` of the binary under test; the history seeded in one INSERT .. SELECT into idem.pipeline_audit and idem.run_ledger for other datasets of the same pipeline (datasets × days × 5 attempts and the ledger of the successes, as bench/HISTORY-COSTS.md's; every attempt started in the last 30 days, so the default retention prunes none), then never ANALYZEd by the harness: it waits until autovacuum has nothing left to do with the seeded tables (last row of the table), as a young install's statistics are whatever autovacuum made. A source of %[1]s ten-row partitions (analysed, index(event_date)) and an empty target with index(event_date), never analysed before the cold pass. A new nats-server process (built from the version go.mod requires, with a new file store, %[3]s) and `+"`idem streams`"+`. Each pass: CHECKPOINT, the backlog published (one event per partition, new run_ids, each with its own Nats-Msg-Id) while no `+"`idem serve`"+` runs, pg_stat_statements reset, then a new `+"`idem serve`"+` (max_group at its default) started and the consumer's ack floor watched on the NATS server until it passes the last event (the harness sends no SQL meanwhile); events/s = events ÷ (the last finished_at − the first started_at of their attempts in the audit), every attempt checked to have ended as expected. **cold**: %[1]s events into the empty target at max_in_flight 4. Then, before every later pass and pgbench run, VACUUM ANALYZE of the target, the source and every idem table. **warm**: %[1]s reruns of the same partitions. **skipped duplicate**: %[2]s events whose run_ids already succeeded (the warm pass's), ms each = the span ÷ %[2]s. **max_in_flight 1**: %[2]s reruns. **pgbench**: BEGIN; pg_advisory_xact_lock(hashtext(partition)); the audit's started row; DELETE the partition; INSERT .. SELECT it from the source; the audit row updated to success; COMMIT, a random partition each, `+"`-M prepared`"+`, -c 4 for %[1]s transactions and -c 1 for %[2]s, on the tables the passes filled. CPU is user + system time from /proc from just before `+"`idem serve`"+` starts to the drain: the PostgreSQL cluster (every process, backends counted once reaped, autovacuum included), the serve process (a new one per pass, so its start-up is in), the nats-server child; pgbench's is the cluster's around the run, per transaction. Peak RSS is the serve process's VmHWM at the drain. Flat: each size's per-event cost over the same cost at 0 attempts. The run starts with one unrecorded round of every pass at 0 attempts (full and quick modes), so the first size does not pay for the harness's new cluster (its first WAL segments) and the binaries' first start. Run with `+"`make bench-cold`"+` (this section) or `+"`make bench-cold-quick`"+` (0 and 1k attempts, 600 events, about two minutes, `+"`bin/cold-quick.json`"+`).

`, thousands(int64(e)), thousands(int64(q)), natsSync(r.Machine.NATSSync))
}

// natsSync says how the day-one nats-server synced its writes.
func natsSync(sync string) string {
	if sync == "always" {
		return "`sync_interval: always` as deploy/nats ships it: every write on disk before its ack"
	}
	return "the server's default sync, every two minutes: a PubAck is not an fsync"
}

// statements renders the top statements of every pass, folded.
func (r *ColdResults) statements() string {
	var b strings.Builder
	for _, s := range r.Sizes {
		for _, p := range []struct {
			name string
			pass *ColdPass
		}{{"cold", s.Cold}, {"warm", s.Warm}, {"skipped duplicates", s.Skipped}, {"max_in_flight 1", s.InFlight1}} {
			if p.pass == nil || len(p.pass.Top) == 0 {
				continue
			}
			fmt.Fprintf(&b, "<details><summary>Top statements at %s attempts, %s pass (%s events, by execution + planning time)</summary>\n\n",
				historyLabel(s.Rows), p.name, thousands(int64(p.pass.Events)))
			b.WriteString(coldStatementsTable(p.pass.Top))
			b.WriteString("\n</details>\n\n")
		}
	}
	return b.String()
}

func coldStatementsTable(top []ColdStatement) string {
	t := &table{head: []string{"statement", "calls", "mean ms", "planning ms (total)", "total ms", "rows"}}
	for _, st := range top {
		t.add("`"+strings.ReplaceAll(st.Query, "|", `\|`)+"`", thousands(st.Calls), fmt.Sprintf("%.3f", st.MeanMs),
			fmt.Sprintf("%.1f", st.PlanTotalMs), fmt.Sprintf("%.1f", st.TotalMs), thousands(st.Rows))
	}
	return t.String()
}
