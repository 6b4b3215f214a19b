package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/testkit/browsertest"
)

// The article's failures, upstream of idem, each caught by a check inside
// the load's transaction: the partition's previous rows stay, readers
// never see the bad ones, nothing downstream runs, the event is
// dead-lettered naming the check, and once staging is fixed a replay loads.

const salesYAML = `  sales:
    strategy: delete_insert
    target: analytics.sales
    partition_column: event_date
    source: SELECT order_id, event_date, status, total FROM staging.sales WHERE event_date = @partition
    then: [sales_daily]
    checks:
      - unique: [order_id]
      - not_null: [order_id, total]
      - accepted_values: {column: status, values: [paid, refunded]}
      - row_count_change: {max_drop: 50%, min_baseline: 10}
  sales_daily:
    strategy: delete_insert
    target: analytics.sales_daily
    partition_column: event_date
    source: SELECT event_date, count(*) AS orders, sum(total) AS total FROM analytics.sales WHERE event_date = @partition GROUP BY event_date
`

const salesSQL = `
CREATE TABLE staging.sales (order_id int, event_date date, status text, total numeric(12,2));
CREATE TABLE analytics.sales (order_id int, event_date date NOT NULL, status text, total numeric(12,2));
CREATE TABLE analytics.sales_daily (event_date date NOT NULL, orders bigint, total numeric(14,2));
INSERT INTO staging.sales SELECT i, d, CASE WHEN i % 7 = 0 THEN 'refunded' ELSE 'paid' END, i * 2.5
  FROM generate_series(1, 40) i, (VALUES (date '2026-11-01'), (date '2026-11-02'), (date '2026-11-03'), (date '2026-11-04')) AS v(d);
`

func TestChecksRejectTheArticlesFailures(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{extraYAML: salesYAML})
	w.db.Exec(t, salesSQL)
	addr := w.serve().httpAddr()
	pub := func(partition, runID string) {
		_, err := w.js.Publish(context.Background(), "idem.ready.sales",
			[]byte(fmt.Sprintf(`{"dataset":"sales","partition":%q,"run_id":%q}`, partition, runID)))
		require.NoError(t, err)
	}
	for _, tc := range []struct {
		name, partition, breakSQL, fixSQL, check string
	}{
		{"a staging day doubled by an upstream retry", "2026-11-01",
			"INSERT INTO staging.sales SELECT * FROM staging.sales WHERE event_date = '2026-11-01'",
			"DELETE FROM staging.sales a USING staging.sales b WHERE a.event_date = '2026-11-01' AND a.ctid > b.ctid AND a.order_id = b.order_id AND a.event_date = b.event_date",
			"unique(order_id)"},
		{"an extract that stopped at a tenth", "2026-11-02",
			"CREATE TABLE staging.sales_kept AS SELECT * FROM staging.sales WHERE event_date = '2026-11-02' AND order_id > 4; DELETE FROM staging.sales WHERE event_date = '2026-11-02' AND order_id > 4",
			"INSERT INTO staging.sales SELECT * FROM staging.sales_kept; DROP TABLE staging.sales_kept",
			"row_count_change"},
		{"NULLs after an upstream rename", "2026-11-03",
			"UPDATE staging.sales SET total = NULL WHERE event_date = '2026-11-03'",
			"UPDATE staging.sales SET total = order_id * 2.5 WHERE event_date = '2026-11-03'",
			"not_null(order_id,total)"},
		{"a status nobody knows", "2026-11-04",
			"UPDATE staging.sales SET status = 'chargeback' WHERE event_date = '2026-11-04' AND order_id = 3",
			"UPDATE staging.sales SET status = 'refunded' WHERE event_date = '2026-11-04' AND order_id = 3",
			"accepted_values(status)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.partition
			ledger := w.count(ledgerCount)
			pub(p, "first")
			w.waitCount(ledger+2, ledgerCount) // sales and sales_daily
			// A passing load's outcomes commit with it, every check's.
			require.EqualValues(t, 4, w.count(`SELECT count(*) FROM idem.check_results WHERE partition_key = $1 AND run_id = 'first'
				AND status IN ('pass', 'skipped')`, p))
			partition := "SELECT order_id, event_date, status, total FROM analytics.sales WHERE event_date = '" + p + "'"
			before := w.db.Checksum(t, partition)
			daily := w.db.Checksum(t, "SELECT * FROM analytics.sales_daily WHERE event_date = '"+p+"'")

			// A reader polls the partition throughout: it must only ever
			// see the previous rows.
			var stop atomic.Bool
			var wg sync.WaitGroup
			var reads atomic.Int64
			var seen string
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if c := w.db.Checksum(t, partition); c != before {
						seen = c
						return
					}
					reads.Add(1)
					time.Sleep(5 * time.Millisecond)
				}
			}()
			w.db.Exec(t, tc.breakSQL)
			dlBefore := len(w.deadLetters())
			pub(p, "bad")
			dl := w.waitDeadLetters(dlBefore + 1)[dlBefore]
			stop.Store(true)
			wg.Wait()
			require.Empty(t, seen, "a reader saw a rejected row")
			require.Positive(t, reads.Load())

			require.Equal(t, "fatal", dl.Header.Get(deadletter.HeaderErrorKind))
			require.Contains(t, dl.Header.Get(deadletter.HeaderError), "check_failed: "+tc.check)
			require.Equal(t, before, w.db.Checksum(t, partition), "the previous partition stays")
			require.Equal(t, daily, w.db.Checksum(t, "SELECT * FROM analytics.sales_daily WHERE event_date = '"+p+"'"))
			require.Zero(t, w.count("SELECT count(*) FROM idem.outbox WHERE partition_key = $1 AND run_id = 'bad'", p), "no downstream event")
			require.EqualValues(t, 1, w.count(`SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'sales' AND partition_key = $1
				AND run_id = 'bad' AND status = 'failed' AND error_kind = 'check'`, p))
			require.EqualValues(t, 1, w.count(`SELECT count(*) FROM idem.check_results WHERE partition_key = $1 AND run_id = 'bad'
				AND name = $2 AND status = 'fail' AND jsonb_array_length(coalesce(samples, '[1]')) > 0`, p, tc.check))

			// The status page shows the cell rejected and, in its detail,
			// the check that refused it (a real browser).
			if tc.partition == "2026-11-01" {
				bctx := browsertest.New(t)
				base := "http://" + addr
				require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"/?from=2026-11-01&to=2026-11-01"), chromedp.WaitVisible("#grid")))
				cells := browsertest.Eval[map[string]map[string]string](t, bctx, cellClassesJS)
				require.Equal(t, "rejected", cells["sales"]["2026-11-01"])
				require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base+"/partition?dataset=sales&partition=2026-11-01"), chromedp.WaitVisible("#checks")))
				failed := browsertest.Eval[[]string](t, bctx, `[...document.querySelectorAll('#checks tr.check-fail td:nth-child(2)')].map(td => td.textContent)`)
				require.Equal(t, []string{tc.check}, failed)
			}

			// Look before you replay: the dry run still refuses, naming the
			// check; once staging is fixed it would commit, and nothing of
			// either dry run was written.
			idem := func(args ...string) (string, int) {
				cmd := exec.Command(idemBin, append(args, "--config", w.cfg)...)
				out, err := cmd.CombinedOutput()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else {
					require.NoError(t, err, "%s", out)
				}
				return string(out), code
			}
			out, code := idem("load", "sales", p, "--dry-run")
			require.Equal(t, 1, code, out)
			require.Contains(t, out, "the checks would refuse this load: check_failed: "+tc.check)
			w.db.Exec(t, tc.fixSQL)
			out, code = idem("load", "sales", p, "--dry-run")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "the load would commit")
			require.Equal(t, before, w.db.Checksum(t, partition), "a dry run writes nothing")
			out, code = idem("check", "sales", p)
			require.Equal(t, 0, code, out)

			// Fixed upstream, the dead letter replays and loads.
			out, code = idem("dlq", "replay", fmt.Sprint(dl.Sequence))
			require.Equal(t, 0, code, out)
			w.waitCount(1, `SELECT count(*) FROM idem.run_ledger WHERE task_id = 'sales_daily' AND partition_key = $1 AND run_id = 'bad'`, p)
			require.Equal(t, w.db.Checksum(t, "SELECT order_id, event_date, status, total FROM staging.sales WHERE event_date = '"+p+"'"),
				w.db.Checksum(t, partition))
			w.waitSettled()
		})
	}
}

