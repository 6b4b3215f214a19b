package handlers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/strategies"
)

func fixtureNamed(name string) fixture {
	for _, f := range fixtures {
		if f.name == name {
			return f
		}
	}
	panic(name)
}

func TestMergeKeepsUnchangedRowsXmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("merge"))
	e.stage("2026-11-28", 1, 20, 0, 1)
	e.mustLoad("2026-11-28", "r1", false)
	xmins := e.db.Checksum(t, "SELECT id, xmin::text FROM analytics.t")

	out := e.mustLoad("2026-11-28", "r2", false)
	require.Equal(t, "merge", out.Rows.Route, "the single-probe route")
	require.Zero(t, out.Rows.Inserted+out.Rows.Updated, "an unchanged rerun wrote rows")
	require.Equal(t, xmins, e.db.Checksum(t, "SELECT id, xmin::text FROM analytics.t"), "unchanged rows were rewritten")
	// Not even locked: ON CONFLICT's row lock would set xmax and write WAL.
	require.EqualValues(t, 0, e.db.Int(t, "SELECT count(*) FROM analytics.t WHERE xmax::text <> '0'"), "unchanged rows were locked")

	// One row changes: only it gets a new version.
	e.db.Exec(t, "UPDATE staging.src SET amount = amount + 1, version = 2 WHERE id = 5")
	out = e.mustLoad("2026-11-28", "r3", false)
	require.EqualValues(t, 1, out.Rows.Updated)
	require.EqualValues(t, 0, out.Rows.Inserted)
	require.EqualValues(t, 19, e.db.Int(t, `SELECT count(*) FROM analytics.t t JOIN (VALUES (1)) v(x) ON true
		WHERE t.id <> 5 AND (t.id, t.xmin::text) IN (SELECT id, xmin::text FROM analytics.t)`))
	require.Equal(t, e.expected("2026-11-28"), e.visible())
}

func TestMergeOlderVersionNeverWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("merge"))
	e.stage("2026-11-28", 1, 10, 7, 5)
	e.mustLoad("2026-11-28", "new", false)
	newer := e.visible()

	// A late replay of old data (version 3) changes nothing.
	e.stage("2026-11-28", 1, 10, 1, 3)
	out := e.mustLoad("2026-11-28", "old-replay", false)
	require.Zero(t, out.Rows.Updated)
	require.Equal(t, newer, e.visible())

	// An equal version with other values does update; a newer one too.
	e.stage("2026-11-28", 1, 10, 2, 5)
	out = e.mustLoad("2026-11-28", "same-version", false)
	require.EqualValues(t, 10, out.Rows.Updated)
	require.Equal(t, e.expected("2026-11-28"), e.visible())
}

func TestMergeDuplicateSourceKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("merge"))
	e.stage("2026-11-28", 1, 10, 0, 1)
	// Each key twice more: once older, once newer with other values.
	e.db.Exec(t, `INSERT INTO staging.src SELECT id, event_date, amount + 100, 'older', 0 FROM staging.src;
	              INSERT INTO staging.src SELECT id, event_date, amount + 200, 'newest', 9 FROM staging.src WHERE version = 1`)
	out := e.mustLoad("2026-11-28", "r1", false)
	require.Equal(t, "on_conflict_deduped", out.Rows.Route, "MERGE refused the repeated keys")
	require.EqualValues(t, 10, out.Rows.Inserted)
	require.EqualValues(t, 10, e.db.Int(t, "SELECT count(*) FROM analytics.t WHERE note = 'newest'"))

	// Without a version column ties are broken the same way on every run.
	plain := newEnv(t, fixtureNamed("merge"), func(s *strategies.Spec) { s.VersionColumn = "" })
	plain.stage("2026-11-28", 1, 10, 0, 1)
	plain.db.Exec(t, `INSERT INTO staging.src SELECT id, event_date, amount + 1, 'twin', version FROM staging.src`)
	plain.mustLoad("2026-11-28", "r1", false)
	first := plain.visible()
	plain.mustLoad("2026-11-28", "r1", true)
	plain.mustLoad("2026-11-28", "r2", false)
	require.Equal(t, first, plain.visible())
	require.EqualValues(t, 10, plain.db.Int(t, "SELECT count(*) FROM analytics.t"))
}

