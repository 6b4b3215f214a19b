package audit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/audittest"
)

// succeedVia records a success the way a load does (audittest.Load).
func succeedVia(t *testing.T, db *pgxpool.Pool, dataset, partition, runID string) {
	t.Helper()
	_, err := audittest.Load(context.Background(), db, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: dataset, Partition: partition, RunID: runID}}, audit.Rows{Inserted: 1})
	require.NoError(t, err)
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
	b, err := audittest.Begin(ctx, db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-02", RunID: "r1"}}, 0)
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, b.ID, context.DeadlineExceeded, "transient"))

	got, err := audit.LoadedPartitions(ctx, db.Pool, "shop", "orders", "2026-11-01", "2026-11-30")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"2026-11-01": true, "2026-11-03": true}, got)
}
