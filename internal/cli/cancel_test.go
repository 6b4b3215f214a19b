package cli

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A 2,000-partition backfill cancelled halfway loads nothing more of it:
// every partition is loaded once or recorded cancelled, and --wait says
// who cancelled it and exits 1.
func TestBackfillCancelledHalfway(t *testing.T) {
	w := newCLIWorld(t)
	// One row a day back to 2021, and every load 20 ms slower (the sleep
	// runs once per query), so the cancel meets a backfill under way.
	w.db.Exec(t, `INSERT INTO staging.src SELECT 1000000 + d, date '2021-01-01' + d, 1, 'old'
	                FROM generate_series(0, date '2025-12-31' - date '2021-01-01') d;
	              ALTER TABLE staging.src RENAME TO src_rows;
	              CREATE VIEW staging.src AS SELECT s.* FROM staging.src_rows s, (SELECT pg_sleep(0.02)) slow;`)
	w.serve()
	const runID = "backfill__cancelme"
	from, to := "2021-01-01", "2026-06-23" // 2,000 days
	done := make(chan result, 1)
	go func() {
		done <- w.run("backfill", "orders", "--from", from, "--to", to, "--run-id", runID, "--wait", "--timeout", "2m")
	}()
	loaded := func() int64 { return w.count("SELECT count(*) FROM idem.run_ledger WHERE run_id = $1", runID) }
	require.Eventually(t, func() bool { return loaded() >= 300 }, time.Minute, 10*time.Millisecond)

	w.env["USER"] = "alice"
	r := w.run("backfill", "cancel", runID, "--reason", "wrong range")
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "backfill run "+runID+" cancelled by alice at ")
	// The promise is about the command's return, when its transaction has
	// committed: cancelled_at is that transaction's start, which a loaded
	// machine can hold seconds before the commit, while begins that do not
	// see it yet still start.
	returned := time.Now()
	atCancel := loaded()

	var res result
	select {
	case res = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("backfill --wait did not end after the cancel")
	}
	require.ErrorIs(t, res.e, ErrReported, "%s\n%s", res.out, res.err)
	final := loaded()
	// Loads already past the check when the cancel committed finish: at
	// most max_in_flight (8) group loads of max_group (8) events each.
	require.LessOrEqual(t, final-atCancel, int64(8*8), "nothing more of the backfill loads after its cancel")
	require.Zero(t, w.count(`SELECT count(*) FROM idem.pipeline_audit
	                          WHERE run_id = $1 AND status = 'success' AND started_at > $2`, runID, returned),
		"no load of the backfill started after its cancel returned")
	require.Less(t, final, int64(2000))
	cancelled := w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = $1 AND status = 'cancelled'", runID)
	require.EqualValues(t, 2000, final+cancelled, "every partition is loaded once or cancelled")
	require.Zero(t, w.count(`SELECT count(*) FROM (SELECT partition_key FROM idem.pipeline_audit WHERE run_id = $1 AND status IN ('success', 'cancelled')
	                         GROUP BY 1 HAVING count(*) > 1) twice`, runID), "no partition both loaded and cancelled, or twice")
	require.Zero(t, w.streamMsgs("IDEM_DLQ"), "a cancel dead-letters nothing")
	require.Contains(t, res.err, fmt.Sprintf("idem: backfill %s cancelled by alice at ", runID))
	require.Contains(t, res.err, fmt.Sprintf(": wrong range: %d of 2000 partitions loaded, %d cancelled", final, cancelled))
	// A new backfill of the range plans the cancelled partitions as missing.
	plan := w.run("backfill", "orders", "--from", from, "--to", to, "--dry-run", "--json")
	require.NoError(t, plan.e, plan.err)
	pub, _ := bfActions(bfDecode(t, plan))
	require.Len(t, pub, int(cancelled))

	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.operator_actions WHERE action = 'cancel' AND requested_by = 'alice'"))
}
