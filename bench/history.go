package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/service"
)

// History costs: the operator's and the consumer's lookups on an audit
// history of two sizes, side by side in one run. Each size is its own
// database, seeded with one INSERT .. SELECT: datasets × days × 5 attempts
// (a transient failure, a success, its skipped duplicate, a failed rerun,
// a successful rerun) and the ledger of the two successes. The larger
// history has more datasets and more years; every lookup asks about the
// same 50 datasets and the same last 400 days, which both sizes hold.

// HistorySize is one seeded history.
type HistorySize struct {
	Datasets, Days int // Datasets × Days × 5 attempts
}

// Rows is the number of attempts seeded.
func (s HistorySize) Rows() int { return s.Datasets * s.Days * historyAttempts }

const (
	historyAttempts = 5
	historyPipeline = "history"
	historyGridDS   = 50  // datasets on the status page's grid
	historyGridDays = 400 // days on the grid
)

// historyEnd is the newest seeded day.
var historyEnd = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// HistorySizes are the sizes the issue asks for: 100k and 10M attempts.
var HistorySizes = []HistorySize{{Datasets: 50, Days: 400}, {Datasets: 500, Days: 4000}}

// HistoryLookup is one lookup's median at each size.
type HistoryLookup struct {
	Name    string
	Medians []time.Duration // one per size
}

// Ratio is the largest size's median over the smallest's.
func (l HistoryLookup) Ratio() float64 {
	return float64(l.Medians[len(l.Medians)-1]) / float64(l.Medians[0])
}

// HistoryReport is what RunHistory measured.
type HistoryReport struct {
	Sizes   []HistorySize
	Runs    int
	Lookups []HistoryLookup
	// Plans holds EXPLAIN (ANALYZE, BUFFERS) of the status lookups, before
	// and after, on the largest history, and of a small load's audit
	// statements at each size.
	Plans map[string]string
	// Throughput is small-event throughput at each size, one entry per
	// concurrency (see history_small.go); Steps is where a load's time goes.
	Throughput []HistoryThroughput
	Steps      []HistoryStep
}

// historyLookups are measured in this order; "before" rows keep the query
// `idem audit status` ran before it sought each day's keys.
var historyLookups = []string{
	"audit status, one dataset, one month (before: through idem.partition_status)",
	"audit status, one dataset, one month",
	"audit missing, one dataset, one month (before: unbounded anti join)",
	"audit missing, one dataset, one month",
	"skipped duplicate (audit.QueueBegin of a run in the ledger)",
	"calendar: LoadedPartitions, one dataset, 400 days",
	"status page: LatestInRange, 50 datasets × 400 days",
	"backfill plan: LatestAttempts, one dataset, 30 days",
}

// statusBeforeSQL is StatusRange as it was: the view's DISTINCT ON cannot
// take the date filter, so each day reads every attempt of the dataset.
const statusBeforeSQL = `
		SELECT to_char(d, 'YYYY-MM-DD'),
		       coalesce(s.status, 'missing'), coalesce(s.run_id, ''), coalesce(s.attempt, 0),
		       (SELECT count(*) FROM idem.pipeline_audit a
		         WHERE a.dag_id = $1 AND a.task_id = $2 AND a.logical_date = d::date AND a.status <> 'skipped'),
		       s.row_count, coalesce(s.error, ''), s.started_at, s.finished_at, coalesce(s.triggered_by, '')
		  FROM generate_series($3::date, $4::date, interval '1 day') AS d
		  LEFT JOIN LATERAL (
		       SELECT * FROM idem.partition_status p
		        WHERE p.dag_id = $1 AND p.task_id = $2 AND p.logical_date = d::date
		        ORDER BY p.audit_id DESC LIMIT 1) s ON true
		 ORDER BY d`

