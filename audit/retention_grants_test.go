package audit_test

// Retention under the least-privilege role of deploy/postgres/grants.sql:
// the role deletes nothing in schema idem, prunes through the functions of
// schema v25, and cannot make them delete anything younger than
// idem.retention_floor; a dataset's kept versions are trimmed through the
// function of schema v26.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/pgtest"
)

// underGrants is a database laid out by deploy/postgres/example-schema.sql,
// migrated by its administrator, and a login role set up by exactly
// deploy/postgres/grants.sql (its name made unique): db is the
// administrator's, loader a pool connected as the role.
func underGrants(t *testing.T) (db *pgtest.DB, loader *pgxpool.Pool, role string) {
	t.Helper()
	ctx := context.Background()
	db = pgtest.NewDB(t)
	schema, err := os.ReadFile("../deploy/postgres/example-schema.sql")
	require.NoError(t, err)
	db.Exec(t, string(schema))
	_, err = audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)

	role, roleURL := db.LoaderRole(t, "../deploy/postgres/grants.sql", nil)
	cfg, err := pgxpool.ParseConfig(roleURL)
	require.NoError(t, err)
	loader, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(loader.Close)
	var user string
	require.NoError(t, loader.QueryRow(ctx, "SELECT current_user").Scan(&user))
	require.Equal(t, role, user)
	return db, loader, role
}

// requireDenied fails t unless err is PostgreSQL's insufficient_privilege.
func requireDenied(t *testing.T, err error, stmt string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: got %v", stmt, err)
	require.Equal(t, "42501", pgErr.Code, "%s: %v", stmt, err)
}

// purgeAll runs the relay's purge as the loader until a batch comes back
// short, and returns how many rows went.
func purgeAll(t *testing.T, loader *pgxpool.Pool, retention time.Duration) int64 {
	t.Helper()
	const limit = 100
	var total int64
	for {
		n, err := audit.PurgeOutbox(context.Background(), loader, retention, limit)
		require.NoError(t, err)
		total += n
		if n < limit {
			return total
		}
	}
}

// monthSQL writes a month of history, every attempt started in the last 30
// days, ids in the order of started_at: each day, partitions p0 to p4 of
// orders fail, load, and see a duplicate skipped; partition "all" of dim
// loads, and its downstream event is sent a minute later. Each success has
// its ledger row. 480 attempts, 180 ledger rows, 30 outbox rows.
const monthSQL = `
WITH ins AS (
     INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, error_kind, started_at, finished_at)
     SELECT 'shop', ds, p, 'm' || $1::int || 'd' || d, status, 1, kind, at, at + interval '1 second'
       FROM (SELECT 'orders' AS ds, 'p' || p AS p, d, s.status, s.kind,
                    now() - interval '12 hours' - (29 - d) * interval '1 day' + p * interval '1 minute' + s.k * interval '1 second' AS at
               FROM generate_series(0, 29) d, generate_series(0, 4) p,
                    (VALUES (0, 'failed', 'transient'), (1, 'success', NULL), (2, 'skipped', NULL)) s (k, status, kind)
             UNION ALL
             SELECT 'dim', 'all', d, 'success', NULL, now() - interval '12 hours' - (29 - d) * interval '1 day' + interval '10 minutes'
               FROM generate_series(0, 29) d) x
      ORDER BY at
     RETURNING id, task_id, partition_key, run_id, status, finished_at),
led AS (
     INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id, succeeded_at)
     SELECT 'shop', task_id, partition_key, run_id, id, finished_at FROM ins WHERE status = 'success')
INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, created_at, next_attempt_at, sent_at, attempts)
SELECT 'report', partition_key, run_id, id, finished_at, finished_at, finished_at + interval '1 minute', 1
  FROM ins WHERE task_id = 'dim'`

