package handlers_test

import (
	"context"
	"testing"
	"time"

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

// TestCancelledEventsInAGroup: a group asks about its events' cancellations
// in one statement; the cancelled ones (by run, by range after they were
// published) are recorded and not loaded, the others load in the group.
func TestCancelledEventsInAGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	parts := []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"}
	for i, p := range parts {
		e.stage(p, (i+1)*100, 10, i, 1)
	}
	ctx := context.Background()
	published := time.Now().Add(-time.Minute)
	_, err := audit.Cancel(ctx, e.db.Pool, "test", audit.Cancellation{RunID: "backfill__x", By: "alice", Reason: "wrong range"}, "")
	require.NoError(t, err)
	_, err = audit.Cancel(ctx, e.db.Pool, "test", audit.Cancellation{Dataset: "ds", From: "2026-11-04", To: "2026-11-09", By: "bob", Reason: "late"}, "")
	require.NoError(t, err)

	evs, ms := groupEvents(t, e, "backfill__x", 1, parts[:2]...)
	evs2, ms2 := groupEvents(t, e, "live", 3, parts[2:]...)
	evs, ms = append(evs, evs2...), append(ms, ms2...)
	for i := range ms {
		ms[i].Published = published
	}
	outs, errs := e.h.HandleGroup(ctx, evs, ms)
	want := []string{audit.StatusCancelled, audit.StatusCancelled, audit.StatusSuccess, audit.StatusCancelled}
	for i := range evs {
		require.NoError(t, errs[i], parts[i])
		require.Equal(t, want[i], outs[i].Status, parts[i])
	}
	require.Equal(t, e.expected(parts[2]), e.visible(), "only the event nobody cancelled loaded")
	require.EqualValues(t, 3, e.auditCount("cancelled"))
	atts, err := audit.PartitionAttempts(ctx, e.db.Pool, "test", "ds", "2026-11-04", 5)
	require.NoError(t, err)
	require.Len(t, atts, 1)
	require.Contains(t, atts[0].Error, "cancelled by bob")
}
