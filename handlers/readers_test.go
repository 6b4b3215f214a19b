package handlers_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/strategies"
)

// What readers of a target see and wait for while idem reloads a partition
// under them: a report in REPEATABLE READ, a long report holding its lock, a
// short query arriving in the middle.

const (
	readersPart = "2026-11-28"
	readersOf   = "SELECT id, event_date, amount, note, version FROM analytics.t WHERE event_date = '2026-11-28'"
)

// session is one reader's connection, released when the test ends.
func session(t *testing.T, e *env) *pgxpool.Conn {
	t.Helper()
	c, err := e.db.Pool.Acquire(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "ROLLBACK")
		c.Release()
	})
	return c
}

func (e *env) exec(c *pgxpool.Conn, sql string) {
	e.t.Helper()
	_, err := c.Exec(e.t.Context(), sql)
	require.NoError(e.t, err, sql)
}

// checksumOn is pgtest's Checksum, read on c within ctx: the same digest for
// the same rows.
func checksumOn(ctx context.Context, c interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, query string) (string, error) {
	var sum string
	err := c.QueryRow(ctx, "SELECT coalesce(md5(string_agg(r::text, E'\\n' ORDER BY r::text)), 'empty') || ':' || count(*) FROM ("+query+") r").Scan(&sum)
	return sum, err
}

// beginReport opens a REPEATABLE READ transaction and takes its snapshot by
// reading something else than the target, as a report that reads the target
// only later does.
func (e *env) beginReport(c *pgxpool.Conn) {
	e.t.Helper()
	e.exec(c, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	e.exec(c, "SELECT count(*) FROM staging.src")
}

// beginLongReport opens a transaction that read the partition and stays open:
// it holds ACCESS SHARE on the parent and the child until it ends.
func (e *env) beginLongReport(c *pgxpool.Conn) {
	e.t.Helper()
	e.exec(c, "BEGIN")
	e.exec(c, readersOf)
}

type loadDone struct {
	out handlers.Outcome
	err error
	at  time.Time
}

func (e *env) loadAsync(partition, runID string) <-chan loadDone {
	done := make(chan loadDone, 1)
	go func() {
		out, err := e.load(partition, runID, false)
		done <- loadDone{out, err, time.Now()}
	}()
	return done
}

func (e *env) waitLoad(done <-chan loadDone) loadDone {
	e.t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(30 * time.Second):
		e.t.Fatal("the load did not end")
		return loadDone{}
	}
}

// waitingLocks counts the lock requests of this test's database that wait.
func (e *env) waitingLocks() int64 {
	return e.db.Int(e.t, `SELECT count(*) FROM pg_locks
		WHERE NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
}

func TestDefaultRouteIsInvisibleToReadersAndNeverBlocksThem(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newEnv(t, fixtureNamed("delete_insert_partitioned"))
	e.stage(readersPart, 1, 10, 0, 1)
	out := e.mustLoad(readersPart, "r1", false)
	require.Equal(t, "delete_child", out.Rows.Route, "a child holding exactly the partition")
	old := e.db.Checksum(t, readersOf)

	report := session(t, e)
	e.beginReport(report)
	long := session(t, e)
	e.beginLongReport(long)

	// The reload, held inside its INSERT (after its DELETE) by the gate.
	e.stage(readersPart, 1, 12, 5, 2)
	e.db.Exec(t, "INSERT INTO staging.gate_on VALUES (1500)")
	done := e.loadAsync(readersPart, "r2")
	require.Eventually(t, func() bool {
		return e.db.Int(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'PgSleep'`) == 1
	}, 10*time.Second, 10*time.Millisecond, "the load never reached its INSERT: does it wait for a lock behind the long report?")

	// A short query of the partition, while the load holds its locks behind
	// the long report: answered at once, with the rows as they were. Its
	// lock_timeout turns any wait for a lock into an error (the load holds
	// its locks for the gate's 1.5 s), however slow the machine.
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reader := session(t, e)
	e.exec(reader, "SET lock_timeout = '100ms'")
	sum, err := checksumOn(qctx, reader, readersOf)
	require.NoError(t, err, "a reader waited for the load")
	require.Equal(t, old, sum, "a reader saw the load before it committed")
	require.Zero(t, e.waitingLocks(), "a lock request waits")

	// The load commits while the long report still runs: it never waited for it.
	r := e.waitLoad(done)
	require.NoError(t, r.err)
	require.Equal(t, "delete_child", r.out.Rows.Route)
	require.EqualValues(t, 10, r.out.Rows.Deleted)
	require.EqualValues(t, 12, r.out.Rows.Inserted)

	// The REPEATABLE READ report reads the partition only now, after the
	// commit: its snapshot predates the load, so it sees the old rows.
	sum, err = checksumOn(qctx, report, readersOf)
	require.NoError(t, err)
	require.Equal(t, old, sum, "a snapshot older than the load saw it")
	sum, err = checksumOn(qctx, long, readersOf)
	require.NoError(t, err)
	require.Equal(t, e.expected(readersPart), sum, "a new statement of a READ COMMITTED report sees the commit")
	e.exec(report, "COMMIT")
	e.exec(long, "COMMIT")
	require.Equal(t, e.expected(readersPart), e.visible())
}

