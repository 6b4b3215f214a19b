package handlers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
)

func TestCancelledBackfillIsRecordedNotLoaded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	e.stage("2026-11-27", 1, 10, 1, 1)
	e.stage("2026-11-28", 1, 10, 1, 1)
	ctx := context.Background()
	_, err := audit.Cancel(ctx, e.db.Pool, "test", audit.Cancellation{RunID: "backfill__x", By: "alice", Reason: "wrong range"}, "")
	require.NoError(t, err)

	out, err := e.loadSeq("2026-11-28", "backfill__x", 7, 3)
	require.NoError(t, err, "a cancelled event is handled: acknowledged, not retried")
	require.Equal(t, audit.StatusCancelled, out.Status)
	require.EqualValues(t, 0, e.db.Int(t, "SELECT count(*) FROM analytics.t"), "nothing loaded")
	atts, err := audit.PartitionAttempts(ctx, e.db.Pool, "test", "ds", "2026-11-28", 5)
	require.NoError(t, err)
	require.Len(t, atts, 1)
	require.Equal(t, audit.StatusCancelled, atts[0].Status)
	require.Contains(t, atts[0].Error, "cancelled by alice")

	// Another run of the partition supersedes it as usual.
	out, err = e.loadSeq("2026-11-28", "live", 8, 3)
	require.NoError(t, err)
	require.Equal(t, audit.StatusSuccess, out.Status)
	require.EqualValues(t, 10, e.db.Int(t, "SELECT count(*) FROM analytics.t"))
}
