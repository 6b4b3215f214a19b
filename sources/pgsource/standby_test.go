package pgsource

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

// The lag gate on a real standby: caught up it passes, even once the idle
// primary's last commit is older than the limit; with replay paused behind
// a new commit it says wait (and nothing is read); MaxReplicaLag 0 reads
// the stale rows; resumed, it passes again with the new rows.
func TestLagGate(t *testing.T) {
	ctx := context.Background()
	st := standby(t)
	src, dst := newDB(t), newDB(t)
	src.Exec(t, "CREATE TABLE e (id int, d date); INSERT INTO e SELECT g, '2026-11-28' FROM generate_series(1, 10) g")
	dst.Exec(t, "CREATE TABLE e (id int, d date)")
	sb := onStandby(t, src.Name)
	caughtUp(t, sb)
	const limit = 300 * time.Millisecond
	spec := Spec{URL: appURL(st, src.Name), SQL: "SELECT * FROM e WHERE d = @partition", MaxReplicaLag: limit}
	copyRows := func(spec Spec) (Result, error) {
		tx := begin(t, dst)
		res, err := Copy(ctx, spec, Params{Partition: "2026-11-28"}, tx, Target{Table: pgx.Identifier{"e"}})
		if err == nil {
			require.Equal(t, fmt.Sprintf("(%d)", res.Rows), dump(t, tx, "SELECT count(*) FROM e"))
		}
		return res, err
	}

	// Idle: nothing committed for longer than the limit, yet caught up.
	require.Eventually(t, func() bool {
		var old bool
		return sb.QueryRow(ctx, "SELECT now() - pg_last_xact_replay_timestamp() > $1::interval", limit.String()).Scan(&old) == nil && old
	}, 10*time.Second, 20*time.Millisecond)
	res, err := copyRows(spec)
	require.NoError(t, err)
	require.Equal(t, int64(10), res.Rows)
	require.True(t, res.Source.InRecovery)
	require.Zero(t, res.Source.Lag, "caught up: no lag, however old the last commit")
	require.False(t, res.Source.ReplayedAt.IsZero())
	var primaryID string
	require.NoError(t, src.Pool.QueryRow(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&primaryID))
	require.Equal(t, primaryID, res.Source.SystemIdentifier, "a standby shares its primary's identifier")

	// Paused behind a commit: wait.
	_, err = sb.Exec(ctx, "SELECT pg_wal_replay_pause()")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = sb.Exec(context.Background(), "SELECT pg_wal_replay_resume()") })
	require.Eventually(t, func() bool {
		var state string
		return sb.QueryRow(ctx, "SELECT pg_get_wal_replay_pause_state()").Scan(&state) == nil && state == "paused"
	}, 10*time.Second, 10*time.Millisecond)
	src.Exec(t, "INSERT INTO e SELECT g, '2026-11-28' FROM generate_series(11, 15) g")
	require.Eventually(t, func() bool {
		var behind bool
		return sb.QueryRow(ctx, `SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()
  AND now() - pg_last_xact_replay_timestamp() > $1::interval`, limit.String()).Scan(&behind) == nil && behind
	}, 10*time.Second, 10*time.Millisecond, "the standby received the commit it does not replay")

	tx := begin(t, dst)
	_, err = Copy(ctx, spec, Params{Partition: "2026-11-28"}, tx, Target{Table: pgx.Identifier{"e"}})
	var lagErr *LagError
	require.True(t, errors.As(err, &lagErr), "%T %v", err, err)
	noSecret(t, err.Error())
	require.Greater(t, lagErr.Lag, limit)
	require.Equal(t, limit, lagErr.Limit)
	require.False(t, lagErr.ReplayedAt.IsZero())
	require.Contains(t, err.Error(), "max_replica_lag 300ms")
	require.Contains(t, err.Error(), fmt.Sprintf("127.0.0.1:%d/%s", st.Port, src.Name))
	require.True(t, lagErr.NotReady())
	require.GreaterOrEqual(t, lagErr.RetryAfter(), time.Second)
	var fatal interface{ Fatal() bool }
	require.False(t, errors.As(err, &fatal), "a wait is not a failure")
	require.Equal(t, "(0)", dump(t, tx, "SELECT count(*) FROM e"), "nothing was written")
	t.Logf("lag error: %v", err)

	// No gate: the stale rows.
	noGate := spec
	noGate.MaxReplicaLag = 0
	res, err = copyRows(noGate)
	require.NoError(t, err)
	require.Equal(t, int64(10), res.Rows, "replay is paused before the new rows")
	require.Greater(t, res.Source.Lag, limit, "the snapshot says how stale it is")

	_, err = sb.Exec(ctx, "SELECT pg_wal_replay_resume()")
	require.NoError(t, err)
	res, err = copyRows(spec)
	require.NoError(t, err)
	require.Equal(t, int64(15), res.Rows)

	// Cut off from its primary, a standby has replayed all it received and
	// still cannot say it is fresh: once the last commit is older than the
	// limit, wait.
	var conninfo string
	require.NoError(t, sb.QueryRow(ctx, "SHOW primary_conninfo").Scan(&conninfo))
	setConninfo := func(ci string) {
		_, err := sb.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = "+quoteLiteral(ci))
		require.NoError(t, err)
		_, err = sb.Exec(ctx, "SELECT pg_reload_conf()")
		require.NoError(t, err)
	}
	setConninfo("host=127.0.0.1 port=1 user=postgres connect_timeout=1")
	t.Cleanup(func() {
		setConninfo(conninfo)
		require.Eventually(t, func() bool {
			var n int
			return sb.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'").Scan(&n) == nil && n == 1
		}, 30*time.Second, 20*time.Millisecond, "the standby streams again")
	})
	require.Eventually(t, func() bool {
		var cut bool
		return sb.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM pg_stat_wal_receiver WHERE status = 'streaming')
  AND now() - pg_last_xact_replay_timestamp() > $1::interval`, limit.String()).Scan(&cut) == nil && cut
	}, 30*time.Second, 20*time.Millisecond, "the standby stopped streaming")
	_, err = copyRows(spec)
	require.True(t, errors.As(err, &lagErr), "%T %v", err, err)
}

// quoteLiteral quotes a test's own constant as a SQL string.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// conflictFixture makes a source database where a copy of big streams half
// its rows, then sleeps at id 10000 while gate.ms > 0, and junk has rows for
// the primary to delete and vacuum away.
func conflictFixture(t *testing.T) (s, d *pgtest.DB) {
	t.Helper()
	s, d = newDB(t), newDB(t)
	s.Exec(t, `CREATE TABLE big (id int, pad text);
INSERT INTO big SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, 20000) g;
CREATE TABLE junk (id int); INSERT INTO junk SELECT generate_series(1, 1000);
CREATE TABLE gate (ms int); INSERT INTO gate VALUES (30000);
CREATE FUNCTION slow_at(id int) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE ms int;
BEGIN
  IF id = 10000 THEN
    SELECT g.ms INTO ms FROM gate g;
    IF ms > 0 THEN PERFORM pg_sleep(ms / 1000.0); END IF;
  END IF;
  RETURN true;