// missingBeforeSQL is idem.missing_partitions as it was: the planner's anti
// join read every success of the dataset.
const missingBeforeSQL = `
    SELECT d::date
      FROM generate_series($3::date, $4::date, interval '1 day') AS d
     WHERE NOT EXISTS (
           SELECT 1 FROM idem.pipeline_audit a
            WHERE a.dag_id = $1 AND a.task_id = $2
              AND a.logical_date = d::date AND a.status = 'success')
     ORDER BY 1`

// RunHistory seeds one database per size on the server adminURL names and
// measures every lookup runs times per size (after one warm-up), right after
// that size's seed. Each database then gets the small-event tables and a
// first pass of events loads; once every size is seeded, the small-event
// throughput is measured, the sizes taking turns (see history_small.go).
// The databases are dropped at the end.
func RunHistory(ctx context.Context, adminURL string, sizes []HistorySize, runs, events int, progress io.Writer) (HistoryReport, error) {
	rep := HistoryReport{Sizes: sizes, Runs: runs, Plans: map[string]string{}}
	for _, name := range historyLookups {
		rep.Lookups = append(rep.Lookups, HistoryLookup{Name: name})
	}
	var hss []*historySmall
	var cleanup []func() // run last to first
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	for i, sz := range sizes {
		pool, url, drop, err := historyDB(ctx, adminURL, i)
		if err != nil {
			return rep, err
		}
		cleanup = append(cleanup, drop, pool.Close)
		start := time.Now()
		fmt.Fprintf(progress, "seeding %d attempts (%d datasets × %d days × %d)\n", sz.Rows(), sz.Datasets, sz.Days, historyAttempts)
		if err := seedHistory(ctx, pool, sz); err != nil {
			return rep, err
		}
		fmt.Fprintf(progress, "seeded in %s; measuring\n", time.Since(start).Round(time.Second))
		if err := measureHistory(ctx, pool, runs, &rep); err != nil {
			return rep, err
		}
		if err := historyPlans(ctx, pool, i == len(sizes)-1, sz, rep.Plans); err != nil {
			return rep, err
		}
		fmt.Fprintf(progress, "small events: tables and a first pass of %d loads\n", events)
		hs, err := newHistorySmall(ctx, pool, url, events, progress)
		if err != nil {
			return rep, fmt.Errorf("small events at %d attempts: %w", sz.Rows(), err)
		}
		hss = append(hss, hs)
		cleanup = append(cleanup, hs.close)
	}
	return rep, measureHistorySmall(ctx, hss, &rep, progress)
}

func historyDB(ctx context.Context, adminURL string, i int) (*pgxpool.Pool, string, func(), error) {
	name := pgx.Identifier{fmt.Sprintf("idembench_history_%d", i)}.Sanitize()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, "", nil, err
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = admin.Exec(dctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		_ = admin.Close(dctx)
	}
	url, err := withDatabase(adminURL, fmt.Sprintf("idembench_history_%d", i))
	if err != nil {
		_ = admin.Close(ctx)
		return nil, "", nil, err
	}
	pool, err := func() (*pgxpool.Pool, error) {
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return nil, err
		}
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			return nil, err
		}
		// The session settings of idem's own pool (jit off, asynchronous
		// bookkeeping commits): the lookups are measured as idem runs them.
		cfg, err := service.PoolConfig(url, 0)
		if err != nil {
			return nil, err
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if _, err := audit.Migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
		return pool, nil
	}()
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	return pool, url, drop, nil
}

// seedHistory writes sz's attempts in id order = time order (dataset by
// dataset within a day), and the ledger of its successes.
func seedHistory(ctx context.Context, pool *pgxpool.Pool, sz HistorySize) error {
	if err := seedAttempts(ctx, pool, historyPipeline, sz, "day + (interval '1 hour' + k * interval '1 minute')"); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, "VACUUM ANALYZE idem.pipeline_audit, idem.run_ledger")
	return err
}