func TestMergeNeedsUniqueKey(t *testing.T) {
	t.Parallel()
	f := fixtureNamed("merge")
	f.ddl = `CREATE TABLE analytics.t (id bigint, event_date date, amount numeric(12,2), note text, version int);`
	e := newEnv(t, f)
	e.stage("2026-11-28", 1, 3, 0, 1)
	_, err := e.load("2026-11-28", "r1", false)
	require.Error(t, err)
	require.True(t, handlers.IsFatal(err))
	require.Contains(t, err.Error(), "unique index")
}

func TestAppendDedupeOrdersByLoadNotRunID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("append_dedupe"))
	e.stage("2026-11-28", 1, 10, 2, 2)
	e.mustLoad("2026-11-28", "r2", false)
	// r1 sorts before r2 as text, but it is loaded later: its rows win.
	e.stage("2026-11-28", 1, 10, 1, 1)
	e.mustLoad("2026-11-28", "r1", false)
	require.Equal(t, e.expected("2026-11-28"), e.visible())
	require.EqualValues(t, 10, e.db.Int(t, "SELECT count(*) FROM analytics.v"))
	require.EqualValues(t, 20, e.db.Int(t, "SELECT count(*) FROM analytics.t"), "append never deletes")
	require.EqualValues(t, 2, e.db.Int(t, "SELECT count(DISTINCT load_seq) FROM analytics.t"))
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(DISTINCT load_seq) FROM analytics.t WHERE run_id = 'r1'"))
	// The view exposes the target's other columns, not the bookkeeping.
	require.EqualValues(t, 0, e.db.Int(t, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = 'analytics' AND table_name = 'v' AND column_name IN ('run_id', 'load_seq')`))
}

func TestAppendDedupeViewFollowsTargetColumns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("append_dedupe"))
	e.stage("2026-11-28", 1, 3, 0, 1)
	e.mustLoad("2026-11-28", "r1", false)
	// The table gains a column; the next process (a new Dataset) widens the view.
	e.db.Exec(t, "ALTER TABLE analytics.t ADD COLUMN region text; ALTER TABLE staging.src ADD COLUMN region text DEFAULT 'eu'")
	st, err := strategies.New("append_dedupe", strategies.Spec{Dataset: "ds", Target: e.f.spec.Target, Key: []string{"id"}, View: e.f.spec.View,
		Source: "SELECT * FROM staging.src WHERE event_date = @partition"})
	require.NoError(t, err)
	e.h.Datasets["ds"] = &handlers.Dataset{Name: "ds", Strategy: st}
	e.mustLoad("2026-11-28", "r2", false)
	require.EqualValues(t, 3, e.db.Int(t, "SELECT count(*) FROM analytics.v WHERE region = 'eu'"))
	// A column whose type changes cannot be replaced in place: the view is rebuilt.
	e.db.Exec(t, "DROP VIEW analytics.v; ALTER TABLE analytics.t ALTER COLUMN version TYPE bigint; CREATE VIEW analytics.v AS SELECT id, version::int FROM analytics.t")
	e.h.Datasets["ds"] = &handlers.Dataset{Name: "ds", Strategy: st}
	e.mustLoad("2026-11-28", "r3", false)
	require.EqualValues(t, 3, e.db.Int(t, "SELECT count(*) FROM analytics.v WHERE region = 'eu'"))
}

func TestDeleteInsertRejectsRowsOfOtherPartitions(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"delete_insert", "delete_insert_partitioned"} {
		e := newEnv(t, fixtureNamed(name), func(s *strategies.Spec) {
			s.Source = "SELECT id, event_date, amount, note, version FROM staging.src" // no partition filter
		})
		e.stage("2026-11-27", 1, 5, 0, 1)
		e.stage("2026-11-28", 100, 5, 0, 1)
		_, err := e.load("2026-11-28", "r1", false)
		require.Error(t, err, name)
		require.True(t, handlers.IsFatal(err), "%s: %v", name, err)
		require.Contains(t, err.Error(), "partition", name)
		require.EqualValues(t, 0, e.db.Int(t, "SELECT count(*) FROM analytics.t"), name)
	}
}

func TestDeleteInsertTruncatesExactChild(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("delete_insert_partitioned"), func(s *strategies.Spec) { s.TruncatePartition = true })
	e.stage("2026-11-28", 1, 10, 0, 1)
	e.stage("2026-11-29", 100, 10, 0, 1)
	out := e.mustLoad("2026-11-28", "r1", false)
	require.Equal(t, "truncate_child", out.Rows.Route)
	require.EqualValues(t, -1, out.Rows.Deleted)
	out = e.mustLoad("2026-11-29", "r1", false) // lands in the DEFAULT child
	require.Equal(t, "delete", out.Rows.Route)
	require.EqualValues(t, 10, e.db.Int(t, "SELECT count(*) FROM analytics.t_20261128"))
	require.EqualValues(t, 10, e.db.Int(t, "SELECT count(*) FROM analytics.t_rest"))
	e.mustLoad("2026-11-28", "r2", false)
	require.Equal(t, e.expected("2026-11-28", "2026-11-29"), e.visible())
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE rows_deleted IS NULL AND status = 'success' AND run_id = 'r2'"))
}

func TestSchemaMismatchIsFatalAndNamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("delete_insert"), func(s *strategies.Spec) {
		s.Source = "SELECT id, event_date, amount, note, version, 1 AS surprise FROM staging.src WHERE event_date = @partition"
	})
	e.stage("2026-11-28", 1, 3, 0, 1)
	_, err := e.load("2026-11-28", "r1", false)
	require.True(t, handlers.IsFatal(err), "%v", err)
	require.Contains(t, err.Error(), "surprise")

	missing := newEnv(t, fixtureNamed("delete_insert"), func(s *strategies.Spec) { s.Target.Name = "nope" })
	_, err = missing.load("2026-11-28", "r1", false)
	require.True(t, handlers.IsFatal(err), "%v", err)
	require.Contains(t, err.Error(), "analytics.nope")

	// Check finds it without running anything.
	require.Error(t, handlers.Check(t.Context(), e.db.Pool, e.ds, "2026-11-28"))
	good := newEnv(t, fixtureNamed("merge"))
	require.NoError(t, handlers.Check(t.Context(), good.db.Pool, good.ds, "2026-11-28"))
	require.EqualValues(t, 0, good.db.Int(t, "SELECT count(*) FROM analytics.t"))
}

// A source that fails when it runs is a data error of the load, fatal after
// one attempt: never a panic (found by the chaos harness).
func TestFailingSourceIsFatalNotAPanic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("delete_insert"), func(s *strategies.Spec) {
		s.Source = "SELECT id, event_date, amount, note, version, 1/0 AS boom FROM staging.src WHERE event_date = @partition"
	})
	e.stage("2026-11-27", 1, 3, 0, 1)
	_, err := e.load("2026-11-27", "r1", false)
	require.Error(t, err)
	require.True(t, handlers.IsFatal(err), "%v", err)
	require.Equal(t, "22012", handlers.SQLState(err))
}

// The catalog reads are cached per dataset: DDL on the target is seen by
// the next load; a source whose tables changed fails once as retryable
// (the stale description is dropped), then as the dataset's fault.
func TestCatalogCacheFollowsDDL(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"delete_insert", "delete_insert_partitioned", "merge", "append_dedupe"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fixtureNamed(name))
			e.stage("2026-11-28", 1, 5, 0, 1)
			e.mustLoad("2026-11-28", "r1", false)
			e.mustLoad("2026-11-28", "r2", false)

			// A column the load writes gets a new type, then is dropped.
			if name != "append_dedupe" { // its view holds the column's type
				e.db.Exec(t, "ALTER TABLE analytics.t ALTER COLUMN note TYPE varchar(200)")
				e.stage("2026-11-28", 1, 5, 1, 2)
				e.mustLoad("2026-11-28", "r3", false)
				require.Equal(t, e.expected("2026-11-28"), e.visible())
			}
			e.db.Exec(t, "ALTER TABLE analytics.t DROP COLUMN note CASCADE")
			_, err := e.load("2026-11-28", "r4", false)
			require.Error(t, err)
			require.True(t, handlers.IsFatal(err), "the fresh read names the missing column: %v", err)
			require.Contains(t, err.Error(), "note")
		})
	}
}

func TestCatalogCacheStaleSource(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("delete_insert"))
	e.stage("2026-11-28", 1, 5, 0, 1)
	e.mustLoad("2026-11-28", "r1", false)
	e.db.Exec(t, "ALTER TABLE staging.src RENAME COLUMN note TO remark")
	// The source's tables are fingerprinted with the target: the change is
	// seen by the next load, which reads the source afresh and finds it
	// broken at once, instead of failing on the cached description first.
	_, err := e.load("2026-11-28", "r2", false)
	require.Error(t, err)
	require.True(t, handlers.IsFatal(err), "read afresh, the source is broken: %v", err)
	require.Contains(t, err.Error(), "note")
}

// A key inserted by another transaction while MERGE runs makes it raise a
// unique violation: the load rolls back to its savepoint and takes ON
// CONFLICT, which updates that row by the version rule.
func TestMergeConcurrentInsertFallsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, fixtureNamed("merge"))
	e.stage("2026-11-28", 1, 5, 0, 1)
	e.stage("2026-11-27", 100, 1, 0, 1)
	e.mustLoad("2026-11-27", "warm", false) // the route is checked and cached

	other, err := e.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, "INSERT INTO analytics.t VALUES (3, '2026-11-28', 0, 'other', 0)")
	require.NoError(t, err)

	done := e.loadAsync("2026-11-28", "r1")
	require.Eventually(t, func() bool {
		return e.db.Int(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'MERGE%'`) == 1
	}, 10*time.Second, 10*time.Millisecond, "the MERGE never waited for the other insert")
	require.NoError(t, other.Commit(ctx))

	r := e.waitLoad(done)
	require.NoError(t, r.err)
	require.Equal(t, "on_conflict", r.out.Rows.Route)
	require.EqualValues(t, 4, r.out.Rows.Inserted)
	require.EqualValues(t, 1, r.out.Rows.Updated, "the other row, older, is updated")
	require.Equal(t, e.expected("2026-11-27", "2026-11-28"), e.visible())
}

// A target MERGE refuses (PostgreSQL 15 runs no MERGE on a table with
// rules) keeps the ON CONFLICT route instead of failing.
func TestMergeRouteCheckFallsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("merge"))
	e.db.Exec(t, "CREATE RULE keep_deletes AS ON DELETE TO analytics.t DO ALSO NOTIFY deletes")
	e.stage("2026-11-28", 1, 5, 0, 1)
	out := e.mustLoad("2026-11-28", "r1", false)
	require.Equal(t, "on_conflict", out.Rows.Route)
	require.EqualValues(t, 5, out.Rows.Inserted)
	out = e.mustLoad("2026-11-28", "r2", false)
	require.Equal(t, "on_conflict", out.Rows.Route)
	require.Zero(t, out.Rows.Inserted+out.Rows.Updated)
	require.Equal(t, e.expected("2026-11-28"), e.visible())
}
