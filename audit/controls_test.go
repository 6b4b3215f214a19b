package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestPauseResumeKeepHistory(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()

	_, err := audit.ResumeDataset(ctx, db.Pool, "shop", "orders", "bob", "", "")
	require.ErrorIs(t, err, audit.ErrNotPaused)

	p, err := audit.PauseDataset(ctx, db.Pool, "shop", "orders", "alice", "upstream fix", nil, "")
	require.NoError(t, err)
	require.Equal(t, "alice", p.By)
	in, err := audit.PausesInForce(ctx, db.Pool, "shop")
	require.NoError(t, err)
	require.Contains(t, in, "orders")
	require.NotContains(t, in, "customers")

	// A second pause replaces the first; one stays open.
	until := time.Now().Add(time.Hour)
	_, err = audit.PauseDataset(ctx, db.Pool, "shop", "orders", "carol", "longer", &until, "")
	require.NoError(t, err)
	in, err = audit.PausesInForce(ctx, db.Pool, "shop")
	require.NoError(t, err)
	require.Equal(t, "carol", in["orders"].By)

	r, err := audit.ResumeDataset(ctx, db.Pool, "shop", "orders", "bob", "fixed", "")
	require.NoError(t, err)
	require.Equal(t, "bob", r.ResumeBy)
	require.False(t, r.InForceAt(time.Now()))
	in, err = audit.PausesInForce(ctx, db.Pool, "shop")
	require.NoError(t, err)
	require.Empty(t, in)

	hist, err := audit.DatasetPauses(ctx, db.Pool, "shop", "orders", 10)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	require.Contains(t, hist[0].String(), "resumed by bob")

	acts, err := audit.RecentActions(ctx, db.Pool, "shop", 10)
	require.NoError(t, err)
	var kinds []string
	for _, a := range acts {
		kinds = append(kinds, a.Action)
	}
	require.Equal(t, []string{"resume", "pause", "pause"}, kinds)
}

func TestPauseWithPassedUntilEndsByItself(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	until := time.Now().Add(300 * time.Millisecond)
	_, err := audit.PauseDataset(ctx, db.Pool, "shop", "orders", "alice", "short", &until, "")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		in, err := audit.PausesInForce(ctx, db.Pool, "shop")
		return err == nil && len(in) == 0
	}, 10*time.Second, 20*time.Millisecond)
	_, err = audit.ResumeDataset(ctx, db.Pool, "shop", "orders", "bob", "", "")
	require.ErrorIs(t, err, audit.ErrNotPaused)
	// A new pause closes the expired one.
	_, err = audit.PauseDataset(ctx, db.Pool, "shop", "orders", "alice", "again", nil, "")
	require.NoError(t, err)
}

func TestCancellationsCoverRunsAndRanges(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	before := time.Now().Add(-time.Minute)

	none, err := audit.CancellationOf(ctx, db.Pool, "shop", "orders", "2026-11-01", "backfill__1", before)
	require.NoError(t, err)
	require.Nil(t, none)

	c, err := audit.Cancel(ctx, db.Pool, "shop", audit.Cancellation{RunID: "backfill__1", By: "alice", Reason: "wrong range"}, "")
	require.NoError(t, err)
	got, err := audit.CancellationOf(ctx, db.Pool, "shop", "payments", "2026-11-01", "backfill__1", time.Now())
	require.NoError(t, err)
	require.NotNil(t, got, "a run's cancellation covers its downstream datasets too")
	require.Equal(t, c.ID, got.ID)

	_, err = audit.Cancel(ctx, db.Pool, "shop", audit.Cancellation{Dataset: "orders", From: "2026-11-10", To: "2026-11-20", By: "bob", Reason: "r"}, "")
	require.NoError(t, err)
	got, err = audit.CancellationOf(ctx, db.Pool, "shop", "orders", "2026-11-15", "live", before)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, "bob", got.By)
	for _, miss := range []struct{ ds, p string }{{"orders", "2026-11-21"}, {"customers", "2026-11-15"}} {
		got, err = audit.CancellationOf(ctx, db.Pool, "shop", miss.ds, miss.p, "live", before)
		require.NoError(t, err)
		require.Nil(t, got, miss)
	}
	got, err = audit.CancellationOf(ctx, db.Pool, "shop", "orders", "2026-11-15", "live", time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Nil(t, got, "an event published after a range's cancellation is not covered")

	d := time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC)
	id, err := audit.RecordCancelled(ctx, db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-15", RunID: "live"}, LogicalDate: &d}, c)
	require.NoError(t, err)
	atts, err := audit.PartitionAttempts(ctx, db.Pool, "shop", "orders", "2026-11-15", 5)
	require.NoError(t, err)
	require.Equal(t, id, atts[0].ID)
	require.Equal(t, audit.StatusCancelled, atts[0].Status)
	require.Contains(t, atts[0].Error, "cancelled by alice")

	acts, err := audit.RecentActions(ctx, db.Pool, "shop", 10)
	require.NoError(t, err)
	require.Len(t, acts, 2)
	require.Equal(t, "cancel", acts[0].Action)
}