// seedAttempts writes sz's attempts under pipeline, datasets × days × 5
// attempts (failed, success, skipped, failed, success), in id order, and
// the ledger of the successes. started is the SQL of an attempt's start,
// over its day, the day's index g, the dataset's ds and the attempt's k;
// each finishes 5 seconds later.
func seedAttempts(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, pipeline string, sz HistorySize, started string) error {
	first := historyEnd.AddDate(0, 0, -(sz.Days - 1))
	if _, err := db.Exec(ctx, `
		INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt,
		                                  row_count, error, error_kind, started_at, finished_at)
		 SELECT $1, 'd' || lpad(ds::text, 3, '0'), day, day::text,
		        CASE WHEN k <= 3 THEN 'r1' ELSE 'r2' END,
		        (ARRAY['failed', 'success', 'skipped', 'failed', 'success'])[k],
		        CASE k WHEN 2 THEN 2 WHEN 5 THEN 2 ELSE 1 END,
		        CASE WHEN k IN (2, 5) THEN 1000 END,
		        CASE WHEN k IN (1, 4) THEN 'boom' END,
		        (ARRAY['transient', NULL, NULL, 'fatal', NULL])[k],
		        at, at + interval '5 seconds'
		   FROM generate_series(0, $3::int - 1) AS g CROSS JOIN LATERAL (SELECT $2::date + g AS day) dd,
		        generate_series(0, $4::int - 1) AS ds, generate_series(1, 5) AS k,
		        LATERAL (SELECT `+started+`) AS t(at)
		  ORDER BY dd.day, ds, k`, pipeline, first, sz.Days, sz.Datasets); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if _, err := db.Exec(ctx, `
		INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id, succeeded_at)
		SELECT dag_id, task_id, partition_key, run_id, id, finished_at FROM idem.pipeline_audit WHERE status = 'success'`); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	return nil
}

func measureHistory(ctx context.Context, pool *pgxpool.Pool, runs int, rep *HistoryReport) error {
	monthFrom, monthTo := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), historyEnd
	gridFrom := historyEnd.AddDate(0, 0, -(historyGridDays - 1))
	var grid []string
	for i := range historyGridDS {
		grid = append(grid, fmt.Sprintf("d%03d", i))
	}
	var keys []string
	for d := historyEnd.AddDate(0, 0, -29); !d.After(historyEnd); d = d.AddDate(0, 0, 1) {
		keys = append(keys, d.Format(time.DateOnly))
	}
	dup := audit.Attempt{RunKey: audit.RunKey{Pipeline: historyPipeline, Dataset: "d007", Partition: "2026-11-15", RunID: "r2"}}
	day := time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC)
	dup.LogicalDate = &day
	fns := []func() error{
		func() error {
			rows, err := pool.Query(ctx, statusBeforeSQL, historyPipeline, "d007", monthFrom, monthTo)
			if err != nil {
				return err
			}
			_, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (int, error) { return 0, nil })
			return err
		},
		func() error {
			_, err := audit.StatusRange(ctx, pool, historyPipeline, "d007", monthFrom, monthTo)
			return err
		},
		func() error {
			rows, err := pool.Query(ctx, missingBeforeSQL, historyPipeline, "d007", monthFrom, monthTo)
			if err != nil {
				return err
			}
			_, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
			return err
		},
		func() error {
			_, err := audit.Missing(ctx, pool, historyPipeline, "d007", monthFrom, monthTo)
			return err
		},
		nil, // the skipped duplicate is timed inside a transaction rolled back
		func() error {
			_, err := audit.LoadedPartitions(ctx, pool, historyPipeline, "d007", gridFrom.Format(time.DateOnly), historyEnd.Format(time.DateOnly))
			return err
		},
		func() error {
			_, err := audit.LatestInRange(ctx, pool, historyPipeline, grid, gridFrom.Format(time.DateOnly), historyEnd.Format(time.DateOnly))
			return err
		},
		func() error { _, err := audit.LatestAttempts(ctx, pool, historyPipeline, "d007", keys); return err },
	}
	for i, fn := range fns {
		times := make([]time.Duration, 0, runs)
		for r := 0; r <= runs; r++ {
			var took time.Duration
			if fn == nil {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				// As a handler's first round trip begins it.
				var (
					b   audit.Begun
					ran bool
				)
				q := &pgx.Batch{}
				audit.QueueBegin(q, dup, 0, nil, &b, &ran)
				start := time.Now()
				err = tx.SendBatch(ctx, q).Close()
				took = time.Since(start)
				_ = tx.Rollback(ctx)
				if err != nil {
					return err
				}
				if !b.Skipped {
					return fmt.Errorf("the duplicate of %v was not skipped", dup.RunKey)
				}
			} else {
				start := time.Now()
				if err := fn(); err != nil {
					return fmt.Errorf("%s: %w", historyLookups[i], err)
				}
				took = time.Since(start)
			}
			if r > 0 { // the first run warms the cache
				times = append(times, took)
			}
		}
		slices.Sort(times)
		rep.Lookups[i].Medians = append(rep.Lookups[i].Medians, times[len(times)/2])
	}
	return nil
}

