package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLostReadyMarksAreWrittenAgain: an early partition whose ready time
// has passed and whose mark the warehouse lost (a failover) gets its rows
// and mark again; a partition not yet due is left alone; once the faults
// are over, one last pass and it returns.
func TestLostReadyMarksAreWrittenAgain(t *testing.T) {
	ctx := t.Context()
	db := checkerDB(t)
	tl, err := setupTimely(ctx, Options{Timely: true, Seed: 5, Partitions: 3, Duration: 10 * time.Second}, db)
	require.NoError(t, err)
	tl.every = 50 * time.Millisecond
	for _, e := range tl.parts[:2] {
		e.due = true
		tl.makeReady(ctx, e)
	}
	// The warehouse loses the first partition's rows and mark.
	for _, table := range []string{"early_ready", "early_src"} {
		_, err = db.Exec(ctx, `DELETE FROM staging.`+table+` WHERE event_date = $1::date`, earlyKey(tl.parts[0].p))
		require.NoError(t, err)
	}

	kctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); tl.keepReady(kctx, nil) }()
	count := func(table string, p int) int {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM staging.`+table+` WHERE event_date = $1::date`, earlyKey(p)).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return count("early_ready", tl.parts[0].p) == 1 }, 30*time.Second, 20*time.Millisecond)
	cancel()
	<-done
	require.Equal(t, 8, count("early_src", tl.parts[0].p), "the rows with the mark")
	require.Equal(t, 0, count("early_ready", tl.parts[2].p), "a partition not yet due")
	tl.mu.Lock()
	require.Equal(t, 1, tl.rewritten)
	tl.mu.Unlock()

	// Once the faults are over it makes one more whole pass and returns
	// by itself: the campaign's phase does not wait for its context.
	_, err = db.Exec(ctx, `DELETE FROM staging.early_ready WHERE event_date = $1::date`, earlyKey(tl.parts[1].p))
	require.NoError(t, err)
	over := make(chan struct{})
	close(over)
	kctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tl.keepReady(kctx, over)
	require.NoError(t, kctx.Err(), "it returned by itself")
	require.Equal(t, 1, count("early_ready", tl.parts[1].p), "the last pass wrote the lost mark again")
}

// TestPauseCountsFromItsCommandsReturn: an attempt of the paused dataset
// is counted against a pause from 1.5 s after the later of its since and
// the return of the command that set it, until its end; a pause whose
// command never returned counts nothing.
func TestPauseCountsFromItsCommandsReturn(t *testing.T) {
	ctx := t.Context()
	db := checkerDB(t)
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	_, err := db.Exec(ctx, `INSERT INTO idem.dataset_pauses (dag_id, task_id, paused_by, reason, since, until, resumed_at, resumed_by)
		VALUES ($1, $2, 'chaos', 'returned', $3::timestamptz, NULL, $3::timestamptz + interval '20 seconds', 'chaos'),
		       ($1, $2, 'chaos', 'never returned', $3::timestamptz + interval '1 hour', $3::timestamptz + interval '1 hour 20 seconds', NULL, NULL)`, pipeline, pausedDataset, since)
	require.NoError(t, err)
	attempt := func(at time.Duration) {
		t.Helper()
		_, err := db.Exec(ctx, `INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, started_at)
			VALUES ($1, $2, '2026-01-01', $3, 'started', 1, $4)`, pipeline, pausedDataset, at.String(), since.Add(at))
		require.NoError(t, err)
	}
	attempt(2 * time.Second)            // after since + 1.5 s, before the command returned + 1.5 s
	attempt(6 * time.Second)            // in force
	attempt(25 * time.Second)           // after the pause
	attempt(time.Hour + 10*time.Second) // in the pause whose command never returned
	tl := &timely{pausedAt: []time.Time{since.Add(3 * time.Second)}}
	n, err := tl.loadsWhilePaused(ctx, db)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
