package handlers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// The conformance suite: every strategy, through the handler, against a real
// PostgreSQL, must pass the same idempotency cases.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, f := range fixtures {
		testConformance(t, f)
	}
}

// TestConformanceGrouped: the same cases, every load through the group
// path (merge, which does not group, takes the single path inside it).
func TestConformanceGrouped(t *testing.T) {
	t.Parallel()
	for _, f := range fixtures {
		f.grouped = true
		f.name += "_grouped"
		testConformance(t, f)
	}
}

func testConformance(t *testing.T, f fixture) {
	t.Run(f.name, func(t *testing.T) {
		t.Parallel()
		t.Run("reruns_leave_identical_contents", func(t *testing.T) { t.Parallel(); testReruns(t, f) })
		t.Run("redelivery_is_skipped", func(t *testing.T) { t.Parallel(); testRedelivery(t, f) })
		t.Run("killed_mid_statement_keeps_previous_state", func(t *testing.T) { t.Parallel(); testKilled(t, f) })
		t.Run("concurrent_loads_one_copy", func(t *testing.T) { t.Parallel(); testConcurrent(t, f) })
		t.Run("other_partitions_untouched", func(t *testing.T) { t.Parallel(); testOtherPartitions(t, f) })
		t.Run("empty_source_is_fatal", func(t *testing.T) { t.Parallel(); testEmpty(t, f) })
		t.Run("hostile_run_id_is_data", func(t *testing.T) { t.Parallel(); testHostile(t, f) })
		t.Run("paused_begins_nothing", func(t *testing.T) { t.Parallel(); testPaused(t, f) })
		t.Run("cancelled_meanwhile_begins_nothing", func(t *testing.T) { t.Parallel(); testCancelledMeanwhile(t, f) })
	})
}

// A backfill cancelled after the handler asked about cancellations and
// before its attempt's begin (a busy machine, a wait for a connection)
// loads nothing either: the begin finds the cancel, writes nothing, and the
// attempt is recorded `cancelled`, naming who cancelled it.
func testCancelledMeanwhile(t *testing.T, f fixture) {
	e := newEnv(t, f)
	ctx := context.Background()
	e.stage("2026-11-28", 1, 10, 0, 1)
	e.stage("2026-11-29", 100, 10, 0, 1)
	e.mustLoad("2026-11-29", "backfill__x", false)
	loaded := e.visible()
	handlers.SetBeforeBegin(e.h, func() {
		_, err := audit.Cancel(ctx, e.db.Pool, "test", audit.Cancellation{RunID: "backfill__x", By: "alice", Reason: "wrong range"}, "")
		require.NoError(t, err)
		handlers.SetBeforeBegin(e.h, nil)
	})
	out, err := e.load("2026-11-28", "backfill__x", false)
	require.NoError(t, err)
	require.Equal(t, audit.StatusCancelled, out.Status)
	require.NotZero(t, out.AuditID)
	require.Equal(t, loaded, e.visible(), "nothing loaded after the cancel")
	require.Zero(t, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = '2026-11-28' AND status <> 'cancelled'"),
		"no attempt began")
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE id = $1 AND error LIKE 'cancelled by alice at %: wrong range'", out.AuditID),
		"the attempt names who cancelled it")
}