// The statements that begin attempts ask the cancellations too: once a
// cancel has committed they write nothing for an event it covers (its run,
// or a range holding its partition, cancelled after it was published) and
// report Cancelled, whatever the caller read before; other runs, other
// partitions and events published after a range's cancel begin.
func TestBeginWritesNothingOnceCancelled(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	published := time.Now().Add(-time.Minute)
	att := func(part, run string) audit.Attempt {
		return audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: part, RunID: run}, StreamSeq: 7, Published: published}
	}
	begin, group := beginners(t, db)
	_, err := audit.Cancel(ctx, db.Pool, "shop", audit.Cancellation{RunID: "backfill__a", By: "alice", Reason: "wrong range"}, "")
	require.NoError(t, err)
	_, err = audit.Cancel(ctx, db.Pool, "shop", audit.Cancellation{Dataset: "orders", From: "2026-01-01", To: "2026-01-31", By: "alice", Reason: "rebuilt"}, "")
	require.NoError(t, err)

	bg := begin(att("2026-03-01", "backfill__a"))
	require.True(t, bg.Cancelled, "its run is cancelled")
	require.False(t, bg.Spent, "a cancel is no spent budget")
	require.Zero(t, bg.ID)
	bg = begin(att("2026-01-15", "backfill__b"))
	require.True(t, bg.Cancelled, "its partition's range was cancelled after it was published")
	gs := group(att("2026-03-02", "backfill__a"), att("2026-01-16", "backfill__b"), att("2026-03-03", "backfill__b"))
	require.True(t, gs[0].Cancelled && gs[1].Cancelled)
	require.Zero(t, gs[0].ID+gs[1].ID)
	require.False(t, gs[2].Cancelled, "another run, outside the range")
	require.NotZero(t, gs[2].ID)
	later := att("2026-01-17", "backfill__c")
	later.Published = time.Now().Add(time.Minute)
	bg = begin(later)
	require.False(t, bg.Cancelled, "published after the range's cancel")
	require.NotZero(t, bg.ID)
	require.EqualValues(t, 2, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"), "nothing written for what the cancels cover")
}

