package audit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/pgtest"
)

// tryLease takes a lease or fails t; ok says whether it was free.
func tryLease(t *testing.T, db *pgtest.DB, name string, ttl time.Duration) (*audit.Lease, bool) {
	t.Helper()
	l, ok, err := audit.TryLease(context.Background(), db.Pool, name, ttl)
	require.NoError(t, err)
	require.Equal(t, ok, l != nil)
	return l, ok
}

// advisoryLocks counts the advisory locks any backend holds or waits for
// in db's database, read from a connection of their own.
func advisoryLocks(t *testing.T, db *pgtest.DB) int64 {
	t.Helper()
	return db.Int(t, `SELECT count(*) FROM pg_locks
	                   WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
}

func TestLeaseIsHeldByOneAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	a, ok := tryLease(t, db, "job", time.Minute)
	require.True(t, ok)
	_, ok = tryLease(t, db, "job", time.Minute)
	require.False(t, ok, "busy while a holds it")
	other, ok := tryLease(t, db, "other job", time.Minute)
	require.True(t, ok, "leases of other names are apart")
	require.NoError(t, a.Renew(ctx))
	require.Zero(t, advisoryLocks(t, db), "a lease is a row, not a lock")

	require.NoError(t, a.Release(ctx))
	require.ErrorIs(t, a.Renew(ctx), audit.ErrLeaseLost, "a lease given back is not renewed")
	b, ok := tryLease(t, db, "job", time.Minute)
	require.True(t, ok, "free at once when given back")
	require.NoError(t, a.Release(ctx))
	_, ok = tryLease(t, db, "job", time.Minute)
	require.False(t, ok, "a's second release does not give back b's lease")
	require.NoError(t, b.Release(ctx))
	require.NoError(t, other.Release(ctx))
	require.EqualValues(t, 2, db.Int(t, "SELECT count(*) FROM idem.leases"), "one row per name, never deleted")
}

// TestAnExpiredLeaseIsTakenOver: a holder killed mid-pass never gives its
// lease back; it expires, and the one that took it over is not disturbed
// by the old holder.
func TestAnExpiredLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	dead, ok := tryLease(t, db, "job", 300*time.Millisecond)
	require.True(t, ok)
	var next *audit.Lease
	require.Eventually(t, func() bool {
		next, ok = tryLease(t, db, "job", time.Minute)
		return ok
	}, 10*time.Second, 50*time.Millisecond)
	require.ErrorIs(t, dead.Renew(ctx), audit.ErrLeaseLost)
	require.NoError(t, dead.Release(ctx))
	_, ok = tryLease(t, db, "job", time.Minute)
	require.False(t, ok, "the old holder cannot give back the new lease")
	require.NoError(t, next.Renew(ctx))
}

func TestRenewExtendsTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	l, ok := tryLease(t, db, "job", time.Hour)
	require.True(t, ok)
	db.Exec(t, "UPDATE idem.leases SET expires_at = clock_timestamp() + interval '1 minute'")
	require.NoError(t, l.Renew(ctx))
	require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.leases WHERE expires_at > clock_timestamp() + interval '59 minutes'"))

	// Lapsed, even if no one took it: its holder cannot know.
	db.Exec(t, "UPDATE idem.leases SET expires_at = clock_timestamp() - interval '1 second'")
	require.ErrorIs(t, l.Renew(ctx), audit.ErrLeaseLost)
}

func TestOneOfConcurrentTakersGetsTheLease(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	for _, round := range []string{"no row yet", "an expired row"} {
		if round == "an expired row" {
			db.Exec(t, "UPDATE idem.leases SET expires_at = clock_timestamp() - interval '1 second'")
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		got := make(chan bool, 8)
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, ok, err := audit.TryLease(context.Background(), db.Pool, "job", time.Minute)
				errs <- err
				got <- ok
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		close(got)
		for err := range errs {
			require.NoError(t, err)
		}
		n := 0
		for ok := range got {
			if ok {
				n++
			}
		}
		require.Equal(t, 1, n, round)
	}
}

// TestHoldRenewsWhileWorkRuns: work that outlasts the ttl keeps its lease,
// and gives it back when it returns.
func TestHoldRenewsWhileWorkRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	// A ttl long enough that a renewal (every third of it) is answered
	// on a machine whose cores the rest of the suite holds: at 600 ms,
	// two renewals of 200 ms each timed out there.
	l, ok := tryLease(t, db, "job", 3*time.Second)
	require.True(t, ok)
	err := l.Hold(ctx, func(ctx context.Context) error {
		deadline := time.Now().Add(7 * time.Second) // more than two ttls
		for time.Now().Before(deadline) {
			if _, ok := tryLease(t, db, "job", time.Minute); ok {
				return errors.New("another holder got the lease while work ran")
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	})
	require.NoError(t, err)
	_, ok = tryLease(t, db, "job", time.Minute)
	require.True(t, ok, "given back when work returned")
}

// TestHoldStopsWorkWhenTheLeaseIsLost: a holder that was taken over (its
// renewals lapsed, another replica took the lease) stops its work.
func TestHoldStopsWorkWhenTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	l, ok := tryLease(t, db, "job", 600*time.Millisecond)
	require.True(t, ok)
	err := l.Hold(ctx, func(ctx context.Context) error {
		db.Exec(t, "UPDATE idem.leases SET holder = 'another replica', expires_at = clock_timestamp() + interval '1 minute'")
		select {
		case <-ctx.Done():
			require.ErrorIs(t, context.Cause(ctx), audit.ErrLeaseLost)
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return nil
		}
	})
	require.ErrorIs(t, err, audit.ErrLeaseLost)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, "another replica", pgtestStr(t, db, "SELECT holder FROM idem.leases"), "the new holder keeps it")
}

func pgtestStr(t *testing.T, db *pgtest.DB, sql string) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql).Scan(&s))
	return s
}
