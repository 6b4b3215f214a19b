package why_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/why"
)

func TestStoryOfAPausedAndACancelledPartition(t *testing.T) {
	w := newWorld(t, false)
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	_, err := audit.PauseDataset(ctx, w.db.Pool, w.cfg.Pipeline, "daily", "alice", "upstream re-export", &until, "")
	require.NoError(t, err)
	r := w.tell("daily", "2026-03-05", time.Now())
	require.Equal(t, why.StatePaused, r.Verdict.State)
	require.Equal(t, 3, r.Verdict.Exit, "pending, as before the pause")
	require.Contains(t, r.Verdict.Line, "dataset paused by alice at ")
	require.Contains(t, r.Verdict.Line, ": upstream re-export (until "+until.UTC().Format(time.RFC3339)+")")
	require.Equal(t, "idem resume daily", r.Verdict.Next)

	_, err = audit.ResumeDataset(ctx, w.db.Pool, w.cfg.Pipeline, "daily", "bob", "", "")
	require.NoError(t, err)
	c, err := audit.Cancel(ctx, w.db.Pool, w.cfg.Pipeline, audit.Cancellation{RunID: "backfill__x", By: "carol", Reason: "wrong range"}, "")
	require.NoError(t, err)
	d := time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)
	_, err = audit.RecordCancelled(ctx, w.db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: w.cfg.Pipeline, Dataset: "daily", Partition: "2026-03-05", RunID: "backfill__x"}, LogicalDate: &d}, c)
	require.NoError(t, err)
	r = w.tell("daily", "2026-03-05", time.Now())
	require.Nil(t, r.Paused)
	require.Equal(t, why.StateCancelled, r.Verdict.State)
	require.Equal(t, 3, r.Verdict.Exit)
	require.Contains(t, r.Verdict.Line, "not loaded: run backfill__x was cancelled by carol at ")
}
