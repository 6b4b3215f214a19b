package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRecheckReloadsACorrectedPartitionOnce: a dataset with recheck:,
// two idem serve replicas. A correction to a loaded partition inside the
// window reloads that partition alone, once, and its downstream follows;
// a correction outside the window is never looked at; unchanged
// partitions publish nothing. The story says provisional, and what moved.
func TestRecheckReloadsACorrectedPartitionOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{extraYAML: `  corrected:
    strategy: delete_insert
    target: analytics.corrected
    partition_column: event_date
    source: SELECT id, event_date, amount, note FROM staging.corr WHERE event_date = @partition
    recheck:
      window: 3d
      every: 1s
      fingerprint: SELECT count(*) AS count, sum(amount) AS amount FROM staging.corr WHERE event_date = @partition
    then: [corrected_sum]
  corrected_sum:
    strategy: delete_insert
    target: analytics.corrected_sum
    partition_column: event_date
    source: SELECT event_date, sum(amount) AS total FROM analytics.corrected WHERE event_date = @partition GROUP BY event_date
`})
	w.db.Exec(t, `CREATE TABLE staging.corr (id bigint, event_date date, amount numeric(12,2), note text);
		CREATE TABLE analytics.corrected (id bigint, event_date date NOT NULL, amount numeric(12,2), note text);
		CREATE TABLE analytics.corrected_sum (event_date date NOT NULL, total numeric(12,2))`)
	now := time.Now().UTC()
	today, yesterday, old := now.Format(time.DateOnly), now.AddDate(0, 0, -1).Format(time.DateOnly), now.AddDate(0, 0, -10).Format(time.DateOnly)
	for _, p := range []string{today, yesterday, old} {
		w.db.Exec(t, fmt.Sprintf("INSERT INTO staging.corr SELECT g, '%s', 10, 'first' FROM generate_series(1, 2) g", p))
	}
	a, b := w.serve(), w.serve()
	defer func() {
		for _, p := range []*proc{a, b} {
			p.signal(syscall.SIGTERM)
			require.Equal(t, 0, p.exit(t, 30*time.Second))
		}
	}()
	for _, p := range []string{today, yesterday, old} {
		_, err := w.js.Publish(context.Background(), "idem.ready.corrected",
			fmt.Appendf(nil, `{"dataset":"corrected","partition":%q,"run_id":"sched-%s"}`, p, p))
		require.NoError(t, err)
	}
	w.waitCount(3, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'corrected_sum' AND status = 'success'")
	// Passes run every second; none publishes while nothing changed.
	time.Sleep(3 * time.Second)
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id LIKE 'recheck__%'"), "unchanged partitions publish nothing")
	require.Positive(t, w.count("SELECT count(*) FROM idem.source_fingerprints WHERE task_id = 'corrected' AND checks > 0"), "the passes ran")

	// A late correction to yesterday, and one to a partition outside the
	// window.
	w.db.Exec(t, fmt.Sprintf("UPDATE staging.corr SET amount = 12.5, note = 'corrected' WHERE event_date IN ('%s', '%s')", yesterday, old))
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'corrected_sum' AND status = 'success' AND run_id LIKE 'recheck__%'")
	time.Sleep(4 * time.Second) // more passes, on both replicas
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'corrected' AND status = 'success' AND run_id LIKE 'recheck__%'"),
		"one reload, whatever the number of replicas and passes")
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'corrected' AND run_id LIKE 'recheck__%' AND partition_key = $1", yesterday),
		"the corrected partition alone")
	require.EqualValues(t, 25, w.count("SELECT total::bigint FROM analytics.corrected_sum WHERE event_date = $1", yesterday), "the downstream followed")
	require.EqualValues(t, 20, w.count("SELECT total::bigint FROM analytics.corrected_sum WHERE event_date = $1", old), "outside the window: never rechecked")
	require.Zero(t, w.count("SELECT checks FROM idem.source_fingerprints WHERE task_id = 'corrected' AND partition_key = $1", old))

	code, out, _ := rbExec(t, w, []string{"audit", "why", "corrected", yesterday})
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "PROVISIONAL: loaded by run recheck__", out)
	require.Contains(t, out, "that its source changed (amount 20.00 → 25.00)")
	code, out, _ = rbExec(t, w, []string{"audit", "why", "corrected", old})
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "\nLOADED: loaded by run sched-", "outside the window a load is final")
}
