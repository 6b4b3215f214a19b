package e2e

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// partitionText is every column of the partition's rows in orders'
// target, as text, in order: numerics and NULLs compared byte for byte.
func (w *world) partitionText(partition string) string {
	w.t.Helper()
	var s string
	require.NoError(w.t, w.db.Pool.QueryRow(w.t.Context(),
		`SELECT coalesce(string_agg(t::text, E'\n' ORDER BY t::text), '') FROM analytics.t t WHERE event_date = $1`, partition).Scan(&s))
	return s
}

// A bad load undone with idem restore, against a running idem serve: the
// previous rows come back byte for byte and the then: chain reloads with
// the restored totals.
func TestRestoreUndoesABadLoad(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{then: "[b]", extraYAML: chainYAML, orderFields: "    keep_versions: 2\n"})
	w.db.Exec(t, chainSQL)
	w.db.Exec(t, "UPDATE staging.src SET note = NULL WHERE id = 14003")
	w.streams()
	w.serve()
	const day = "2026-11-15"
	w.publish(day, "good", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'c' AND run_id = 'good'")
	good := w.partitionText(day)
	goodTotal := w.db.Checksum(t, "SELECT n, total FROM analytics.c")

	w.db.Exec(t, "UPDATE staging.src SET amount = amount * 100 + 0.01, note = 'bad' WHERE event_date = $1", day)
	w.publish(day, "bad", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'c' AND run_id = 'bad'")
	require.NotEqual(t, good, w.partitionText(day))
	require.NotEqual(t, goodTotal, w.db.Checksum(t, "SELECT n, total FROM analytics.c"))

	code, out := runIdem(t, nil, "restore", "orders", day, "--reason", "bad export", "--by", "alice", "--config", w.cfg)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "restored orders "+day+" to the rows of run good")
	require.Contains(t, out, "now run restore__good__1")
	require.Equal(t, good, w.partitionText(day), "the rows of run good, byte for byte")

	// The downstream follows, through the outbox and a real relay.
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'c' AND run_id = 'restore__good__1'")
	require.Equal(t, goodTotal, w.db.Checksum(t, "SELECT n, total FROM analytics.c"))

	code, out = runIdem(t, nil, "audit", "why", "orders", day, "--config", w.cfg)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "restored by alice")
	require.Contains(t, out, "to the rows of run good: bad export")

	// Nothing archived for this partition of another run: refused, exit 1.
	code, out = runIdem(t, nil, "restore", "orders", day, "--to-run", "nope", "--reason", "x", "--config", w.cfg)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "no archived version of run nope")
}

// A retracted partition stays empty against a running serve: counted as
// loaded, an ordinary event of a new run acked and skipped with the
// reason, a forced one loaded.
func TestRetractHoldsAPartition(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	w.streams()
	w.serve()
	const day = "2026-11-16"
	w.publish(day, "r1", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'orders' AND run_id = 'r1'")

	code, out := runIdem(t, nil, "retract", "orders", day, "--reason", "test data", "--by", "bob", "--config", w.cfg)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "retracted orders "+day+": 10 rows deleted; now run retract__1")
	require.Equal(t, "", w.partitionText(day))

	w.publish(day, "r2", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'r2' AND status = 'skipped' AND error LIKE 'retracted by bob at %: test data; publish with --force to load it again'")
	w.waitSettled()
	require.Equal(t, "", w.partitionText(day))
	for _, args := range [][]string{{"audit", "missing", "orders", "--from", day, "--to", day}, {"audit", "status", "orders", "--from", day, "--to", day}} {
		code, out = runIdem(t, nil, append(args, "--config", w.cfg)...)
		require.Equal(t, 0, code, "%v: %s", args, out)
	}
	require.Contains(t, out, "retracted")

	code, out = runIdem(t, nil, "publish", "orders", day, "--force", "--run-id", "r3", "--config", w.cfg)
	require.Equal(t, 0, code, out)
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'orders' AND run_id = 'r3'")
	require.Equal(t, int64(10), w.count("SELECT count(*) FROM analytics.t WHERE event_date = $1", day))
}