// aMonthLaterSQL moves every stored moment 30 days back.
const aMonthLaterSQL = `
UPDATE idem.pipeline_audit SET started_at = started_at - interval '30 days', finished_at = finished_at - interval '30 days';
UPDATE idem.run_ledger SET succeeded_at = succeeded_at - interval '30 days';
UPDATE idem.outbox SET created_at = created_at - interval '30 days', next_attempt_at = next_attempt_at - interval '30 days',
                       sent_at = sent_at - interval '30 days'`

// keptSQL lists the attempts no pass may delete: each partition's latest
// attempt that is not a skip, its latest success, and those an unsent
// outbox row names.
const keptSQL = `
SELECT array_agg(id ORDER BY id) FROM (
       SELECT max(id) FILTER (WHERE status <> 'skipped') AS id FROM idem.pipeline_audit GROUP BY dag_id, task_id, partition_key
       UNION
       SELECT max(id) FILTER (WHERE status = 'success') FROM idem.pipeline_audit GROUP BY dag_id, task_id, partition_key
       UNION
       SELECT audit_id FROM idem.outbox WHERE sent_at IS NULL) k
 WHERE id IS NOT NULL`

// TestRetentionAsLoaderKeepsTheAuditFlat: six months of history, a month
// at a time, each month followed by the relay's purge and the hourly
// prune, both as the role of grants.sql. The audit stays at one month of
// attempts and what must stay; the ledger keeps every row.
func TestRetentionAsLoaderKeepsTheAuditFlat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, loader, _ := underGrants(t)

	// Before the first month: a partition whose only attempt failed, and
	// one that loaded, then failed, and was never attempted again.
	db.Exec(t, `
		WITH ins AS (
		     INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, error_kind, started_at, finished_at)
		     SELECT 'shop', 'orders', p, r, s, 1, k, now() - h * interval '1 hour', now() - h * interval '1 hour'
		       FROM (VALUES ('stuck', 'r1', 'failed', 'fatal', 719), ('retired', 'r1', 'success', NULL, 718),
		                    ('retired', 'r2', 'failed', 'fatal', 717)) v (p, r, s, k, h)
		      ORDER BY h DESC
		     RETURNING id, partition_key, run_id, status, finished_at)
		INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id, succeeded_at)
		SELECT 'shop', 'orders', partition_key, run_id, id, finished_at FROM ins WHERE status = 'success'`)

	const months = 6
	var sizes, deleted []int64
	for m := range months {
		if m > 0 {
			db.Exec(t, aMonthLaterSQL)
		}
		db.Exec(t, monthSQL, m)
		if m == 0 {
			// The first downstream event of dim was never sent: its
			// attempt stays, however old.
			db.Exec(t, "UPDATE idem.outbox SET sent_at = NULL, attempts = 0 WHERE audit_id = (SELECT min(audit_id) FROM idem.outbox)")
			// A failure of p0 and stuck's have check results and source
			// files; p0's go with it.
			db.Exec(t, `
				INSERT INTO idem.check_results (audit_id, dag_id, task_id, partition_key, run_id, name, kind, severity, status,
				                                failing, checked, threshold, duration_ms)
				SELECT id, dag_id, task_id, partition_key, run_id, 'not_empty', 'row_count', 'error', 'fail', 0, 0, '> 0', 1
				  FROM idem.pipeline_audit WHERE status = 'failed' AND (partition_key, run_id) IN (('p0', 'm0d0'), ('stuck', 'r1'));
				INSERT INTO idem.source_files (audit_id, ordinal, dag_id, task_id, partition_key, url, size_bytes, rows_read, fingerprint)
				SELECT id, 0, dag_id, task_id, partition_key, 'file:///orders.csv', 1, 1, 'fp'
				  FROM idem.pipeline_audit WHERE status = 'failed' AND (partition_key, run_id) IN (('p0', 'm0d0'), ('stuck', 'r1'))`)
		}
		var kept []int64
		require.NoError(t, db.Pool.QueryRow(ctx, keptSQL).Scan(&kept))
		require.Len(t, kept, 10, "month %d: p0-p4, dim, stuck, retired's success and failure, the unsent event's attempt", m)
		ledger := db.Checksum(t, "idem.run_ledger")

		purgeAll(t, loader, 7*24*time.Hour)
		res, err := audit.Prune(ctx, loader, audit.PruneOptions{Retention: 30 * 24 * time.Hour, Batch: 100})
		require.NoError(t, err, "month %d", m)
		require.False(t, res.Busy)
		sizes = append(sizes, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"))
		deleted = append(deleted, res.Deleted)

		require.EqualValues(t, len(kept), db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE id = ANY($1)", kept),
			"month %d: every partition's latest attempt and success, and the unsent event's attempt, stay", m)
		require.Equal(t, ledger, db.Checksum(t, "idem.run_ledger"), "month %d: the ledger is untouched", m)
		require.EqualValues(t, 180*(m+1)+1, db.Int(t, "SELECT count(*) FROM idem.run_ledger"), "month %d: every ledger row", m)
		// The unsent event, and the last 7 days' sent ones (days 23-29).
		require.EqualValues(t, 8, db.Int(t, "SELECT count(*) FROM idem.outbox"), "month %d", m)
		require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL"), "month %d", m)
		require.Zero(t, db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at < now() - interval '7 days'"), "month %d", m)
		if m > 0 {
			for _, tbl := range []string{"idem.check_results", "idem.source_files"} {
				require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM "+tbl), "month %d: p0's went with its attempt", m)
				require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM "+tbl+" x JOIN idem.pipeline_audit a ON a.id = x.audit_id WHERE a.partition_key = 'stuck'"))
			}
		}
	}
	// 2,883 attempts written; the audit holds one month's 480 and what
	// must stay: the unsent event's attempt (from the second month on),
	// stuck's failure, retired's success and failure.
	require.Equal(t, []int64{483, 484, 484, 484, 484, 484}, sizes, "the audit stays flat")
	require.Equal(t, []int64{0, 479, 480, 480, 480, 480}, deleted)
	require.EqualValues(t, 479+4*480, db.Int(t, "SELECT sum(attempts + skipped) FROM idem.pruned_attempts"), "every deleted attempt counted")
}

// TestRetentionFloorBoundsTheLoader: however short an age the role asks
// for, nothing younger than idem.retention_floor goes; the administrator
// moves the floor with one UPDATE.
func TestRetentionFloorBoundsTheLoader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, loader, _ := underGrants(t)
	require.EqualValues(t, 7*24*3600, db.Int(t, "SELECT extract(epoch FROM min_age)::bigint FROM idem.retention_floor"), "7 days, the shortest audit.retention")

	// Partition q failed 10, 6 and 3 days ago, loaded an hour ago, and saw
	// a duplicate skipped 30 minutes ago: all but the load may go by the
	// rules, once old enough.
	db.Exec(t, `
		INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, error_kind, started_at, finished_at)
		SELECT 'shop', 'orders', 'q', r, s, 1, k, now() - a, now() - a
		  FROM (VALUES ('r1', 'failed', 'fatal', interval '10 days'), ('r2', 'failed', 'fatal', interval '6 days'),
		               ('r3', 'failed', 'fatal', interval '3 days'), ('r4', 'success', NULL, interval '1 hour'),
		               ('r4', 'skipped', NULL, interval '30 minutes')) v (r, s, k, a)
		 ORDER BY a DESC;
		INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, created_at, sent_at)
		SELECT ds, 'q', 'r4', (SELECT id FROM idem.pipeline_audit WHERE status = 'success'), now() - a, now() - a + interval '1 second'
		  FROM (VALUES ('a', interval '8 days'), ('b', interval '2 days'), ('c', interval '1 minute')) v (ds, a);
		INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, created_at)
		SELECT 'd', 'q', 'r4', id, now() - interval '30 days' FROM idem.pipeline_audit WHERE status = 'success';
		INSERT INTO idem.source_waits (dag_id, task_id, partition_key, run_id, reason, since, checked_at, gives_up_at)
		VALUES ('shop', 'orders', 'w1', 'r1', 'not ready', now() - interval '11 days', now() - interval '10 days', now() - interval '9 days'),
		       ('shop', 'orders', 'w2', 'r1', 'not ready', now() - interval '21 hours', now() - interval '20 hours', now() + interval '1 hour')`)
	runs := func() []string {
		t.Helper()
		var rs []string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT array_agg(run_id || ':' || status ORDER BY id) FROM idem.pipeline_audit").Scan(&rs))
		return rs
	}

	res, err := audit.Prune(ctx, loader, audit.PruneOptions{Retention: time.Second})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Deleted, "only the failure older than the floor")
	require.Equal(t, []string{"r2:failed", "r3:failed", "r4:success", "r4:skipped"}, runs())
	require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.source_waits"))
	require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.source_waits WHERE partition_key = 'w2'"))
	n, err := audit.PurgeOutbox(ctx, loader, time.Second, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "only the event sent 8 days ago")
	require.EqualValues(t, 0, db.Int(t, "SELECT count(*) FROM idem.outbox WHERE dataset = 'a'"))

	// Called directly, with a negative, a zero or no age, and no limit.
	for _, q := range []string{
		"SELECT deleted FROM idem.prune_audit(interval '-100 years', 0, 1000)",
		"SELECT deleted FROM idem.prune_audit(NULL, 0, 1000)",
		"SELECT idem.prune_source_waits(interval '0')",
		"SELECT idem.purge_outbox(interval '-1 day', NULL)",
		"SELECT count(*) FROM idem.prune_archived_versions(interval '-1 day', 'analytics__t')",
	} {
		var got int64
		require.NoError(t, loader.QueryRow(ctx, q).Scan(&got), q)
		require.Zero(t, got, q)
	}
	require.Equal(t, []string{"r2:failed", "r3:failed", "r4:success", "r4:skipped"}, runs())
	require.EqualValues(t, 3, db.Int(t, "SELECT count(*) FROM idem.outbox"))
	require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.source_waits"))

	// The administrator lowers the floor to a day: the role's next pass
	// goes down to it, and no further.
	db.Exec(t, "UPDATE idem.retention_floor SET min_age = interval '1 day'")
	res, err = audit.Prune(ctx, loader, audit.PruneOptions{Retention: time.Second})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Deleted)
	require.Equal(t, []string{"r4:success", "r4:skipped"}, runs(), "the skip is younger than a day")
	n, err = audit.PurgeOutbox(ctx, loader, time.Second, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the event sent 2 days ago")
	require.Equal(t, []string{"c", "d"}, func() []string {
		var ds []string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT array_agg(dataset ORDER BY dataset) FROM idem.outbox").Scan(&ds))
		return ds
	}(), "the recent and the unsent events stay")
	require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.source_waits WHERE partition_key = 'w2'"))
}