// historyPlans explains the status lookups, before and after, and the
// missing one, under their own names on the largest history and with the
// size in the name on the others.
func historyPlans(ctx context.Context, pool *pgxpool.Pool, largest bool, sz HistorySize, out map[string]string) error {
	statusAfter := `SELECT * FROM (SELECT $3::date + i AS d FROM generate_series(0, $4::date - $3::date) AS i) AS days
		  LEFT JOIN LATERAL (
		       SELECT a.status, count(*) OVER () AS n FROM idem.pipeline_audit a
		        WHERE a.dag_id = $1 AND a.task_id = $2
		          AND a.partition_key >= to_char(d, 'YYYY-MM-DD') AND a.partition_key < to_char(d + 1, 'YYYY-MM-DD')
		          AND a.logical_date = d AND a.status <> 'skipped'
		        ORDER BY a.id DESC LIMIT 1) s ON true`
	for name, sql := range map[string]string{
		"status before":  statusBeforeSQL,
		"status after":   statusAfter,
		"missing before": missingBeforeSQL,
		"missing after":  "SELECT * FROM idem.missing_partitions($1, $2, $3, $4)",
	} {
		rows, err := pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, historyPipeline, "d007",
			time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), historyEnd)
		if err != nil {
			return fmt.Errorf("explain %s: %w", name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("explain %s: %w", name, err)
		}
		if !largest {
			name = historyPlanAt(name, sz)
		}
		out[name] = strings.Join(lines, "\n")
	}
	return nil
}

// historyPlanAt names a lookup's plan on a history smaller than the largest.
func historyPlanAt(name string, sz HistorySize) string {
	return name + " at " + thousands(int64(sz.Rows())) + " attempts"
}

// Markdown renders the report as a table.
func (r HistoryReport) Markdown() string {
	var b strings.Builder
	b.WriteString("| lookup |")
	for _, s := range r.Sizes {
		fmt.Fprintf(&b, " %s attempts (ms) |", thousands(int64(s.Rows())))
	}
	b.WriteString(" ratio | target ≤ 1.2× |\n|---|")
	for range r.Sizes {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---|\n")
	for _, l := range r.Lookups {
		fmt.Fprintf(&b, "| %s |", l.Name)
		for _, m := range l.Medians {
			fmt.Fprintf(&b, " %.3f |", float64(m.Microseconds())/1000)
		}
		verdict := "met"
		if l.Ratio() > 1.2 {
			verdict = "missed"
		}
		if strings.Contains(l.Name, "(before") {
			verdict = "(the old query)"
		}
		fmt.Fprintf(&b, " %.2f× | %s |\n", l.Ratio(), verdict)
	}
	r.markdownSmall(&b)
	return b.String()
}
