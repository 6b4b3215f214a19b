package bench

import (
	"cmp"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/audit"
)

// LoneResult is (i): the latency of an event nothing else is queued with,
// publish to ack, one event at a time through `idem serve` (max_in_flight
// 1). With Options.BaselineBin, an earlier idem runs the same events on a
// database of its own, the two taking turns, so the two compare in one run.
type LoneResult struct {
	Events   int        `json:"events"`
	Reps     int        `json:"reps"`
	Current  LonePoint  `json:"current"`
	Baseline *LonePoint `json:"baseline,omitempty"`
	// BaselineLabel names the earlier binary (its -baseline argument).
	BaselineLabel string `json:"baseline_label,omitempty"`
}

// LonePoint is one binary's latencies: the median over its runs of each
// run's p50 and p99, in milliseconds.
type LonePoint struct {
	P50    float64   `json:"p50_ms"`
	P99    float64   `json:"p99_ms"`
	Runs50 []float64 `json:"runs_p50_ms"`
	Runs99 []float64 `json:"runs_p99_ms"`
}

func (p *LonePoint) add(lat []time.Duration) {
	p.Runs50 = append(p.Runs50, percentile(lat, 50))
	p.Runs99 = append(p.Runs99, percentile(lat, 99))
	p.P50, p.P99 = median(p.Runs50), median(p.Runs99)
}

func loneDS() dataset { return smallDataset("lone", "lone") }

// runLone is (i).
func (e *env) runLone(ctx context.Context) error {
	n, reps := max(20, e.sizes.PacedEvents/5), max(e.sizes.Reps, e.sizes.ChecksReps, 2)
	// Run rep loads partitions rep*n up to (rep+1)*n; the warm-ups share
	// the one after them all.
	parts := n*reps + 1
	out := &LoneResult{Events: n, Reps: reps}
	e.res.Lone = out
	if err := e.smallTables(ctx, e.pool, "lone", parts); err != nil {
		return err
	}
	var base *loneDB
	if e.opts.BaselineBin != "" {
		var err error
		if base, err = e.baselineDB(ctx, parts); err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		defer base.close(ctx, e)
		out.Baseline, out.BaselineLabel = &LonePoint{}, cmp.Or(e.opts.BaselineLabel, e.opts.BaselineBin)
	}
	cur := &loneDB{who: "current", url: e.dbURL, pool: e.pool, bin: e.idemBin}
	for rep := range reps {
		ways := []*loneDB{cur}
		if base != nil {
			ways = append(ways, base)
			if rep%2 == 1 {
				ways = []*loneDB{base, cur}
			}
		}
		for _, w := range ways {
			lat, err := e.loneRun(ctx, w, rep, n, parts-1)
			if err != nil {
				return err
			}
			if w == cur {
				out.Current.add(lat)
			} else {
				out.Baseline.add(lat)
			}
		}
	}
	e.logf("lone events: p50 %.2f ms, p99 %.2f ms", out.Current.P50, out.Current.P99)
	if out.Baseline != nil {
		e.logf("lone events, baseline: p50 %.2f ms, p99 %.2f ms", out.Baseline.P50, out.Baseline.P99)
	}
	return nil
}

// loneDB is where one binary's lone events load.
type loneDB struct {
	who, url, bin string
	pool          *pgxpool.Pool
}

// use points the harness (startIdem, waitAudit, exec) at d's binary and
// database until restore is called.
func (e *env) use(d *loneDB) (restore func()) {
	url, pool, bin := e.dbURL, e.pool, e.idemBin
	e.dbURL, e.pool, e.idemBin = d.url, d.pool, d.bin
	return func() { e.dbURL, e.pool, e.idemBin = url, pool, bin }
}

// close drops the baseline's database of its own.
func (d *loneDB) close(ctx context.Context, e *env) {
	d.pool.Close()
	if admin, err := pgx.Connect(ctx, e.adminURL); err == nil {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{e.baselineName()}.Sanitize()+" WITH (FORCE)")
		admin.Close(ctx)
	}
}

// baselineName is the baseline's database.
func (e *env) baselineName() string { return e.dbName + "_base" }

