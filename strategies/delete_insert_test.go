package strategies

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

// The strategies run through the handler in handlers' conformance suite; the
// tests here are the parts that need no handler.

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }

func TestHeldPartition(t *testing.T) {
	for _, tc := range []struct {
		strat, bound, want string
		ok                 bool
	}{
		{"r", "FOR VALUES FROM ('2026-11-28') TO ('2026-11-29')", "2026-11-28", true},
		{"r", "FOR VALUES FROM ('2026-12-31') TO ('2027-01-01')", "2026-12-31", true},
		{"r", "FOR VALUES FROM ('2026-11-01') TO ('2026-12-01')", "", false}, // a month
		{"r", "FOR VALUES FROM ('11-28-2026') TO ('11-29-2026')", "", false}, // another DateStyle
		{"r", "FOR VALUES FROM (MINVALUE) TO ('2026-11-29')", "", false},
		{"r", "DEFAULT", "", false},
		{"l", "FOR VALUES IN ('eu')", "eu", true},
		{"l", "FOR VALUES IN ('it''s')", "it's", true},
		{"l", "FOR VALUES IN ('eu', 'us')", "", false},
	} {
		got, ok := heldPartition(tc.strat, tc.bound)
		require.Equal(t, tc.ok, ok, tc.bound)
		require.Equal(t, tc.want, got, tc.bound)
	}
}

const truncateSchema = `
CREATE SCHEMA staging;
CREATE SCHEMA analytics;
CREATE TABLE staging.src (id bigint, event_date date);
INSERT INTO staging.src SELECT i, '2026-11-28' FROM generate_series(1, 5) AS i;
CREATE TABLE analytics.t (id bigint, event_date date NOT NULL) PARTITION BY RANGE (event_date);
CREATE TABLE analytics.t_20261128 PARTITION OF analytics.t FOR VALUES FROM ('2026-11-28') TO ('2026-11-29');
`

// The TRUNCATE of truncate_partition waits at most LockTimeout, or the
// transaction's lock_timeout when shorter, and leaves the transaction's
// setting as it found it for the statements after it.
func TestTruncateLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	db.Exec(t, truncateSchema)
	s, err := New("delete_insert", Spec{
		Target: Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date", TruncatePartition: true,
		Source: "SELECT id, event_date FROM staging.src WHERE event_date = @partition",
	})
	require.NoError(t, err)
	p := Params{Partition: "2026-11-28", RunID: "r1"}

	load := func(lockTimeout string) (Result, string, time.Duration, error) {
		var res Result
		var after string
		start := time.Now()
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", lockTimeout); err != nil {
				return err
			}
			var err error
			if res, err = Load(ctx, tx, s, p); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&after)
		})
		return res, after, time.Since(start), err
	}

	for _, lt := range []string{"0", "1min", "300ms"} {
		res, after, _, err := load(lt)
		require.NoError(t, err)
		require.Equal(t, "truncate_child", res.Route)
		require.EqualValues(t, 5, res.Inserted)
		require.Equal(t, lt, after, "the load changed the transaction's lock_timeout")
	}

	// A report reading the child.
	report, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer report.Release()
	_, err = report.Exec(ctx, "BEGIN; SELECT count(*) FROM analytics.t_20261128")
	require.NoError(t, err)
	defer func() { _, _ = report.Exec(context.Background(), "ROLLBACK") }()

	// Each wait is at least the timeout that applies, and short of the one
	// that must not: the session's minute (or none) for the first two,
	// LockTimeout for the third. The upper bounds leave a loaded machine
	// seconds of slack (no test asserts how fast a machine is).
	for _, tc := range []struct {
		lockTimeout string
		waits       time.Duration
		under       time.Duration
	}{
		{"0", LockTimeout, LockTimeout + 20*time.Second},
		{"1min", LockTimeout, LockTimeout + 20*time.Second},
		{"300ms", 300 * time.Millisecond, LockTimeout},
	} {
		_, _, took, err := load(tc.lockTimeout)
		require.True(t, isLockTimeout(err), "%s: %v", tc.lockTimeout, err)
		require.Contains(t, err.Error(), "truncate_partition: TRUNCATE analytics.t_20261128 waited")
		require.GreaterOrEqual(t, took, tc.waits, tc.lockTimeout)
		require.Less(t, took, tc.under, tc.lockTimeout)
	}
}

