package audit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/audittest"
)

func TestLatestInRangeAndAttempts(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	succeedVia(t, db.Pool, "orders", "2026-11-01", "r1")
	// 11-02: a success, then a forced rerun that failed: the latest is the failure.
	succeedVia(t, db.Pool, "orders", "2026-11-02", "r1")
	k := audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-02", RunID: "r2"}
	b, err := audittest.Begin(ctx, db.Pool, audit.Attempt{RunKey: k, Force: true, TriggeredBy: "web:2026-11-02:r2"}, 0)
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, b.ID, errors.New(`column "x" <b>does not exist</b>`), "fatal"))
	// 11-03: running. A skipped duplicate of 11-01 changes nothing.
	_, err = audittest.Begin(ctx, db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-03", RunID: "r1"}}, 0)
	require.NoError(t, err)
	skip, err := audittest.Begin(ctx, db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-01", RunID: "r1"}}, 0)
	require.NoError(t, err)
	require.True(t, skip.Skipped)
	succeedVia(t, db.Pool, "orders", "2026-12-01", "r1") // out of range

	got, err := audit.LatestInRange(ctx, db.Pool, "shop", []string{"orders", "customers"}, "2026-11-01", "2026-11-30")
	require.NoError(t, err)
	st := map[string]string{}
	for _, l := range got {
		st[l.Partition] = l.Status + "/" + l.ErrorKind + "/" + l.RunID
	}
	require.Equal(t, map[string]string{
		"2026-11-01": "success//r1",
		"2026-11-02": "failed/fatal/r2",
		"2026-11-03": "started//r1",
	}, st)

	recent, err := audit.RecentPartitions(ctx, db.Pool, "shop", []string{"orders"}, 2, 1000)
	require.NoError(t, err)
	require.Equal(t, []string{"2026-12-01", "2026-11-01"}, recent) // the skip of 11-01 is newer than 11-03's start

	atts, err := audit.PartitionAttempts(ctx, db.Pool, "shop", "orders", "2026-11-02", 10)
	require.NoError(t, err)
	require.Len(t, atts, 2)
	require.Equal(t, "failed", atts[0].Status)
	require.Equal(t, `column "x" <b>does not exist</b>`, atts[0].Error)
	require.Equal(t, "web:2026-11-02:r2", atts[0].TriggeredBy)
	require.True(t, atts[0].Force)
	require.Equal(t, "success", atts[1].Status)
	require.EqualValues(t, 1, *atts[1].Rows)

	id, err := audit.RecordAction(ctx, db.Pool, "shop", audit.ActionReplay, "alice", "127.0.0.1:5555", map[string]any{"seq": 7})
	require.NoError(t, err)
	require.NoError(t, audit.FinishAction(ctx, db.Pool, id, "republished as seq 12"))
	acts, err := audit.RecentActions(ctx, db.Pool, "shop", 5)
	require.NoError(t, err)
	require.Len(t, acts, 1)
	require.Equal(t, "alice", acts[0].RequestedBy)
	require.JSONEq(t, `{"seq":7}`, acts[0].Detail)
	require.Equal(t, "republished as seq 12", acts[0].Outcome)
}

func TestStateOfAndWaitingFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ status, kind, want string }{
		{"", "", audit.StatusMissing},
		{audit.StatusStarted, "", audit.StatusStarted},
		{audit.StatusSuccess, "", audit.StatusSuccess},
		{audit.StatusFailed, audit.KindTransient, audit.StatusFailed},
		{audit.StatusFailed, audit.KindFatal, audit.StatusFailed},
		{audit.StatusFailed, audit.KindCheck, audit.StateRejected},
	} {
		require.Equal(t, tc.want, audit.StateOf(tc.status, tc.kind), "%s/%s", tc.status, tc.kind)
	}
	states := map[string]string{"orders": audit.StatusSuccess, "clicks": audit.StateRejected, "refunds": audit.StatusMissing}
	got := audit.WaitingFor([]string{"orders", "clicks", "refunds"}, func(ds string) string { return states[ds] })
	require.Equal(t, []audit.Waiting{{Dataset: "clicks", State: audit.StateRejected}, {Dataset: "refunds", State: audit.StatusMissing}}, got)
	require.Equal(t, "clicks: rejected", got[0].String())
	require.Empty(t, audit.WaitingFor([]string{"orders"}, func(ds string) string { return states[ds] }))
}