// The statements that begin attempts ask the pauses themselves: while the
// dataset is paused they write nothing, whatever the ledger or the budget
// says, and report Paused; another dataset of the pipeline, a pause of
// another pipeline, a pause past its until or one resumed hold nothing.
func TestBeginWritesNothingWhilePaused(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	att := func(dataset, part string) audit.Attempt {
		return audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: dataset, Partition: part, RunID: "r-" + part}, StreamSeq: 7}
	}
	begin, group := beginners(t, db)
	rows := func() int64 { return db.Int(t, "SELECT count(*) FROM idem.pipeline_audit") }

	_, err := audit.PauseDataset(ctx, db.Pool, "shop", "orders", "alice", "upstream fix", nil, "")
	require.NoError(t, err)
	_, err = audit.PauseDataset(ctx, db.Pool, "other", "customers", "alice", "another pipeline", nil, "")
	require.NoError(t, err)

	bg := begin(att("orders", "2026-11-28"))
	require.True(t, bg.Paused)
	require.False(t, bg.Spent, "a pause is no spent budget")
	require.Zero(t, bg.ID)
	// The re-verification's reload of a load a failover lost goes through.
	restore := att("orders", "2026-11-27")
	restore.ThroughPause = true
	bg = begin(restore)
	require.False(t, bg.Paused)
	require.NotZero(t, bg.ID)
	db.Exec(t, "DELETE FROM idem.pipeline_audit WHERE id = $1", bg.ID)
	gs := group(att("orders", "2026-11-29"), att("orders", "2026-11-30"))
	require.True(t, gs[0].Paused && gs[1].Paused)
	require.Zero(t, gs[0].ID+gs[1].ID)
	require.Zero(t, rows(), "nothing written while paused")

	bg = begin(att("customers", "2026-11-28"))
	require.False(t, bg.Paused, "another dataset, and a pause of another pipeline, hold nothing")
	require.NotZero(t, bg.ID)

	_, err = audit.ResumeDataset(ctx, db.Pool, "shop", "orders", "bob", "fixed", "")
	require.NoError(t, err)
	bg = begin(att("orders", "2026-11-28"))
	require.False(t, bg.Paused)
	require.NotZero(t, bg.ID)
	require.Equal(t, 1, bg.Attempt, "the held begins counted no attempt")

	until := time.Now().Add(300 * time.Millisecond)
	_, err = audit.PauseDataset(ctx, db.Pool, "shop", "orders", "alice", "short", &until, "")
	require.NoError(t, err)
	require.True(t, group(att("orders", "2026-11-29"))[0].Paused)
	time.Sleep(time.Until(until) + 50*time.Millisecond)
	gs = group(att("orders", "2026-11-29"), att("orders", "2026-11-30"))
	require.False(t, gs[0].Paused || gs[1].Paused, "a pause past its until holds nothing")
	require.NotZero(t, gs[0].ID)
	require.NotZero(t, gs[1].ID)
	require.EqualValues(t, 4, rows())

	// A run already loaded, asked about by the statement for messages
	// waiting for a load slot: while paused, not even its skipped row.
	done := att("orders", "2026-12-01")
	id, err := audittest.Start(ctx, db.Pool, done)
	require.NoError(t, err)
	require.NoError(t, audittest.Succeed(ctx, db.Pool, done.RunKey, id, audit.Rows{Inserted: 1}, false))
	skip := func() audit.Begun {
		t.Helper()
		b := &pgx.Batch{}
		var out audit.Begun
		var ran bool
		require.NoError(t, audit.QueueSkipDone(b, []audit.GroupBegin{{Attempt: done, Budget: 5, Into: &out}}, &ran))
		require.NoError(t, db.Pool.SendBatch(ctx, b).Close())
		require.True(t, ran)
		return out
	}
	_, err = audit.PauseDataset(ctx, db.Pool, "shop", "orders", "alice", "again", nil, "")
	require.NoError(t, err)
	require.Zero(t, skip().ID, "no skip while paused")
	require.EqualValues(t, 5, rows())
	_, err = audit.ResumeDataset(ctx, db.Pool, "shop", "orders", "bob", "", "")
	require.NoError(t, err)
	require.True(t, skip().Skipped)
	require.EqualValues(t, 6, rows())
}

// beginners are the begin statement of one attempt and of a group's, each
// with a budget of 5, sent at once on db.
func beginners(t *testing.T, db *pgtest.DB) (begin func(audit.Attempt) audit.Begun, group func(...audit.Attempt) []audit.Begun) {
	ctx := context.Background()
	begin = func(a audit.Attempt) audit.Begun {
		t.Helper()
		b := &pgx.Batch{}
		var bg audit.Begun
		var ran bool
		audit.QueueBegin(b, a, 5, nil, &bg, &ran)
		require.NoError(t, db.Pool.SendBatch(ctx, b).Close())
		require.True(t, ran)
		return bg
	}
	group = func(as ...audit.Attempt) []audit.Begun {
		t.Helper()
		b := &pgx.Batch{}
		gs := make([]audit.GroupBegin, len(as))
		out := make([]audit.Begun, len(as))
		for i, a := range as {
			gs[i] = audit.GroupBegin{Attempt: a, Budget: 5, Into: &out[i]}
		}
		var ran bool
		require.NoError(t, audit.QueueBeginGroup(b, gs, &ran))
		require.NoError(t, db.Pool.SendBatch(ctx, b).Close())
		require.True(t, ran)
		return out
	}
	return begin, group
}
