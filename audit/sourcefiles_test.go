package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
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
