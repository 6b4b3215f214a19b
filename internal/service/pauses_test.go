package service

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/pgtest"
)

// TestPausesKeepTheDatabasesClock: a replica whose wall clock is an hour
// ahead of the database, or an hour behind, holds a pause for as long as
// the database says: in force at once, ending when its until passes on
// the database's clock, not an hour early or late.
func TestPausesKeepTheDatabasesClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	dbNow, err := audit.DatabaseNow(ctx, db.Pool)
	require.NoError(t, err)
	until := dbNow.Add(30 * time.Minute)
	_, err = audit.PauseDataset(ctx, db.Pool, "shop", "orders", "alice", "late files", &until, "")
	require.NoError(t, err)
	soon := dbNow.Add(3 * time.Second)
	_, err = audit.PauseDataset(ctx, db.Pool, "shop", "events", "alice", "a short one", &soon, "")
	require.NoError(t, err)
	_, err = audit.PauseDataset(ctx, db.Pool, "shop", "customers", "bob", "until resumed", nil, "")
	require.NoError(t, err)

	for _, step := range []time.Duration{time.Hour, -time.Hour, 0} {
		// The replica's wall clock, off by step (no monotonic reading, as
		// after a step of the system clock).
		clock := func() time.Time { return time.Now().Round(0).Add(step) }
		p := &pauses{db: db.Pool, pipeline: "shop", now: clock}
		p.refresh(ctx)

		deadline, ok := p.Paused("orders")
		require.True(t, ok, "step %s: paused at once", step)
		left := deadline.Sub(clock())
		require.InDelta(t, (30 * time.Minute).Seconds(), left.Seconds(), 5, "step %s: %s left", step, left)

		deadline, ok = p.Paused("customers")
		require.True(t, ok)
		require.True(t, deadline.IsZero(), "until resumed")

		_, ok = p.Paused("shipments")
		require.False(t, ok, "not paused")
	}

	// The short pause ends when the database's clock passes it, on a
	// replica an hour behind too (without another read).
	behind := func() time.Time { return time.Now().Round(0).Add(-time.Hour) }
	p := &pauses{db: db.Pool, pipeline: "shop", now: behind}
	p.refresh(ctx)
	_, ok := p.Paused("events")
	require.True(t, ok)
	require.Eventually(t, func() bool { _, ok := p.Paused("events"); return !ok }, 10*time.Second, 50*time.Millisecond)
}

// TestPausesUnreadHoldEveryDataset: a replica that could not read the
// pauses yet (the warehouse down when it started) holds every dataset
// until a read succeeds, instead of loading through a pause it does not
// know of.
func TestPausesUnreadHoldEveryDataset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := &pauses{db: unreachablePool(t), pipeline: "shop", log: zerolog.Nop()}
	p.refresh(ctx)
	deadline, ok := p.Paused("orders")
	require.True(t, ok, "pauses never read: the dataset loads through whatever pause there is")
	require.WithinDuration(t, time.Now().Add(pausePoll), deadline, pausePoll)

	db := pgtest.NewDB(t)
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	p.db = db.Pool
	p.refresh(ctx)
	_, ok = p.Paused("orders")
	require.False(t, ok, "read once: not paused")
}
