package audit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/audittest"
)

// holdPartitionLock takes, in tx, the lock handlers take around a load of
// the partition: the same statement and the same key text.
func holdPartitionLock(t *testing.T, tx pgx.Tx, pipeline, dataset, partition string) {
	t.Helper()
	_, err := tx.Exec(context.Background(), audit.LockSQL, audit.PartitionLockKey(pipeline, dataset, partition))
	require.NoError(t, err)
}

func TestLatestAttemptsAndRunAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	key := func(p, run string) audit.Attempt {
		return audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: p, RunID: run}, LogicalDate: day(p)}
	}
	succeed := func(a audit.Attempt) {
		_, err := audittest.Load(ctx, db.Pool, a, audit.Rows{Inserted: 10})
		require.NoError(t, err)
	}
	// 01: loaded, then a duplicate skipped (which says nothing new).
	succeed(key("2026-01-01", "r1"))
	dup, err := audittest.Begin(ctx, db.Pool, key("2026-01-01", "r1"), 0)
	require.NoError(t, err)
	require.True(t, dup.Skipped)
	// 02: loaded by r1, then failed fatally under r2.
	succeed(key("2026-01-02", "r1"))
	id, err := audittest.Start(ctx, db.Pool, key("2026-01-02", "r2"))
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, id, errors.New("empty_source: no rows"), "fatal"))
	// 03: started, and its load holds the partition lock.
	_, err = audittest.Start(ctx, db.Pool, key("2026-01-03", "r2"))
	require.NoError(t, err)
	// 04: started an hour ago, nobody holds its lock: its process died.
	id, err = audittest.Start(ctx, db.Pool, key("2026-01-04", "r2"))
	require.NoError(t, err)
	db.Exec(t, "UPDATE idem.pipeline_audit SET started_at = started_at - interval '1 hour' WHERE id = $1", id)
	// 05: never attempted.

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	holdPartitionLock(t, tx, "shop", "orders", "2026-01-03")

	parts := []string{"2026-01-05", "2026-01-04", "2026-01-03", "2026-01-02", "2026-01-01"}
	got, err := audit.LatestAttempts(ctx, db.Pool, "shop", "orders", parts)
	require.NoError(t, err)
	require.Len(t, got, 5)
	for i, p := range parts {
		require.Equal(t, p, got[i].Partition, "in the order asked")
	}
	require.Equal(t, audit.StatusMissing, got[0].Status)
	require.Equal(t, audit.StatusStarted, got[1].Status)
	require.False(t, got[1].Locked)
	require.InDelta(t, time.Hour.Seconds(), got[1].Age.Seconds(), 60)
	require.Equal(t, audit.StatusStarted, got[2].Status)
	require.True(t, got[2].Locked, "the load's lock is seen")
	require.Less(t, got[2].Age, time.Minute)
	require.Equal(t, audit.LatestAttempt{Partition: "2026-01-02", Status: audit.StatusFailed, RunID: "r2", Attempt: 1,
		ErrorKind: "fatal", Error: "empty_source: no rows", Age: got[3].Age}, got[3])
	require.Equal(t, audit.StatusSuccess, got[4].Status)
	require.Equal(t, "r1", got[4].RunID)

	runs, err := audit.RunAttempts(ctx, db.Pool, "shop", "orders", "r2", parts)
	require.NoError(t, err)
	require.Equal(t, []string{"", "started", "started", "failed", ""},
		[]string{runs[0].Status, runs[1].Status, runs[2].Status, runs[3].Status, runs[4].Status})
	require.Equal(t, "fatal", runs[3].ErrorKind)
	require.False(t, runs[4].Succeeded, "r1 succeeded there, not r2")
	runs, err = audit.RunAttempts(ctx, db.Pool, "shop", "orders", "r1", parts[3:])
	require.NoError(t, err)
	require.True(t, runs[0].Succeeded)
	require.True(t, runs[1].Succeeded)
	require.Equal(t, audit.StatusSuccess, runs[1].Status)
	require.EqualValues(t, 10, *runs[1].RowCount)
}

// Lock keys are bigints, negative half the time; pg_locks splits them in two
// unsigned halves, which LatestAttempts must put back together.
func TestLatestAttemptsSeesEveryLockKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var parts []string
	for h := range 24 {
		p := fmt.Sprintf("2026-01-01T%02d:00:00Z", h)
		parts = append(parts, p)
		holdPartitionLock(t, tx, "shop", "hourly", p)
	}
	// A negative key has the top bit of classid set.
	var negative int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND classid::bigint >= 2147483648`).Scan(&negative))
	require.Positive(t, negative, "some keys are negative")
	got, err := audit.LatestAttempts(ctx, db.Pool, "shop", "hourly", append(parts, "2026-01-02T00:00:00Z"))
	require.NoError(t, err)
	for _, l := range got[:24] {
		require.True(t, l.Locked, l.Partition)
		require.Equal(t, audit.StatusMissing, l.Status)
	}
	require.False(t, got[24].Locked)
	got, err = audit.LatestAttempts(ctx, db.Pool, "shop", "other", parts[:1])
	require.NoError(t, err)
	require.False(t, got[0].Locked, "another dataset's lock")
}

// A load's lock, taken exactly as handlers take it (with a partition full of
// quotes), is seen by LatestAttempts from another session while its
// transaction lasts, and not after.
func TestLatestAttemptsSeesTheLoadLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	const partition = "eu'west; \"2026\""
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	holdPartitionLock(t, tx, "shop", "regions", partition)

	got, err := audit.LatestAttempts(ctx, db.Pool, "shop", "regions", []string{partition, "other"})
	require.NoError(t, err)
	require.True(t, got[0].Locked, "the load's lock is seen from another session")
	require.False(t, got[1].Locked)
	got, err = audit.LatestAttempts(ctx, db.Pool, "shop2", "regions", []string{partition})
	require.NoError(t, err)
	require.False(t, got[0].Locked, "another pipeline's partition")

	require.NoError(t, tx.Rollback(ctx))
	got, err = audit.LatestAttempts(ctx, db.Pool, "shop", "regions", []string{partition})
	require.NoError(t, err)
	require.False(t, got[0].Locked, "released with its transaction")
}
