package pgsource

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// A standby restarted while its primary is idle streams again from the
// start of the WAL segment it stands in, so the position it has received
// stays below the one it has replayed until the primary writes again. It
// has replayed all it received: the gate passes, however old the last
// commit, instead of waiting for a write that may never come.
func TestRestartedStandbyOfAnIdlePrimaryIsCaughtUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := primary(t).Standby(ctx, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	src, dst := newDB(t), newDB(t)
	src.Exec(t, "CREATE TABLE e (id int, d date); INSERT INTO e SELECT g, '2026-11-28' FROM generate_series(1, 10) g")
	dst.Exec(t, "CREATE TABLE e (id int, d date)")
	var lsn string
	require.NoError(t, src.Pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn))
	require.Eventually(t, func() bool {
		c, err := pgx.Connect(ctx, st.URL(src.Name))
		if err != nil {
			return false
		}
		defer c.Close(ctx)
		var ok bool
		return c.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&ok) == nil && ok
	}, 30*time.Second, 20*time.Millisecond, "the new standby did not replay up to %s", lsn)

	require.NoError(t, st.Restart(ctx, "fast"))
	sb, err := pgxpool.New(ctx, st.URL(src.Name))
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	const limit = 300 * time.Millisecond
	require.Eventually(t, func() bool {
		var ok bool
		return sb.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_wal_receiver WHERE status = 'streaming')
  AND now() - pg_last_xact_replay_timestamp() > $1::interval`, limit.String()).Scan(&ok) == nil && ok
	}, 30*time.Second, 20*time.Millisecond, "the restarted standby does not stream")
	var below bool
	require.NoError(t, sb.QueryRow(ctx, "SELECT pg_last_wal_receive_lsn() < pg_last_wal_replay_lsn()").Scan(&below))
	if !below {
		t.Skip("the primary wrote since the restart: the received position passed the replayed one")
	}

	tx := begin(t, dst)
	spec := Spec{URL: appURL(st, src.Name), SQL: "SELECT * FROM e WHERE d = @partition", MaxReplicaLag: limit}
	res, err := Copy(ctx, spec, Params{Partition: "2026-11-28"}, tx, Target{Table: pgx.Identifier{"e"}})
	require.NoError(t, err, "a restarted standby that replayed all it has is not lagging")
	require.Equal(t, int64(10), res.Rows)
	require.True(t, res.Source.InRecovery)
	require.Zero(t, res.Source.Lag)
}