// baselineDB makes a database for the earlier binary, whose schema it
// creates itself with `idem migrate` (an earlier idem refuses a schema
// newer than it knows), seeded as the harness's own.
func (e *env) baselineDB(ctx context.Context, parts int) (*loneDB, error) {
	name := e.baselineName()
	admin, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return nil, err
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	admin.Close(ctx)
	if err != nil {
		return nil, err
	}
	d := &loneDB{who: "baseline", bin: e.opts.BaselineBin}
	if d.url, err = withDatabase(e.adminURL, name); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, d.bin, "migrate", "--database-url", d.url)
	cmd.Env = childEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s migrate: %w\n%s", d.bin, err, out)
	}
	if d.pool, err = pgxpool.New(ctx, d.url); err != nil {
		return nil, err
	}
	if err := e.smallTables(ctx, d.pool, "lone", parts); err != nil {
		return nil, err
	}
	// The same history in the audit as the harness's database.
	restore := e.use(d)
	defer restore()
	return d, e.seedAudit(ctx, 5*e.sizes.Partitions)
}

// loneRun starts w's binary on w's database, warms it up on partition
// warmDay and loads n events one at a time, each published once the previous one was acked; it returns each
// one's time from publish to ack.
func (e *env) loneRun(ctx context.Context, w *loneDB, rep, n, warmDay int) ([]time.Duration, error) {
	defer e.use(w)()
	who := w.who
	proc, err := e.startIdem(ctx, fmt.Sprintf("lone-%s-r%d", who, rep), 1, []dataset{loneDS()})
	if err != nil {
		return nil, err
	}
	defer proc.kill()
	s := &small{env: e}
	d := loneDS()
	warm := fmt.Sprintf("lone-warm-%s-r%d", who, rep)
	if _, err := s.idemRun(ctx, proc, []event{{d.Name, dayKey(smallBase, warmDay), warm}}, warm, audit.StatusSuccess); err != nil {
		return nil, fmt.Errorf("%s warm-up: %w", who, err)
	}
	if err := e.settle(ctx, "bench.lone_t", "idem.pipeline_audit", "idem.run_ledger"); err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("lone-%s-r%d", who, rep)
	lat := make([]time.Duration, n)
	for i := range n {
		ev := event{d.Name, dayKey(smallBase, rep*n+i), fmt.Sprintf("%s-%05d", prefix, i)}
		m, err := e.msg(ev)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		ack, err := e.js.PublishMsg(ctx, m)
		if err != nil {
			return nil, err
		}
		at, err := proc.acks.wait(ctx, []uint64{ack.Sequence}, time.Minute)
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", who, err, proc.tail())
		}
		lat[i] = at[0].Sub(t0)
	}
	if err := e.waitAudit(ctx, prefix, audit.StatusSuccess, n, 10*time.Second); err != nil {
		return nil, err
	}
	return lat, proc.stop()
}

// loneMarkdown renders (i).
func (r *Results) loneMarkdown() string {
	l := r.Lone
	if l == nil || len(l.Current.Runs50) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("### (i) A lone event: publish → ack, nothing else queued\n\n")
	w("%d events of 10-row partitions, each published once the previous one was acked, through `idem serve` at max_in_flight 1; %d runs, each a new process after a warm-up event. Medians over the runs of each run's p50 and p99.", l.Events, l.Reps)
	if l.Baseline != nil {
		w(" The baseline, `%s`, ran the same events on a database of its own (migrated by itself), the two taking turns.", l.BaselineLabel)
	}
	w("\n\n")
	t := &table{head: []string{"binary", "p50 ms", "p99 ms", "runs p50", "runs p99"}}
	runs := func(xs []float64) string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = num(x)
		}
		return strings.Join(s, ", ")
	}
	t.add("this idem", num(l.Current.P50), num(l.Current.P99), runs(l.Current.Runs50), runs(l.Current.Runs99))
	if l.Baseline != nil {
		t.add("baseline", num(l.Baseline.P50), num(l.Baseline.P99), runs(l.Baseline.Runs50), runs(l.Baseline.Runs99))
		t.add("this ÷ baseline", ratio(l.Current.P50, l.Baseline.P50), ratio(l.Current.P99, l.Baseline.P99), "", "")
	}
	w("%s\n", t)
	return b.String()
}