func TestTruncatePartitionNeverQueuesReadersLongerThanLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newEnv(t, fixtureNamed("delete_insert_partitioned"), func(s *strategies.Spec) { s.TruncatePartition = true })
	e.stage(readersPart, 1, 10, 0, 1)
	out := e.mustLoad(readersPart, "r1", false)
	require.Equal(t, "truncate_child", out.Rows.Route)
	require.EqualValues(t, -1, out.Rows.Deleted)
	old := e.db.Checksum(t, readersOf)

	report := session(t, e)
	e.beginReport(report)
	long := session(t, e)
	e.beginLongReport(long)

	e.stage(readersPart, 1, 12, 5, 2)
	// Pin the session's lock_timeout above LockTimeout: the load must still
	// give up after LockTimeout.
	e.db.Exec(t, "ALTER DATABASE "+pgx.Identifier{e.db.Name}.Sanitize()+" SET lock_timeout = '1min'")
	e.db.Pool.Reset()
	done := e.loadAsync(readersPart, "r2")
	require.Eventually(t, func() bool {
		return e.db.Int(t, `SELECT count(*) FROM pg_locks
			WHERE relation = 'analytics.t_20261128'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted`) == 1
	}, 30*time.Second, 10*time.Millisecond, "the TRUNCATE never queued")

	// A short query arriving now queues behind the TRUNCATE, at most
	// LockTimeout: then the TRUNCATE gives up, and the query reads the old rows.
	// The query's 30 s are half the session's pinned lock_timeout: the
	// query returns only because the load gave up at its own LockTimeout
	// (its error below says so), not the session's minute.
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sum, err := checksumOn(qctx, e.db.Pool, readersOf)
	require.NoError(t, err)
	require.Equal(t, old, sum)

	r := e.waitLoad(done)
	require.Error(t, r.err)
	require.False(t, handlers.IsFatal(r.err), "a lock timeout is retried: %v", r.err)
	require.Equal(t, "55P03", handlers.SQLState(r.err))
	require.Contains(t, r.err.Error(), "truncate_partition")
	require.Contains(t, r.err.Error(), "analytics.t_20261128")
	require.Equal(t, old, e.db.Checksum(t, readersOf), "a failed load changed the partition")

	// Once the long report ends the retry loads. The trade-off truncate_partition
	// takes: a report whose snapshot predates the TRUNCATE sees the partition empty.
	e.exec(long, "COMMIT")
	out = e.mustLoad(readersPart, "r2", false)
	require.Equal(t, "truncate_child", out.Rows.Route)
	sum, err = checksumOn(qctx, report, readersOf)
	require.NoError(t, err)
	require.Equal(t, "empty:0", sum, "TRUNCATE is not MVCC-safe")
	e.exec(report, "COMMIT")
	require.Equal(t, e.expected(readersPart), e.visible())
}

// The TRUNCATE route passes the same idempotency cases as the default one.
func TestConformanceTruncatePartition(t *testing.T) {
	t.Parallel()
	f := fixtureNamed("delete_insert_partitioned")
	f.name = "delete_insert_truncate_partition"
	f.spec.TruncatePartition = true
	for name, test := range map[string]func(*testing.T, fixture){
		"reruns_leave_identical_contents":           testReruns,
		"redelivery_is_skipped":                     testRedelivery,
		"killed_mid_statement_keeps_previous_state": testKilled,
		"concurrent_loads_one_copy":                 testConcurrent,
		"other_partitions_untouched":                testOtherPartitions,
		"empty_source_is_fatal":                     testEmpty,
		"hostile_run_id_is_data":                    testHostile,
	} {
		t.Run(name, func(t *testing.T) { t.Parallel(); test(t, f) })
	}
}

var roleSeq atomic.Int64

// asRole runs f on a connection whose current role is a fresh role with
// what a loader needs for the partitioned fixture, after grant ran.
func (e *env) asRole(grant func(role string) string, f func(c *pgxpool.Conn)) {
	e.t.Helper()
	role := pgx.Identifier{fmt.Sprintf("idem_reader_test_%d_%d", os.Getpid(), roleSeq.Add(1))}.Sanitize()
	e.db.Exec(e.t, "CREATE ROLE "+role+" NOLOGIN")
	e.t.Cleanup(func() {
		ctx := context.Background()
		_, _ = e.db.Pool.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = e.db.Pool.Exec(ctx, "DROP ROLE IF EXISTS "+role)
	})
	e.db.Exec(e.t, `GRANT USAGE ON SCHEMA analytics, staging, idem TO `+role+`;
		GRANT SELECT ON staging.src, staging.gate_on TO `+role+`;
		GRANT SELECT, INSERT, DELETE ON analytics.t TO `+role+`;
		GRANT INSERT ON analytics.t_20261127, analytics.t_20261128, analytics.t_rest TO `+role)
	if grant != nil {
		e.db.Exec(e.t, grant(role))
	}
	c := session(e.t, e)
	e.exec(c, "SET ROLE "+role)
	defer e.exec(c, "RESET ROLE")
	f(c)
}

