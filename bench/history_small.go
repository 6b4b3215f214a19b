package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
)

// Small-event throughput on each history: idem's handler, in process (no
// NATS), loads 10-row partitions (delete_insert, every load a rerun) into a
// target table of the history's own database, under the history's pipeline
// name, so its audit and ledger statements probe the seeded indexes. The
// sizes take turns, rep by rep, so a change in the box's load hits both.

// HistoryThroughput is one closed-loop measurement at each size.
type HistoryThroughput struct {
	InFlight int
	Events   int         // per run
	Runs     [][]float64 // events/s of each rep, one slice per size
	PerSec   []float64   // the median of Runs, one per size
}

// Ratio is the largest size's events/s over the smallest's: 1.0 is flat,
// higher is better.
func (t HistoryThroughput) Ratio() float64 { return t.PerSec[len(t.PerSec)-1] / t.PerSec[0] }

// HistoryStep is one round trip of a load, replayed at concurrency 1: its
// mean time at each size.
type HistoryStep struct {
	Kind, SQL string
	Runs      [][]float64 // each rep's mean, one slice per size
	MeanUs    []float64   // the median of Runs, one per size
}

const (
	historySmallReps   = 5
	historyReplayShare = 3 // the replay runs Events / historyReplayShare events
)

// historyInFlight are the concurrencies measured, in this order.
var historyInFlight = []int{4, 1}

// historySmall is the small-event set-up in one history's database; s.load
// holds the captured round trips of one load.
type historySmall struct {
	s      *small
	hpool  *pgxpool.Pool
	h      *handlers.Handler
	replay *pgx.Conn // idem's session settings, for the replayed round trips
	events int
}

// newHistorySmall creates the small tables in the database url names (pool
// is the harness's pool on it), builds idem's handler under the history's
// pipeline name, loads every partition once (the first pass, which also
// warms the caches) and captures one load's round trips.
func newHistorySmall(ctx context.Context, pool *pgxpool.Pool, url string, events int, progress io.Writer) (*historySmall, error) {
	params, err := idemRuntimeParams(url)
	if err != nil {
		return nil, err
	}
	e := &env{
		opts: Options{Progress: progress}, sizes: Sizes{Partitions: events + 1}, res: &Results{},
		dbURL: url, pool: pool, idemParams: params,
	}
	hs := &historySmall{s: &small{env: e, pipeline: historyPipeline}, events: events}
	if err := e.exec(ctx, "CREATE SCHEMA bench"); err != nil {
		return nil, err
	}
	if err := e.setupSmall(ctx); err != nil {
		return nil, err
	}
	if hs.hpool, err = e.poolAsIdem(ctx, slices.Max(historyInFlight)); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			hs.close()
		}
	}()
	if hs.h, err = hs.s.handler(hs.hpool); err != nil {
		return nil, err
	}
	if hs.replay, err = e.connectAsIdem(ctx); err != nil {
		return nil, err
	}
	// The first pass: every partition gets an audited success before the
	// measured reruns.
	if _, err := hs.closed(ctx, slices.Max(historyInFlight), smallEvents("first", events)); err != nil {
		return nil, fmt.Errorf("first pass: %w", err)
	}
	// One load's round trips, captured as the main benchmark captures them.
	if err := hs.s.capture(ctx); err != nil {
		return nil, err
	}
	ok = true
	return hs, nil
}

func (hs *historySmall) close() {
	if hs.replay != nil {
		_ = hs.replay.Close(context.Background())
	}
	if hs.hpool != nil {
		hs.hpool.Close()
	}
}