// ExecuteCopy: the partition's rows copied straight into the target. On a
// table, each row is checked against the partition through COPY … WHERE,
// with the partition a literal (here a hostile text one); on a child of a
// partitioned table, the child's constraint checks it.
func TestExecuteCopy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA idem; CREATE SCHEMA staging; CREATE SCHEMA analytics;
CREATE FUNCTION idem.partition_mismatch(got anyelement, want text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
  $$ BEGIN RAISE EXCEPTION 'source returned a row for partition % while loading partition %', got, want USING ERRCODE = '22023'; END $$;
CREATE TABLE staging.src (id bigint, k text);
CREATE TABLE analytics.p (id bigint, k text NOT NULL);
INSERT INTO analytics.p VALUES (0, 'other'), (9, $$O'Brien; DROP TABLE analytics.p; --\$x$$);
CREATE TABLE staging.dsrc (id bigint, event_date date);
CREATE TABLE analytics.d (id bigint, event_date date NOT NULL) PARTITION BY RANGE (event_date);
CREATE TABLE analytics.d_20261128 PARTITION OF analytics.d FOR VALUES FROM ('2026-11-28') TO ('2026-11-29');
CREATE TABLE analytics.d_rest PARTITION OF analytics.d DEFAULT;`)
	hostile := `O'Brien; DROP TABLE analytics.p; --\$x`
	load := func(target, pc, source string, p Params, data string) (Result, error) {
		s, err := New("delete_insert", Spec{Target: Table{Schema: "analytics", Name: target}, PartitionColumn: pc, Source: source})
		require.NoError(t, err)
		var res Result
		err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			pl := s.Describe(b, p)
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			var err error
			res, err = s.(CopyLoader).ExecuteCopy(ctx, tx, pl, p, func(ctx context.Context, table pgx.Identifier, where string) (int64, error) {
				sql := "COPY " + table.Sanitize() + " (id, " + pgx.Identifier{pc}.Sanitize() + ") FROM STDIN"
				if where != "" {
					sql += " WHERE " + where
				}
				tag, err := tx.Conn().PgConn().CopyFrom(ctx, strings.NewReader(data), sql)
				return tag.RowsAffected(), err
			})
			return err
		})
		return res, err
	}

	tsv := strings.ReplaceAll(hostile, `\`, `\\`)
	res, err := load("p", "k", "SELECT id, k FROM staging.src WHERE k = @partition", Params{Partition: hostile, RunID: "r1"}, "1\t"+tsv+"\n2\t"+tsv+"\n")
	require.NoError(t, err)
	require.Equal(t, Result{Inserted: 2, Deleted: 1, Route: "copy_delete"}, res)
	require.Equal(t, int64(2), db.Int(t, "SELECT count(*) FROM analytics.p WHERE k = $1", hostile))
	require.Equal(t, int64(1), db.Int(t, "SELECT count(*) FROM analytics.p WHERE k = 'other'"), "another partition's rows stay")

	_, err = load("p", "k", "SELECT id, k FROM staging.src WHERE k = @partition", Params{Partition: hostile, RunID: "r2"}, "3\t"+tsv+"\n4\tother\n")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "22023", pgErr.Code)
	require.Contains(t, pgErr.Message, "source returned a row for partition other while loading partition "+hostile)
	require.Equal(t, int64(2), db.Int(t, "SELECT count(*) FROM analytics.p WHERE k = $1", hostile), "rolled back")

	res, err = load("d", "event_date", "SELECT id, event_date FROM staging.dsrc WHERE event_date = @partition", Params{Partition: "2026-11-28", RunID: "r1"},
		"1\t2026-11-28\n2\t2026-11-28\n")
	require.NoError(t, err)
	require.Equal(t, "copy_delete_child", res.Route)
	require.Equal(t, int64(2), db.Int(t, "SELECT count(*) FROM analytics.d_20261128"))
	_, err = load("d", "event_date", "SELECT id, event_date FROM staging.dsrc WHERE event_date = @partition", Params{Partition: "2026-11-28", RunID: "r2"},
		"1\t2026-11-28\n2\t2026-11-29\n")
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23514", pgErr.Code, "the child's partition constraint")
	require.Zero(t, db.Int(t, "SELECT count(*) FROM analytics.d_rest"))
}