// TestGrantsRefuseDeletesAndFloorChanges: under grants.sql the role deletes
// nothing in schema idem by itself, cannot move the floor or change the
// functions, and the functions are its own only by grant.
func TestGrantsRefuseDeletesAndFloorChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, loader, role := underGrants(t)
	db.Exec(t, `
		WITH ins AS (
		     INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, started_at, finished_at)
		     VALUES ('shop', 'orders', 'q', 'r1', 'success', 1, now() - interval '400 days', now() - interval '400 days')
		     RETURNING id),
		led AS (
		     INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id) SELECT 'shop', 'orders', 'q', 'r1', id FROM ins)
		INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, sent_at) SELECT 'report', 'q', 'r1', id, now() - interval '400 days' FROM ins`)
	before := db.Checksum(t, "SELECT (SELECT count(*) FROM idem.pipeline_audit), (SELECT count(*) FROM idem.run_ledger), (SELECT count(*) FROM idem.outbox)")

	for _, stmt := range []string{
		"DELETE FROM idem.pipeline_audit",
		"DELETE FROM idem.outbox",
		"DELETE FROM idem.run_ledger",
		"DELETE FROM idem.check_results",
		"DELETE FROM idem.source_files",
		"DELETE FROM idem.source_waits",
		"DELETE FROM idem.archived_versions",
		"DELETE FROM idem.pruned_attempts",
		"TRUNCATE idem.pipeline_audit",
		"TRUNCATE idem.outbox",
		"UPDATE idem.retention_floor SET min_age = interval '1 second'",
		"INSERT INTO idem.retention_floor (one, min_age) VALUES (true, interval '1 second') ON CONFLICT (one) DO UPDATE SET min_age = EXCLUDED.min_age",
		"DELETE FROM idem.retention_floor",
		"ALTER TABLE idem.retention_floor DROP CONSTRAINT retention_floor_min_age_check",
		"ALTER FUNCTION idem.prune_audit(interval, bigint, integer) SECURITY INVOKER",
		"ALTER FUNCTION idem.retention_cutoff(interval) RENAME TO retention_cutoff_before",
		"CREATE OR REPLACE FUNCTION idem.retention_cutoff(older_than interval) RETURNS timestamptz LANGUAGE sql AS 'SELECT now()'",
		"CREATE FUNCTION idem.prune_everything() RETURNS void LANGUAGE sql AS 'SELECT'",
	} {
		_, err := loader.Exec(ctx, stmt)
		requireDenied(t, err, stmt)
	}
	require.Equal(t, before, db.Checksum(t, "SELECT (SELECT count(*) FROM idem.pipeline_audit), (SELECT count(*) FROM idem.run_ledger), (SELECT count(*) FROM idem.outbox)"))
	require.EqualValues(t, 7*24*3600, db.Int(t, "SELECT extract(epoch FROM min_age)::bigint FROM idem.retention_floor"))
	var floor time.Duration
	require.NoError(t, loader.QueryRow(ctx, "SELECT min_age FROM idem.retention_floor").Scan(&floor), "the role reads the floor")
	require.Equal(t, 7*24*time.Hour, floor)

	// No privilege on any table of schema idem lets the role delete.
	require.Zero(t, db.Int(t, `
		SELECT count(*) FROM pg_class c
		 WHERE c.relnamespace = 'idem'::regnamespace AND c.relkind IN ('r', 'p')
		   AND (has_table_privilege($1::name, c.oid, 'DELETE') OR has_table_privilege($1::name, c.oid, 'TRUNCATE'))`, role))
	// The functions run as their owner, with a fixed search_path; PUBLIC
	// may not run them, the role may.
	fns := []string{
		"idem.prune_audit(interval, bigint, integer)", "idem.prune_source_waits(interval)",
		"idem.purge_outbox(interval, integer)", "idem.prune_archived_versions(interval, text)",
		"idem.trim_archived_versions(text, text, text, integer, bigint[])",
	}
	for _, fn := range fns {
		var definer, public, granted bool
		var config []string
		require.NoError(t, db.Pool.QueryRow(ctx, `
			SELECT p.prosecdef, p.proconfig,
			       EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
			                WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'),
			       has_function_privilege($2::name, p.oid, 'EXECUTE')
			  FROM pg_proc p WHERE p.oid = $1::text::regprocedure`, fn, role).Scan(&definer, &config, &public, &granted), fn)
		require.True(t, definer, fn)
		require.Equal(t, []string{"search_path=pg_catalog, pg_temp"}, config, fn)
		require.False(t, public, "%s: PUBLIC may not run it", fn)
		require.True(t, granted, fn)
	}

	// And the one path it has works: the sent event, then the attempt
	// (the latest success of q stays, so nothing of the audit goes).
	n, err := audit.PurgeOutbox(ctx, loader, time.Second, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	res, err := audit.Prune(ctx, loader, audit.PruneOptions{Retention: time.Second})
	require.NoError(t, err)
	require.Zero(t, res.Deleted)
	require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"))
	require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.run_ledger"))
}