// closed runs evs through the handler on c workers and returns events/s.
func (hs *historySmall) closed(ctx context.Context, c int, evs []event) (float64, error) {
	el, err := runClosed(ctx, c, len(evs), func(ctx context.Context, _, i int) error {
		out, err := handle(ctx, hs.h, evs[i], uint64(i+1))
		if err == nil && out.Status != audit.StatusSuccess {
			err = fmt.Errorf("handler: %s is %s, want success", evs[i].run, out.Status)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return float64(len(evs)) / el.Seconds(), nil
}

// rep measures each concurrency once, then replays the captured load at
// concurrency 1 with the time of each round trip added to spent.
func (hs *historySmall) rep(ctx context.Context, rep int, spent *tripTimes) ([]float64, error) {
	var out []float64
	for _, c := range historyInFlight {
		if err := hs.s.fresh(ctx); err != nil {
			return nil, err
		}
		perSec, err := hs.closed(ctx, c, smallEvents(fmt.Sprintf("c%d-r%d", c, rep), hs.events))
		if err != nil {
			return nil, fmt.Errorf("small events at concurrency %d: %w", c, err)
		}
		out = append(out, perSec)
	}
	if err := hs.s.fresh(ctx); err != nil {
		return nil, err
	}
	n := max(1, hs.events/historyReplayShare)
	prefix := fmt.Sprintf("replay-r%d", rep)
	evs := smallEvents(prefix, n)
	if _, err := runClosed(ctx, 1, n, func(ctx context.Context, _, i int) error {
		return hs.s.load.replay(ctx, hs.replay, evs[i].partition, evs[i].run, day(smallBase, i), spent)
	}); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	got, err := hs.s.int64(ctx, "SELECT count(*) FROM idem.pipeline_audit WHERE dag_id = $1 AND run_id LIKE $2 || '%' AND status = 'success'",
		historyPipeline, prefix)
	if err != nil {
		return nil, err
	}
	if got != int64(n) {
		return nil, fmt.Errorf("the replayed load left %d successful audit rows for %d events", got, n)
	}
	return out, nil
}

// explain runs one rerun of partition 0 in a transaction it rolls back,
// with EXPLAIN (ANALYZE, BUFFERS) of each statement that reads or writes
// the audit or the ledger (each explained in a savepoint rolled back, then
// run for real so the next statements see its effect).
func (hs *historySmall) explain(ctx context.Context) (string, error) {
	tx, err := hs.replay.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	t := hs.s.load
	b := binding{partition: dayKey(smallBase, 0), run: "explain", date: day(smallBase, 0)}
	var out strings.Builder
	for i, tr := range t.trips {
		for j, s := range tr.stmts {
			verb := strings.ToUpper(strings.TrimSpace(s.sql))
			if verb == "BEGIN" || verb == "COMMIT" || verb == "ROLLBACK" || strings.HasPrefix(s.sql, "-- COPY") {
				continue
			}
			args := t.args(s, b)
			if strings.Contains(s.sql, "idem.pipeline_audit") || strings.Contains(s.sql, "idem.run_ledger") {
				if _, err := tx.Exec(ctx, "SAVEPOINT explain"); err != nil {
					return "", err
				}
				rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+s.sql, args...)
				if err != nil {
					return "", fmt.Errorf("explain %s: %w", abbrev(s.sql), err)
				}
				lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					return "", fmt.Errorf("explain %s: %w", abbrev(s.sql), err)
				}
				if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT explain"); err != nil {
					return "", err
				}
				fmt.Fprintf(&out, "-- round trip %d, statement %d: %s\n%s\n\n", i+1, j+1, abbrev(s.sql), strings.Join(lines, "\n"))
			}
			rows, err := tx.Query(ctx, s.sql, args...)
			if err == nil {
				err = t.drain(rows, i, j, &b)
			}
			if err != nil {
				return "", fmt.Errorf("round trip %d, statement %d (%s): %w", i+1, j+1, abbrev(s.sql), err)
			}
		}
	}
	return strings.TrimSpace(out.String()), nil
}

// measureHistorySmall takes turns between the sizes, rep by rep, and
// explains one load at each size.
func measureHistorySmall(ctx context.Context, hss []*historySmall, rep *HistoryReport, progress io.Writer) error {
	for _, c := range historyInFlight {
		rep.Throughput = append(rep.Throughput, HistoryThroughput{InFlight: c, Events: hss[0].events, Runs: make([][]float64, len(hss))})
	}
	// spent[i][r]: the round trips' times at size i in rep r.
	spent := make([][]*tripTimes, len(hss))
	for r := range historySmallReps {
		for i, hs := range hss {
			tt := &tripTimes{d: make([]time.Duration, len(hs.s.load.trips))}
			spent[i] = append(spent[i], tt)
			perSec, err := hs.rep(ctx, r, tt)
			if err != nil {
				return fmt.Errorf("%s attempts: %w", thousands(int64(rep.Sizes[i].Rows())), err)
			}
			for k := range perSec {
				rep.Throughput[k].Runs[i] = append(rep.Throughput[k].Runs[i], perSec[k])
			}
			fmt.Fprintf(progress, "small events, rep %d, %s attempts: %s events/s at concurrency %v\n",
				r+1, thousands(int64(rep.Sizes[i].Rows())), fmtRates(perSec), historyInFlight)
		}
	}
	for k := range rep.Throughput {
		for i := range hss {
			rep.Throughput[k].PerSec = append(rep.Throughput[k].PerSec, median(rep.Throughput[k].Runs[i]))
		}
	}
	// Round trips: the same template at every size (one capture per size;
	// the statements are the same). Each rep's mean, then their median.
	for k, st := range hss[0].s.load.describe() {
		step := HistoryStep{Kind: st.Kind, SQL: st.SQL}
		for i, hs := range hss {
			n := max(1, hs.events/historyReplayShare)
			var means []float64
			for _, tt := range spent[i] {
				if k < len(tt.d) {
					means = append(means, float64(tt.d[k].Microseconds())/float64(n))
				}
			}
			step.Runs = append(step.Runs, means)
			step.MeanUs = append(step.MeanUs, median(means))
		}
		rep.Steps = append(rep.Steps, step)
	}
	for i, hs := range hss {
		plan, err := hs.explain(ctx)
		if err != nil {
			return fmt.Errorf("%s attempts: explain a load: %w", thousands(int64(rep.Sizes[i].Rows())), err)
		}
		rep.Plans[historyLoadPlan(rep.Sizes[i])] = plan
	}
	return nil
}

