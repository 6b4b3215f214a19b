package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestLostReadyMarksAreWrittenAgain: an early partition whose ready time
// has passed and whose mark the warehouse lost (a failover) gets its rows
// and mark again; a partition not yet due is left alone.
func TestLostReadyMarksAreWrittenAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx := t.Context()
	srv := pg(t)
	db, err := pgxpool.New(ctx, srv.URL("postgres"))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS staging; CREATE SCHEMA IF NOT EXISTS analytics`)
	require.NoError(t, err)
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
	go func() { defer close(done); tl.keepReady(kctx) }()
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
	defer tl.mu.Unlock()
	require.Equal(t, 1, tl.rewritten)
}