END $$;`)
	d.Exec(t, "CREATE TABLE big (id int, pad text)")
	return s, d
}

// A real recovery conflict: while the standby's copy sleeps mid-stream with
// rows already in the destination, the primary deletes rows and vacuums
// them away; replay cancels the copy after max_standby_streaming_delay.
func TestRecoveryConflict(t *testing.T) {
	ctx := context.Background()
	st := standby(t)

	run := func(t *testing.T, retries int) (pgx.Tx, Result, error) {
		src, dst := conflictFixture(t)
		sb := onStandby(t, src.Name)
		caughtUp(t, sb)
		tx := begin(t, dst)

		spec := Spec{URL: appURL(st, src.Name), SQL: "SELECT id, pad FROM big WHERE slow_at(id) AND @partition = @partition",
			RecoveryConflictRetries: retries}
		type outcome struct {
			res Result
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			res, err := Copy(ctx, spec, Params{Partition: "2026-11-28"}, tx, Target{Table: pgx.Identifier{"big"}})
			done <- outcome{res, err}
		}()
		// Half the rows are in the destination's COPY: the source sleeps.
		require.Eventually(t, func() bool {
			var n int64
			return dst.Pool.QueryRow(ctx, "SELECT coalesce(sum(tuples_processed), 0) FROM pg_stat_progress_copy WHERE datname = current_database()").Scan(&n) == nil && n >= 5000
		}, 30*time.Second, 10*time.Millisecond, "the copy never got half way")
		src.Exec(t, "UPDATE gate SET ms = 0")
		src.Exec(t, "DELETE FROM junk")
		src.Exec(t, "VACUUM junk")
		var o outcome
		select {
		case o = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the standby never cancelled the copy")
		}
		return tx, o.res, o.err
	}

	t.Run("no retries: the hint", func(t *testing.T) {
		tx, _, err := run(t, NoRecoveryConflictRetries)
		var rc *RecoveryConflictError
		require.True(t, errors.As(err, &rc), "%T %v", err, err)
		noSecret(t, err.Error())
		require.Equal(t, 1, rc.Attempts)
		require.Equal(t, "40001", rc.SQLState)
		require.True(t, rc.Fatal())
		require.Equal(t, ReasonRecoveryConflict, rc.FatalReason())
		require.Contains(t, err.Error(), "conflict with recovery")
		require.Contains(t, err.Error(), "set hot_standby_feedback = on on the standby, or raise max_standby_streaming_delay")
		t.Logf("conflict error: %v", err)
		// The load's transaction is intact: nothing of the attempt, and
		// still usable.
		var n int64
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM big").Scan(&n))
		require.Zero(t, n, "the half-copied rows were rolled back with the savepoint")
		_, err = tx.Exec(ctx, "INSERT INTO big VALUES (1, 'x')")
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	})

	t.Run("retried from a savepoint", func(t *testing.T) {
		tx, res, err := run(t, 0)
		require.NoError(t, err)
		require.Equal(t, 2, res.Attempts, "cancelled once, then read in full")
		require.Equal(t, int64(20000), res.Rows)
		var n, distinct int64
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*), count(DISTINCT id) FROM big").Scan(&n, &distinct))
		require.Equal(t, int64(20000), n, "exactly the rows of the successful attempt")
		require.Equal(t, int64(20000), distinct)
	})
}

func TestFingerprint(t *testing.T) {
	ctx := context.Background()
	st := standby(t)
	src := newDB(t)
	src.Exec(t, `CREATE TABLE orders (id int, event_date date, updated_at timestamptz, note text);