// historyLoadPlan names the plans of one load at size sz.
func historyLoadPlan(sz HistorySize) string {
	return "a small load's audit statements at " + thousands(int64(sz.Rows())) + " attempts"
}

func fmtRates(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, " / ")
}

// sizeTableHead writes a table's header: the lead columns, one column of
// unit per history size, the trailing columns, and the alignment row.
func (r HistoryReport) sizeTableHead(b *strings.Builder, lead, unit, trail, leadAlign, trailAlign string) {
	b.WriteString("\n" + lead)
	for _, s := range r.Sizes {
		fmt.Fprintf(b, " %s attempts (%s) |", thousands(int64(s.Rows())), unit)
	}
	b.WriteString(trail + "\n" + leadAlign)
	for range r.Sizes {
		b.WriteString("---:|")
	}
	b.WriteString(trailAlign + "\n")
}

// markdownSmall renders the throughput and the round trips.
func (r HistoryReport) markdownSmall(b *strings.Builder) {
	if len(r.Throughput) == 0 {
		return
	}
	r.sizeTableHead(b, "| small events (10-row reruns, delete_insert), handler in process |", "events/s",
		" ratio, largest ÷ smallest history (events/s: 1.0 = flat, higher is better) | target ≥ 0.83× (≤ 1.2× the time per event) |",
		"|---|", "---:|---|")
	for _, t := range r.Throughput {
		fmt.Fprintf(b, "| concurrency %d, %s events, median of %d |", t.InFlight, thousands(int64(t.Events)), historySmallReps)
		for _, v := range t.PerSec {
			fmt.Fprintf(b, " %.0f |", v)
		}
		verdict := "met"
		if t.Ratio() < 1/1.2 {
			verdict = "missed"
		}
		fmt.Fprintf(b, " %.2f× | %s |\n", t.Ratio(), verdict)
	}
	b.WriteString("\nEach rep (events/s):\n\n")
	for _, t := range r.Throughput {
		for i, s := range r.Sizes {
			fmt.Fprintf(b, "- concurrency %d, %s attempts: %s\n", t.InFlight, thousands(int64(s.Rows())), fmtRates(t.Runs[i]))
		}
	}
	r.sizeTableHead(b, "| # | round trip of a load, replayed at concurrency 1, median of the reps |", "mean µs",
		" ratio (time; lower is better) |", "|---:|---|", "---:|")
	for k, st := range r.Steps {
		fmt.Fprintf(b, "| %d | %s: `%s` |", k+1, st.Kind, strings.ReplaceAll(st.SQL, "|", `\|`))
		for _, us := range st.MeanUs {
			fmt.Fprintf(b, " %.0f |", us)
		}
		ratio := 0.0
		if st.MeanUs[0] > 0 {
			ratio = st.MeanUs[len(st.MeanUs)-1] / st.MeanUs[0]
		}
		fmt.Fprintf(b, " %.2f× |\n", ratio)
	}
	b.WriteString("\nEach rep (mean µs of each round trip):\n\n")
	for k, st := range r.Steps {
		for i, s := range r.Sizes {
			fmt.Fprintf(b, "- round trip %d, %s attempts: %s\n", k+1, thousands(int64(s.Rows())), fmtRates(st.Runs[i]))
		}
	}
}