// TestPruneVersionsUnderGrants: the role prunes archived versions older
// than the retention, their records in schema idem through the function
// and their rows in the archive table it created, and nothing younger
// than the floor.
func TestPruneVersionsUnderGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, loader, _ := underGrants(t)
	// Schema idem_archive is the migration's; the role creates its tables.
	_, err := loader.Exec(ctx, "CREATE TABLE idem_archive.analytics__t (idem_version bigint, v int)")
	require.NoError(t, err)
	var ids []int64
	require.NoError(t, loader.QueryRow(ctx, `
		WITH v AS (
		     INSERT INTO idem.archived_versions (dag_id, task_id, partition_key, run_id, archive_table, columns, row_count)
		     SELECT 'shop', 't', '2026-01-01', r, 'analytics__t', 'v integer', 1 FROM unnest(ARRAY['a', 'b', 'c']) r
		     RETURNING id, run_id),
		rows AS (
		     INSERT INTO idem_archive.analytics__t SELECT id, g FROM v, generate_series(1, 2) g)
		SELECT array_agg(id ORDER BY run_id) FROM v`).Scan(&ids))
	db.Exec(t, `UPDATE idem.archived_versions SET archived_at = now() - CASE run_id WHEN 'a' THEN interval '10 days' ELSE interval '3 days' END
	             WHERE run_id IN ('a', 'b')`)

	n, err := audit.PruneVersions(ctx, loader, time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a is older than the floor; b is not")
	require.Equal(t, "b,c", func() string {
		var s string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT string_agg(run_id, ',' ORDER BY run_id) FROM idem.archived_versions").Scan(&s))
		return s
	}())
	require.Zero(t, db.Int(t, "SELECT count(*) FROM idem_archive.analytics__t WHERE idem_version = $1", ids[0]), "a's rows went with it")
	require.EqualValues(t, 4, db.Int(t, "SELECT count(*) FROM idem_archive.analytics__t"))

	_, err = loader.Exec(ctx, "DELETE FROM idem.archived_versions")
	requireDenied(t, err, "DELETE FROM idem.archived_versions")
	require.EqualValues(t, 2, db.Int(t, "SELECT count(*) FROM idem.archived_versions"))
}

