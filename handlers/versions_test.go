package handlers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
)

const versionsPartition = "2026-11-28"

// keepVersions makes e's dataset keep n versions of each partition.
func (e *env) keepVersions(n int) {
	e.ds.Archive = &audit.Archive{Pipeline: "test", Dataset: "ds", TargetSchema: "analytics", TargetTable: "t",
		PartitionColumn: "event_date", Keep: n}
}

// rows is the text of every column of every row the partition holds in
// the physical table, in order: numerics, NULLs and bookkeeping columns
// compared byte for byte.
func (e *env) rows() string {
	var s *string
	require.NoError(e.t, e.db.Pool.QueryRow(context.Background(),
		`SELECT string_agg(t::text, E'\n' ORDER BY t::text) FROM `+e.f.raw+` t WHERE event_date = $1`, versionsPartition).Scan(&s))
	if s == nil {
		return ""
	}
	return *s
}

func (e *env) operator(restore bool, toRun string) (handlers.OperatorResult, error) {
	r := handlers.OperatorRequest{Dataset: "ds", Partition: versionsPartition, ToRun: toRun, Reason: "bad export", By: "tester"}
	if restore {
		return e.h.Restore(context.Background(), r)
	}
	return e.h.Retract(context.Background(), r)
}

func (e *env) versions() int64 {
	return e.db.Int(e.t, "SELECT count(*) FROM idem.archived_versions WHERE partition_key = $1", versionsPartition)
}

// Every strategy archives the rows a load replaces, a restore brings them
// back byte for byte (and can itself be undone), and the archive keeps at
// most keep_versions versions of the partition.
func TestRestoreEveryStrategy(t *testing.T) {
	t.Parallel()
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			e := newEnv(t, f)
			e.keepVersions(2)
			e.stage(versionsPartition, 1, 5, 1, 1)
			e.db.Exec(t, "UPDATE staging.src SET note = NULL WHERE id = 2")
			e.mustLoad(versionsPartition, "good", false)
			good := e.rows()
			require.NotEmpty(t, good)
			require.Zero(t, e.versions(), "the first load replaces nothing a run wrote")

			e.stage(versionsPartition, 1, 3, 9, 2)
			e.mustLoad(versionsPartition, "bad", false)
			bad := e.rows()
			require.NotEqual(t, good, bad)
			require.Equal(t, int64(1), e.versions())

			res, err := e.operator(true, "")
			require.NoError(t, err)
			require.Equal(t, "good", res.Restored.Version.RunID)
			require.Equal(t, "restore__good__1", res.RunID)
			require.Equal(t, good, e.rows(), "the rows of run good, byte for byte")
			run, err := audit.LatestRun(context.Background(), e.db.Pool, "test", "ds", versionsPartition)
			require.NoError(t, err)
			require.Equal(t, "restore__good__1", run)
			require.Equal(t, int64(1), e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE kind = 'restored' AND status = 'success'"))

			// The restore archived the bad rows: restoring them undoes it.
			_, err = e.operator(true, "bad")
			require.NoError(t, err)
			require.Equal(t, bad, e.rows())

			for i, run := range []string{"r3", "r4", "r5"} {
				e.stage(versionsPartition, 1, 4, 20+i, 3)
				e.mustLoad(versionsPartition, run, false)
			}
			require.Equal(t, int64(2), e.versions(), "keep_versions 2")
			require.Equal(t, e.versions(), e.db.Int(t, `SELECT count(DISTINCT idem_version) FROM idem_archive.analytics__t`))
		})
	}
}

func TestKeepVersionsZeroArchivesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	e.keepVersions(0)
	e.stage(versionsPartition, 1, 3, 1, 1)
	e.mustLoad(versionsPartition, "a", false)
	e.stage(versionsPartition, 1, 3, 2, 1)
	e.mustLoad(versionsPartition, "b", false)
	require.Zero(t, e.db.Int(t, "SELECT count(*) FROM pg_tables WHERE schemaname = 'idem_archive'"), "no archive table")
	require.Zero(t, e.versions())
	_, err := e.operator(true, "")
	require.ErrorIs(t, err, handlers.ErrRefused)
	require.ErrorContains(t, err, "no archived version")
}

func TestRestoreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	e.keepVersions(3)
	e.stage(versionsPartition, 1, 3, 1, 1)
	e.mustLoad(versionsPartition, "a", false)

	_, err := e.operator(true, "")
	require.ErrorIs(t, err, handlers.ErrRefused, "no version yet")
	require.ErrorContains(t, err, "no archived version")

	e.stage(versionsPartition, 1, 3, 2, 1)
	e.mustLoad(versionsPartition, "b", false)
	_, err = e.operator(true, "nope")
	require.ErrorContains(t, err, "no archived version of run nope")

	for _, ddl := range []string{
		"ALTER TABLE analytics.t ADD COLUMN extra int",
		"ALTER TABLE analytics.t ALTER COLUMN amount TYPE numeric(14,2)",
	} {
		tx, err := e.db.Pool.Begin(context.Background())
		require.NoError(t, err)
		_, err = tx.Exec(context.Background(), ddl)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(context.Background()))
		before, ledger := e.rows(), e.db.Int(t, "SELECT count(*) FROM idem.run_ledger")
		_, err = e.operator(true, "")
		require.ErrorIs(t, err, handlers.ErrRefused, ddl)
		require.ErrorContains(t, err, "columns changed")
		require.Equal(t, before, e.rows(), "nothing changed")
		require.Equal(t, ledger, e.db.Int(t, "SELECT count(*) FROM idem.run_ledger"))
	}
	require.Equal(t, int64(4), e.db.Int(t, "SELECT count(*) FROM idem.operator_actions WHERE action = 'restore' AND outcome LIKE 'refused%'"))
	// A load after the change archives with the new columns.
	e.mustLoad(versionsPartition, "c", false)
	_, err = e.operator(true, "b")
	require.NoError(t, err)
}

// A retraction empties the partition, counts as loaded for the calendar,
// triggers then:, and skips a later ordinary run with its reason; a
// forced run loads again.
func TestRetract(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	e.keepVersions(3)
	e.ds.Then = []string{"down"}
	e.stage(versionsPartition, 1, 3, 1, 1)
	e.mustLoad(versionsPartition, "a", false)

	res, err := e.operator(false, "")
	require.NoError(t, err)
	require.Equal(t, "retract__1", res.RunID)
	require.Equal(t, []string{"down"}, res.Downstream)
	require.Equal(t, int64(3), res.Deleted)
	require.Empty(t, e.rows())
	loaded, err := audit.LoadedPartitions(context.Background(), e.db.Pool, "test", "ds", versionsPartition, versionsPartition)
	require.NoError(t, err)
	require.True(t, loaded[versionsPartition], "the calendar counts it: intentionally empty")
	day, _ := time.Parse(time.DateOnly, versionsPartition)
	st, err := audit.StatusRange(context.Background(), e.db.Pool, "test", "ds", day, day)
	require.NoError(t, err)
	require.Equal(t, audit.StateRetracted, st[0].Status)
	require.Equal(t, int64(1), e.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE dataset = 'down' AND run_id = 'retract__1'"))
	require.Equal(t, int64(1), e.db.Int(t, "SELECT count(*) FROM idem.operator_actions WHERE action = 'retract' AND requested_by = 'tester'"))

	out := e.mustLoad(versionsPartition, "replay", false)
	require.Equal(t, audit.StatusSkipped, out.Status)
	require.Empty(t, e.rows())
	var why string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), "SELECT error FROM idem.pipeline_audit WHERE id = $1", out.AuditID).Scan(&why))
	require.Regexp(t, `^retracted by tester at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: bad export; publish with --force to load it again$`, why)

	out = e.mustLoad(versionsPartition, "forced", true)
	require.Equal(t, audit.StatusSuccess, out.Status)
	require.NotEmpty(t, e.rows())
	// No longer retracted: an ordinary run loads.
	require.Equal(t, audit.StatusSuccess, e.mustLoad(versionsPartition, "next", false).Status)

	// The retraction archived the rows it deleted: a restore brings them back.
	_, err = e.operator(true, "a")
	require.NoError(t, err)
	require.Equal(t, int64(3), e.db.Int(t, "SELECT count(*) FROM analytics.t"))
}

// Archived versions follow the audit's retention.
func TestPruneVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	e.keepVersions(5)
	for i, run := range []string{"a", "b", "c"} {
		e.stage(versionsPartition, 1, 3, i, 1)
		e.mustLoad(versionsPartition, run, false)
	}
	require.Equal(t, int64(2), e.versions())
	e.db.Exec(t, "UPDATE idem.archived_versions SET archived_at = archived_at - interval '10 days' WHERE run_id = 'a'")
	n, err := audit.PruneVersions(context.Background(), e.db.Pool, 7*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, int64(1), e.versions())
	require.Equal(t, int64(3), e.db.Int(t, "SELECT count(*) FROM idem_archive.analytics__t"), "run b's 3 rows only")
}

// A group load skips a retracted partition's ordinary event with its
// reason, as a load alone does.
func TestRetractedSkippedInAGroup(t *testing.T) {
	t.Parallel()
	f := fixtures[0]
	f.grouped = true
	e := newEnv(t, f)
	e.keepVersions(0) // no archive: the dataset stays groupable
	e.stage(versionsPartition, 1, 3, 1, 1)
	e.mustLoad(versionsPartition, "a", false)
	_, err := e.operator(false, "")
	require.NoError(t, err)
	out := e.mustLoad(versionsPartition, "b", false)
	require.Equal(t, audit.StatusSkipped, out.Status)
	require.Empty(t, e.rows())
	require.Equal(t, int64(1), e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE id = $1 AND error LIKE 'retracted by tester at %'", out.AuditID))
	require.Equal(t, audit.StatusSuccess, e.mustLoad(versionsPartition, "c", true).Status)
	require.NotEmpty(t, e.rows())
}
