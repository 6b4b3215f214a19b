package audit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/audittest"
)

func TestSourceFilesCommitWithTheLoadAndReadBackByAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	k := audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-28", RunID: "r1"}
	mod := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	first := []audit.SourceFile{
		{URL: "s3://landing/orders/dt=2026-11-28/part-0001.csv", Size: 120, ETag: `"e1"`, Rows: 10},
		{URL: "s3://landing/orders/dt=2026-11-28/part-'0002.csv", Size: 80, ETag: `"e2"`, VersionID: "v9", Rows: 7},
	}
	second := []audit.SourceFile{{URL: "file:///l/dt=2026-11-28/a.csv", Size: 5, Modified: &mod, SHA256: "ab12", Rows: 1}}

	// A rolled-back load leaves no file behind.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	b := &pgx.Batch{}
	require.NoError(t, audit.QueueRecordSourceFiles(b, 1, k, "fp0", first))
	require.NoError(t, tx.SendBatch(ctx, b).Close())
	require.NoError(t, tx.Rollback(ctx))
	got, err := audit.SourceFilesOf(ctx, db.Pool, "shop", "orders", "2026-11-28", 5)
	require.NoError(t, err)
	require.Empty(t, got)

	for id, fs := range map[int64][]audit.SourceFile{1: first, 2: second} {
		b := &pgx.Batch{}
		require.NoError(t, audit.QueueRecordSourceFiles(b, id, k, "fp"+string(rune('0'+id)), fs))
		require.NoError(t, db.Pool.SendBatch(ctx, b).Close())
	}
	got, err = audit.SourceFilesOf(ctx, db.Pool, "shop", "orders", "2026-11-28", 5)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, int64(2), got[0].AuditID, "newest attempt first")
	require.Equal(t, "fp2", got[0].Fingerprint)
	require.Equal(t, second[0].URL, got[0].Files[0].URL)
	require.True(t, mod.Equal(*got[0].Files[0].Modified))
	require.Equal(t, first, got[1].Files, "every field, in listing order")

	got, err = audit.SourceFilesOf(ctx, db.Pool, "shop", "orders", "2026-11-28", 1)
	require.NoError(t, err)
	require.Len(t, got, 1, "at most the attempts asked for")
	got, err = audit.SourceFilesOf(ctx, db.Pool, "shop", "orders", "2026-11-27", 5)
	require.NoError(t, err)
	require.Empty(t, got)
}

// The watch's question: for each partition, the fingerprint of the files
// its latest success read, and its latest attempt; both outlive retention.
func TestLastLoadedListingsAnswersForEachPartitionAndSurvivesPruning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	at := func(p, run string) audit.Attempt {
		return audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: p, RunID: run}, LogicalDate: day(p)}
	}
	load := func(p, run, fingerprint string) int64 {
		a := at(p, run)
		id, err := audittest.Load(ctx, db.Pool, a, audit.Rows{Inserted: 1})
		require.NoError(t, err)
		if fingerprint != "" {
			require.NoError(t, audittest.Send(ctx, db.Pool, func(b *pgx.Batch) {
				require.NoError(t, audit.QueueRecordSourceFiles(b, id, a.RunKey, fingerprint,
					[]audit.SourceFile{{URL: "s3://l/" + p + "/a.csv", Size: 1}, {URL: "s3://l/" + p + "/b.csv", Size: 2}}))
			}))
		}
		return id
	}
	// 01: loaded twice, then a run that failed for good.
	load("2026-01-01", "r1", "fp1")
	second := load("2026-01-01", "r2", "fp2")
	id, err := audittest.Start(ctx, db.Pool, at("2026-01-01", "r3"))
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, id, errors.New("schema_mismatch: column nope: boom"), "fatal"))
	// 02: loaded with no file; 03: never attempted; 04: loaded, then a
	// duplicate skipped, which says nothing new.
	empty := load("2026-01-02", "r1", "")
	fourth := load("2026-01-04", "r1", "fp4")
	b, err := audittest.Begin(ctx, db.Pool, at("2026-01-04", "r1"), 0)
	require.NoError(t, err)
	require.True(t, b.Skipped)

	// 05: an attempt still running, after one that failed for a while.
	id, err = audittest.Start(ctx, db.Pool, at("2026-01-05", "r1"))
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, id, errors.New("deadlock detected"), "transient"))
	b, err = audittest.Begin(ctx, db.Pool, at("2026-01-05", "r1"), 4)
	require.NoError(t, err)
	require.Equal(t, 2, b.Attempt)

	keys := []string{"2026-01-05", "2026-01-04", "2026-01-03", "2026-01-02", "2026-01-01"}
	want := []audit.LoadedListing{
		{Partition: "2026-01-05", LatestRunID: "r1", LatestStatus: "started", LatestAttempt: 2},
		{Partition: "2026-01-04", AuditID: fourth, Fingerprint: "fp4", LatestRunID: "r1", LatestStatus: "success", LatestAttempt: 1},
		{Partition: "2026-01-03"},
		{Partition: "2026-01-02", AuditID: empty, LatestRunID: "r1", LatestStatus: "success", LatestAttempt: 1},
		{Partition: "2026-01-01", AuditID: second, Fingerprint: "fp2", LatestRunID: "r3", LatestStatus: "failed",
			LatestErrorKind: "fatal", LatestReason: "schema_mismatch", LatestAttempt: 1},
	}
	// LatestAt is when the latest attempt ended, or started while it runs.
	ended := func(ls []audit.LoadedListing) []audit.LoadedListing {
		t.Helper()
		out := slices.Clone(ls)
		for i := range out {
			var at time.Time
			if out[i].LatestRunID != "" {
				require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(finished_at, started_at) FROM idem.pipeline_audit
				     WHERE partition_key = $1 AND status <> 'skipped' ORDER BY id DESC LIMIT 1`, out[i].Partition).Scan(&at))
			}
			require.True(t, at.Equal(out[i].LatestAt), "%s: %s, want %s", out[i].Partition, out[i].LatestAt, at)
			out[i].LatestAt = time.Time{}
		}
		return out
	}
	got, err := audit.LastLoadedListings(ctx, db.Pool, "shop", "orders", keys)
	require.NoError(t, err)
	require.Equal(t, want, ended(got), "in the order asked")

	db.Exec(t, `UPDATE idem.pipeline_audit SET started_at = started_at - interval '100 days',
	            finished_at = finished_at - interval '100 days'`)
	res, err := audit.Prune(ctx, db.Pool, audit.PruneOptions{Retention: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Deleted, "01's first load and 04's skip")
	got, err = audit.LastLoadedListings(ctx, db.Pool, "shop", "orders", keys)
	require.NoError(t, err)
	require.Equal(t, want, ended(got), "retention keeps what the watch compares with")
}
