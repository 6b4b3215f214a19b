package audit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
)

// succeedVia records a success the way the handler does: Begin, then the
// success and the ledger row in one batch.
func succeedVia(t *testing.T, db *pgxpool.Pool, dataset, partition, runID string) {
	t.Helper()
	ctx := context.Background()
	k := audit.RunKey{Pipeline: "shop", Dataset: dataset, Partition: partition, RunID: runID}
	b, err := audit.Begin(ctx, db, audit.Attempt{RunKey: k}, 0)
	require.NoError(t, err)
	var batch pgx.Batch
	audit.QueueSucceed(&batch, b.ID, audit.Rows{Inserted: 1})
	audit.QueueRecordSuccess(&batch, k, b.ID, false)
	require.NoError(t, db.SendBatch(ctx, &batch).Close())
}

func TestLoadedPartitions(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	succeedVia(t, db.Pool, "orders", "2026-11-01", "r1")
	succeedVia(t, db.Pool, "orders", "2026-11-01", "r2") // two runs, one partition
	succeedVia(t, db.Pool, "orders", "2026-11-03", "r1")
	succeedVia(t, db.Pool, "orders", "2026-12-01", "r1")    // outside the range
	succeedVia(t, db.Pool, "customers", "2026-11-02", "r1") // another dataset
	// A failed attempt is not a load.
	b, err := audit.Begin(ctx, db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-02", RunID: "r1"}}, 0)
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, b.ID, context.DeadlineExceeded, "transient"))

	got, err := audit.LoadedPartitions(ctx, db.Pool, "shop", "orders", "2026-11-01", "2026-11-30")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"2026-11-01": true, "2026-11-03": true}, got)
}