// `idem validate` plans every dataset with handlers.Check: with
// truncate_partition it also finds the children the role may not TRUNCATE.
func TestCheckFindsMissingTruncatePrivilege(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newEnv(t, fixtureNamed("delete_insert_partitioned"))
	truncating := func() *handlers.Dataset {
		spec := e.f.spec
		spec.Dataset, spec.Source, spec.TruncatePartition = "ds", sourceSQL, true
		st, err := strategies.New("delete_insert", spec)
		require.NoError(t, err)
		return &handlers.Dataset{Name: "ds", Strategy: st}
	}()

	e.asRole(nil, func(c *pgxpool.Conn) {
		require.NoError(t, handlers.Check(ctx, c, e.ds, "2000-01-01"), "the default route needs no TRUNCATE")
		err := handlers.Check(ctx, c, truncating, "2000-01-01")
		require.Error(t, err)
		require.True(t, handlers.IsFatal(err), "%v", err)
		require.Contains(t, err.Error(), "permission_denied")
		require.Contains(t, err.Error(), "truncate_partition")
		require.Contains(t, err.Error(), "analytics.t_20261127, analytics.t_20261128")
		require.NotContains(t, err.Error(), "t_rest", "the DEFAULT child is never truncated")
	})
	e.asRole(func(role string) string {
		return "GRANT TRUNCATE ON analytics.t_20261127, analytics.t_20261128 TO " + role
	}, func(c *pgxpool.Conn) {
		require.NoError(t, handlers.Check(ctx, c, truncating, "2000-01-01"))
	})
}

func TestAppendDedupeSetupNeverStallsReaders(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newEnv(t, fixtureNamed("append_dedupe"))
	e.stage(readersPart, 1, 5, 0, 1)
	e.mustLoad(readersPart, "r1", false)
	restart := func() *handlers.Dataset {
		spec := e.f.spec
		spec.Dataset, spec.Source = "ds", sourceSQL
		st, err := strategies.New("append_dedupe", spec)
		require.NoError(t, err)
		return &handlers.Dataset{Name: "ds", Strategy: st}
	}
	rewrite := "SELECT xmin::text FROM pg_rewrite WHERE ev_class = 'analytics.v'::regclass"
	var before string
	require.NoError(t, e.db.Pool.QueryRow(ctx, rewrite).Scan(&before))

	// A long report on the view. A restart with nothing to change runs no
	// DDL: it neither waits for the report nor rewrites the view.
	// (Any DDL would queue behind the report and fail at LockTimeout.)
	long := session(t, e)
	e.exec(long, "BEGIN")
	e.exec(long, "SELECT count(*) FROM analytics.v")
	require.NoError(t, e.h.PrepareDataset(ctx, restart()))
	var after string
	require.NoError(t, e.db.Pool.QueryRow(ctx, rewrite).Scan(&after))
	require.Equal(t, before, after, "the view was replaced though nothing changed")
	e.exec(long, "COMMIT")

	// The target gains a column: the view must change, and that waits for
	// a report at most LockTimeout, then fails as transient, naming the view.
	e.db.Exec(t, "ALTER TABLE analytics.t ADD COLUMN region text")
	e.exec(long, "BEGIN")
	e.exec(long, "SELECT count(*) FROM analytics.v")
	err := e.h.PrepareDataset(ctx, restart())
	require.Error(t, err)
	require.False(t, handlers.IsFatal(err), "%v", err)
	require.Equal(t, "55P03", handlers.SQLState(err))
	require.Contains(t, err.Error(), "analytics.v")
	e.exec(long, "COMMIT")
	require.NoError(t, e.h.PrepareDataset(ctx, restart()))
	require.EqualValues(t, 1, e.db.Int(t, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = 'analytics' AND table_name = 'v' AND column_name = 'region'`))

	// A missing index waits for a long writer at most LockTimeout too.
	e.db.Exec(t, "DROP INDEX analytics.t_idem_dedupe")
	e.exec(long, "BEGIN")
	e.exec(long, "INSERT INTO analytics.t (id) VALUES (-1)")
	err = e.h.PrepareDataset(ctx, restart())
	require.Error(t, err)
	require.Equal(t, "55P03", handlers.SQLState(err))
	require.Contains(t, err.Error(), "t_idem_dedupe")
	e.exec(long, "ROLLBACK")
	require.NoError(t, e.h.PrepareDataset(ctx, restart()))
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(*) FROM pg_indexes WHERE indexname = 't_idem_dedupe'"))
}