INSERT INTO orders SELECT g, '2026-11-28', '2026-11-28 10:00+00'::timestamptz + g * interval '1 minute', NULL FROM generate_series(1, 100) g`)
	fp := "SELECT count(*), max(updated_at), max(note) FROM orders WHERE event_date = @partition"
	spec := Spec{URL: appURL(primary(t), src.Name)}
	part := Params{Partition: "2026-11-28"}

	ra, err := Fingerprint(ctx, spec, fp, part)
	require.NoError(t, err)
	a := ra.Hash
	require.Len(t, a, 64)
	require.Equal(t, []string{"count", "max", "max"}, ra.Columns)
	require.Equal(t, "100", *ra.Values[0])
	require.Nil(t, ra.Values[2], "max(note) is NULL")
	alterDB(t, src, "TimeZone = 'Pacific/Chatham'", "DateStyle = 'Postgres, DMY'")
	b, err := Fingerprint(ctx, spec, fp, part)
	require.NoError(t, err)
	require.Equal(t, a, b.Hash, "the server's defaults do not move it")

	sb := onStandby(t, src.Name)
	caughtUp(t, sb)
	onSt := spec
	onSt.URL = appURL(st, src.Name)
	onSt.MaxReplicaLag = time.Minute
	c, err := Fingerprint(ctx, onSt, fp, part)
	require.NoError(t, err)
	require.Equal(t, a, c.Hash, "the standby's rows hash as the primary's")

	src.Exec(t, "UPDATE orders SET updated_at = updated_at + interval '1 microsecond' WHERE id = 100")
	d, err := Fingerprint(ctx, spec, fp, part)
	require.NoError(t, err)
	require.NotEqual(t, a, d.Hash, "a changed row moves it")
	other, err := Fingerprint(ctx, spec, fp, Params{Partition: "2026-11-29"})
	require.NoError(t, err)
	require.NotEqual(t, d.Hash, other.Hash)

	_, err = Fingerprint(ctx, spec, "SELECT id FROM orders WHERE event_date = @partition", part)
	var e *Error
	require.True(t, errors.As(err, &e), "%v", err)
	require.True(t, e.Fatal())
	require.Contains(t, err.Error(), "returned 100 rows")

	_, err = Fingerprint(ctx, spec, "SELECT count(*) FROM orders WHERE updated_at > now()", part)
	var se *SpecError
	require.True(t, errors.As(err, &se))
	require.Equal(t, "fingerprint", se.Field)
	require.Equal(t, ReasonWallClockSQL, se.FatalReason())
}