// A pause the replica has not read yet (the handler is not told of it) is
// found by the statement that begins the attempt: nothing is written, not
// even an audit row, and the error says paused, so the consumer sends the
// message back without spending an attempt. Once resumed, it loads as
// attempt 1.
func testPaused(t *testing.T, f fixture) {
	e := newEnv(t, f)
	ctx := context.Background()
	e.stage("2026-11-28", 1, 10, 0, 1)
	_, err := audit.PauseDataset(ctx, e.db.Pool, "test", "ds", "alice", "upstream fix", nil, "")
	require.NoError(t, err)
	for range 2 {
		_, err = e.load("2026-11-28", "r1", false)
		var paused *handlers.PausedError
		require.ErrorAs(t, err, &paused)
		require.Equal(t, "ds", paused.Dataset)
	}
	require.Zero(t, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"), "no attempt while paused")
	require.Zero(t, e.db.Int(t, "SELECT count(*) FROM ("+f.visible+") v"), "nothing loaded while paused")
	if !f.grouped {
		// The re-verification's reload of a load a failover lost is no
		// new load: the pause does not hold it.
		e.stage("2026-11-27", 100, 5, 0, 1)
		body, err := schemas.PartitionReady{Dataset: "ds", Partition: "2026-11-27", RunID: "r0"}.Marshal()
		require.NoError(t, err)
		_, err = e.h.HandleMessage(ctx, "idem.ready.ds", body, handlers.Meta{Reverify: true})
		require.NoError(t, err)
		require.Equal(t, e.expected("2026-11-27"), e.visible())
		e.db.Exec(t, "DELETE FROM staging.src WHERE event_date = '2026-11-27'")
	}

	_, err = audit.ResumeDataset(ctx, e.db.Pool, "test", "ds", "bob", "fixed", "")
	require.NoError(t, err)
	e.mustLoad("2026-11-28", "r1", false)
	require.Equal(t, int64(1), e.db.Int(t, "SELECT attempt FROM idem.pipeline_audit WHERE status = 'success' AND run_id = 'r1'"))
	require.Equal(t, e.db.Checksum(t, "SELECT id, event_date, amount, note, version FROM staging.src WHERE event_date = '2026-11-28'"),
		e.db.Checksum(t, "SELECT id, event_date, amount, note, version FROM ("+f.visible+") v WHERE event_date = '2026-11-28'"))
}

func testReruns(t *testing.T, f fixture) {
	e := newEnv(t, f)
	e.stage("2026-11-27", 1, 20, 0, 1)
	e.stage("2026-11-28", 100, 30, 0, 1)
	e.mustLoad("2026-11-27", "r0", false)

	var sums []string
	for i := 1; i <= 5; i++ {
		// The same run forced again, and new run ids: both must converge.
		out := e.mustLoad("2026-11-28", "r1", i > 1)
		require.Equal(t, audit.StatusSuccess, out.Status)
		if i%2 == 0 {
			e.mustLoad("2026-11-28", fmt.Sprintf("replay-%d", i), false)
		}
		if i == 1 || i == 2 || i == 5 {
			sums = append(sums, e.visible())
		}
	}
	require.Equal(t, sums[0], sums[1], "2 runs differ from 1")
	require.Equal(t, sums[0], sums[2], "5 runs differ from 1")
	require.Equal(t, e.expected("2026-11-27", "2026-11-28"), sums[0])
	// Every attempt is in the audit: 1 + 5 forced/plain + 2 replays.
	require.EqualValues(t, 8, e.auditCount(audit.StatusSuccess))
	require.EqualValues(t, 0, e.auditCount(audit.StatusStarted))
	if f.strategy != "append_dedupe" {
		require.EqualValues(t, 50, e.db.Int(t, "SELECT count(*) FROM "+f.raw), "raw table doubled rows")
	}
}

func testRedelivery(t *testing.T, f fixture) {
	e := newEnv(t, f)
	e.stage("2026-11-28", 1, 10, 0, 1)
	e.mustLoad("2026-11-28", "r1", false)
	raw := e.db.Checksum(t, f.raw)
	// Staging changes, but a redelivery of the same run must not do any work.
	e.stage("2026-11-28", 1, 10, 5, 2)
	out := e.mustLoad("2026-11-28", "r1", false)
	require.Equal(t, audit.StatusSkipped, out.Status)
	require.Equal(t, raw, e.db.Checksum(t, f.raw))
	require.EqualValues(t, 1, e.auditCount(audit.StatusSkipped))
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(*) FROM idem.run_ledger"))
}

func testKilled(t *testing.T, f fixture) {
	e := newEnv(t, f)
	e.stage("2026-11-28", 1, 25, 0, 1)
	e.mustLoad("2026-11-28", "r1", false)
	before := e.db.Checksum(t, f.raw)

	e.stage("2026-11-28", 1, 25, 9, 2)
	e.db.Exec(t, "INSERT INTO staging.gate_on VALUES (60000)")
	errc := make(chan error, 1)
	go func() {
		_, err := e.load("2026-11-28", "r2", false)
		errc <- err
	}()
	// Wait until the load sits inside its statement, then kill its backend.
	killed := []int64{} // not nil: NULL would match no pid
	kill := func() {
		var pid int64
		require.Eventually(t, func() bool {
			err := e.db.Pool.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()
				  AND pid <> ALL ($1::bigint[])`, killed).Scan(&pid)
			return err == nil
		}, 30*time.Second, 20*time.Millisecond)
		killed = append(killed, pid)
		e.db.Exec(t, "SELECT pg_terminate_backend($1)", pid)
	}
	kill()
	if f.grouped && e.h.GroupSize(schemas.Event{PartitionReady: schemas.PartitionReady{Dataset: "ds"}}) > 1 {
		// A group that fails loads its events alone: kill that load too.
		require.Equal(t, before, e.db.Checksum(t, f.raw), "the killed group changed the table")
		kill()
	}
	err := <-errc
	require.Error(t, err)
	require.False(t, handlers.IsFatal(err), "a killed backend is transient: %v", err)
	require.Equal(t, before, e.db.Checksum(t, f.raw), "killed load changed the table")
	require.EqualValues(t, 1, e.auditCount(audit.StatusFailed))

	e.db.Exec(t, "DELETE FROM staging.gate_on")
	e.mustLoad("2026-11-28", "r2", false)
	require.Equal(t, e.expected("2026-11-28"), e.visible())
}

func testConcurrent(t *testing.T, f fixture) {
	e := newEnv(t, f)
	e.stage("2026-11-28", 1, 40, 0, 1)
	// Each load pauses 300 ms inside its INSERT, so without the partition lock
	// they would overlap and each insert its own copy.
	e.db.Exec(t, "INSERT INTO staging.gate_on VALUES (300)")
	// Four deliveries of one run and two other runs, all at once.
	runs := []string{"r1", "r1", "r1", "r1", "r2", "r3"}
	var wg sync.WaitGroup
	outs := make([]handlers.Outcome, len(runs))
	errs := make([]error, len(runs))
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = e.load("2026-11-28", r, false)
		}()
	}
	wg.Wait()
	success := 0
	for i := range runs {
		require.NoError(t, errs[i])
		if outs[i].Status == audit.StatusSuccess {
			success++
		}
	}
	require.Equal(t, 3, success, "one success per run id")
	require.EqualValues(t, 3, e.db.Int(t, "SELECT count(*) FROM idem.run_ledger"))
	require.Equal(t, e.expected("2026-11-28"), e.visible())
	if f.strategy != "append_dedupe" {
		require.EqualValues(t, 40, e.db.Int(t, "SELECT count(*) FROM "+f.raw))
	}
}

func testOtherPartitions(t *testing.T, f fixture) {
	e := newEnv(t, f)
	for i, p := range []string{"2026-11-27", "2026-11-28", "2026-11-29"} {
		e.stage(p, 1000*(i+1), 15, 0, 1)
		e.mustLoad(p, "r1", false)
	}
	others := "SELECT * FROM " + f.raw + " WHERE event_date <> '2026-11-28'"
	before := e.db.Checksum(t, others)
	e.stage("2026-11-28", 2000, 12, 3, 2)
	e.mustLoad("2026-11-28", "r2", false)
	e.mustLoad("2026-11-28", "r2", true)
	require.Equal(t, before, e.db.Checksum(t, others))
}

func testEmpty(t *testing.T, f fixture) {
	e := newEnv(t, f)
	e.stage("2026-11-28", 1, 5, 0, 1)
	e.mustLoad("2026-11-28", "r1", false)
	before := e.db.Checksum(t, f.raw)
	e.db.Exec(t, "DELETE FROM staging.src")
	_, err := e.load("2026-11-28", "r2", false)
	require.Error(t, err)
	require.True(t, handlers.IsFatal(err), "empty source must be fatal: %v", err)
	require.ErrorIs(t, err, strategies.ErrEmptySource)
	require.Equal(t, before, e.db.Checksum(t, f.raw), "an empty source wiped data")

	allow := newEnv(t, f, func(s *strategies.Spec) { s.AllowEmpty = true })
	out, err := allow.load("2026-11-28", "r1", false)
	require.NoError(t, err)
	require.Equal(t, audit.StatusSuccess, out.Status)
}

func testHostile(t *testing.T, f fixture) {
	e := newEnv(t, f)
	e.stage("2026-11-28", 1, 3, 0, 1)
	id := `r'); DROP TABLE analytics.t; -- $1 "x" \`
	e.mustLoad("2026-11-28", id, false)
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(*) FROM idem.run_ledger WHERE run_id = $1", id))
	require.Equal(t, e.expected("2026-11-28"), e.visible())
}