// TestCheckRefusalKeepsAJoinWaiting: a join runs only while every
// upstream's latest attempt succeeded; an upstream load the checks refused
// keeps it waiting, even when the other upstream loads again.
func TestCheckRefusalKeepsAJoinWaiting(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{extraYAML: `  sales:
    strategy: delete_insert
    target: analytics.sales
    partition_column: event_date
    source: SELECT order_id, event_date, status, total FROM staging.sales WHERE event_date = @partition
    then: [combined]
    checks:
      - unique: [order_id]
  refunds:
    strategy: delete_insert
    target: analytics.refunds
    partition_column: event_date
    source: SELECT order_id, event_date FROM staging.sales WHERE event_date = @partition AND status = 'refunded'
    then: [combined]
  combined:
    strategy: delete_insert
    target: analytics.combined
    partition_column: event_date
    source: SELECT s.event_date, count(*) AS n FROM analytics.sales s WHERE s.event_date = @partition GROUP BY s.event_date
`})
	w.db.Exec(t, salesSQL+`
CREATE TABLE analytics.refunds (order_id int, event_date date NOT NULL);
CREATE TABLE analytics.combined (event_date date NOT NULL, n bigint);`)
	w.serve()
	pub := func(dataset, runID string) {
		_, err := w.js.Publish(context.Background(), "idem.ready."+dataset,
			[]byte(fmt.Sprintf(`{"dataset":%q,"partition":"2026-11-01","run_id":%q}`, dataset, runID)))
		require.NoError(t, err)
	}
	combined := `SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'combined' AND status = 'success'`
	pub("sales", "s1")
	pub("refunds", "r1")
	w.waitCount(1, combined)
	w.waitSettled()

	w.db.Exec(t, "INSERT INTO staging.sales SELECT * FROM staging.sales WHERE event_date = '2026-11-01'")
	pub("sales", "s2")
	w.waitDeadLetters(1)
	pub("refunds", "r2") // the other upstream loads again
	w.waitCount(2, `SELECT count(*) FROM idem.run_ledger WHERE task_id = 'refunds'`)
	w.waitSettled()
	require.EqualValues(t, 1, w.count(combined), "the join waits while sales' latest attempt was refused")
	// idem audit status names the check that refused the latest load.
	out, err := exec.Command(idemBin, "audit", "status", "sales", "--from", "2026-11-01", "--to", "2026-11-01", "--config", w.cfg).CombinedOutput()
	require.Error(t, err, "exit 1: the partition's latest attempt failed")
	require.Contains(t, string(out), "check_failed: unique(order_id)")
	// And the join's line says it keeps its last load and waits for sales.
	out, err = exec.Command(idemBin, "audit", "status", "combined", "--from", "2026-11-01", "--to", "2026-11-01", "--config", w.cfg).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "holds its last load; join waiting for sales: rejected", "%s", out)
}