// TestKeepVersionsUnderGrants: a dataset that keeps 2 versions loads as
// the role of grants.sql. Each load archives the partition's rows in
// schema idem_archive, which `idem migrate` created, and keeps the newest
// 2 versions through idem.trim_archived_versions; the role still cannot
// delete a version's record by itself, and the function, called directly,
// deletes nothing of another partition and never a partition's newest
// version.
func TestKeepVersionsUnderGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, loader, _ := underGrants(t)
	const day, otherDay = "2026-11-25", "2026-11-26"
	a := &audit.Archive{Pipeline: "shop", Dataset: "orders", TargetSchema: "analytics", TargetTable: "fact_orders",
		PartitionColumn: "event_date", Keep: 2}

	// load replaces the partition's rows with n rows of run (run in their
	// status) as the role, in one transaction, archiving first the rows it
	// replaces, as a load with keep_versions does. It returns the version
	// saved (0: the partition held no run's rows).
	load := func(partition, run string, n int) int64 {
		t.Helper()
		var id int64
		err := pgx.BeginFunc(ctx, loader, func(tx pgx.Tx) error {
			var err error
			if id, err = a.Save(ctx, tx, partition); err != nil {
				return err
			}
			if _, err := a.Empty(ctx, tx, partition); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `
				WITH r AS (
				     INSERT INTO analytics.fact_orders (order_id, customer_id, total, status, event_date)
				     SELECT g, g, g, $2, $1::text::date FROM generate_series(1, $3::int) g),
				ins AS (
				     INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, row_count, finished_at)
				     VALUES ('shop', 'orders', $1, $2, 'success', 1, $3, clock_timestamp())
				     RETURNING id)
				INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id)
				SELECT 'shop', 'orders', $1, $2, id FROM ins`, partition, run, n)
			return err
		})
		require.NoError(t, err, "load %s of %s", run, partition)
		return id
	}
	text := func(q string, args ...any) string {
		t.Helper()
		var s *string
		require.NoError(t, db.Pool.QueryRow(ctx, q, args...).Scan(&s), q)
		if s == nil {
			return ""
		}
		return *s
	}
	const versionsSQL = "SELECT string_agg(id || ':' || run_id || ':' || row_count, ',' ORDER BY id) FROM idem.archived_versions WHERE partition_key = $1"
	const rowsSQL = `
		SELECT string_agg(idem_version || ':' || status || ':' || n, ',' ORDER BY idem_version)
		  FROM (SELECT idem_version, status, count(*) AS n FROM idem_archive.analytics__fact_orders
		         WHERE event_date = $1::text::date GROUP BY 1, 2) v`

	require.Zero(t, load(day, "r0", 1), "the first load replaces nothing a run wrote")
	var ids []int64
	for i, run := range []string{"r1", "r2", "r3", "r4"} {
		id := load(day, run, i+2)
		require.NotZero(t, id, "run %s archives the rows of the run before it", run)
		ids = append(ids, id)
	}
	require.Equal(t, fmt.Sprintf("%d:r2:3,%d:r3:4", ids[2], ids[3]), text(versionsSQL, day), "the newest 2 versions")
	require.Equal(t, fmt.Sprintf("%d:r2:3,%d:r3:4", ids[2], ids[3]), text(rowsSQL, day), "and their rows, only theirs")
	require.EqualValues(t, 5, db.Int(t, "SELECT count(*) FROM analytics.fact_orders WHERE status = 'r4'"))

	// Another partition, with a version of its own.
	load(otherDay, "o1", 1)
	other := load(otherDay, "o2", 1)
	require.NotZero(t, other)

	_, err := loader.Exec(ctx, "DELETE FROM idem.archived_versions")
	requireDenied(t, err, "DELETE FROM idem.archived_versions")
	_, err = loader.Exec(ctx, "DELETE FROM idem.archived_versions WHERE id = $1", ids[2])
	requireDenied(t, err, "DELETE FROM idem.archived_versions WHERE id = ...")

	// Called directly, whatever it keeps or spares, the function deletes
	// nothing of another partition and never a partition's newest
	// version: with keep 0 the newest stays.
	trim := func(partition string, keep, spare any) []int64 {
		t.Helper()
		var gone []int64
		require.NoError(t, loader.QueryRow(ctx, `
			SELECT coalesce(array_agg(id ORDER BY id), '{}')
			  FROM idem.trim_archived_versions('shop', 'orders', $1, $2::int, $3::bigint[]) AS id`,
			partition, keep, spare).Scan(&gone))
		return gone
	}
	type call struct{ keep, spare any }
	for _, c := range []call{{1, []int64{ids[2]}}, {0, []int64{ids[2]}}, {2, []int64{}}} {
		require.Empty(t, trim(day, c.keep, c.spare), "keep %v, spare %v", c.keep, c.spare)
	}
	require.Equal(t, []int64{ids[2]}, trim(day, 0, []int64{}), "keep 0 keeps the newest")
	for _, c := range []call{{0, []int64{}}, {-5, []int64{}}, {nil, nil}, {0, []int64{ids[2]}}, {1, []int64{other, -1, -2}}, {0, []int64{other}}} {
		require.Empty(t, trim(day, c.keep, c.spare), "keep %v, spare %v", c.keep, c.spare)
	}
	require.Empty(t, trim(otherDay, 0, []int64{}))
	require.Empty(t, trim("2026-11-27", 0, []int64{}), "a partition without versions")
	require.Equal(t, fmt.Sprintf("%d:r3:4", ids[3]), text(versionsSQL, day))
	require.Equal(t, fmt.Sprintf("%d:o1:1", other), text(versionsSQL, otherDay))

	// The next load keeps the newest 2 again.
	newest := load(day, "r5", 1)
	require.Equal(t, fmt.Sprintf("%d:r3:4,%d:r4:5", ids[3], newest), text(versionsSQL, day))
	require.Equal(t, fmt.Sprintf("%d:r2:3,%d:r3:4,%d:r4:5", ids[2], ids[3], newest), text(rowsSQL, day),
		"a direct call deletes records only: the rows of r2 stay in the role's table")
}
