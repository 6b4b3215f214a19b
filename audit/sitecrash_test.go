package audit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
)

// TestAnAttemptTheWarehouseRestartCutShortCostsNoRetry: an attempt left
// `started` before the warehouse last started died with the warehouse (a
// crash of the whole site), not by its message's fault, so it spends no
// retry; one left `started` while the warehouse lived (its process died,
// the warehouse did not) spends one, alone or in a group, and a message
// whose loads keep killing their process still spends its whole budget.
func TestAnAttemptTheWarehouseRestartCutShortCostsNoRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	attempt := func(part string) audit.Attempt {
		return audit.Attempt{RunKey: audit.RunKey{Pipeline: "p", Dataset: "d", Partition: part, RunID: "r"}, StreamSeq: 7}
	}
	begin := func(a audit.Attempt, budget int) audit.Begun {
		t.Helper()
		var into audit.Begun
		var ran bool
		b := &pgx.Batch{}
		audit.QueueBegin(b, a, budget, nil, &into, &ran)
		require.NoError(t, db.Pool.SendBatch(ctx, b).Close())
		require.True(t, ran)
		return into
	}
	beginGroup := func(as []audit.Attempt, budget int) []audit.Begun {
		t.Helper()
		out := make([]audit.Begun, len(as))
		var gs []audit.GroupBegin
		for i, a := range as {
			gs = append(gs, audit.GroupBegin{Attempt: a, Budget: budget, Into: &out[i]})
		}
		var ran bool
		b := &pgx.Batch{}
		require.NoError(t, audit.QueueBeginGroup(b, gs, &ran))
		require.NoError(t, db.Pool.SendBatch(ctx, b).Close())
		return out
	}
	// As if the site had crashed under them: started before the warehouse.
	beforeRestart := func(ids ...int64) {
		for _, id := range ids {
			db.Exec(t, `UPDATE idem.pipeline_audit SET started_at = pg_postmaster_start_time() - interval '1 second' WHERE id = $1`, id)
		}
	}

	// Three attempts died in site crashes: none counts; the fourth is attempt 1.
	for range 3 {
		b := begin(attempt("2026-11-01"), 3)
		require.False(t, b.Spent)
		beforeRestart(b.ID)
	}
	b := begin(attempt("2026-11-01"), 3)
	require.False(t, b.Spent)
	require.Equal(t, 1, b.Attempt)
	require.Zero(t, b.Prior)

	// The same in a group.
	g := beginGroup([]audit.Attempt{attempt("2026-11-02"), attempt("2026-11-03")}, 3)
	beforeRestart(g[0].ID, g[1].ID)
	g = beginGroup([]audit.Attempt{attempt("2026-11-02"), attempt("2026-11-03")}, 3)
	for _, b := range g {
		require.Equal(t, 1, b.Attempt)
		require.False(t, b.LastDied)
	}

	// A poison message: its loads die while the warehouse lives. Each
	// counts, and after its budget nothing more runs, the last one died.
	for want := 1; want <= 3; want++ {
		b := begin(attempt("2026-11-04"), 3)
		require.Equal(t, want, b.Attempt)
	}
	b = begin(attempt("2026-11-04"), 3)
	require.True(t, b.Spent)
	require.True(t, b.LastDied, "dead-lettered as crashed")
	g = beginGroup([]audit.Attempt{attempt("2026-11-04")}, 3)
	require.True(t, g[0].Spent)
}

// TestAFailureRecordedAfterAnOutageSaysWhoseDoingItWas: a failure written
// once the warehouse answers again is `unavailable` when the warehouse
// started after the attempt (it restarted under the load) and spends no
// retry, `transient` when it lived on, and a row already recorded is
// left as it is.
func TestAFailureRecordedAfterAnOutageSaysWhoseDoingItWas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "p", Dataset: "d", Partition: "2026-11-01", RunID: "r"}, StreamSeq: 9}
	begin := func() audit.Begun {
		t.Helper()
		var into audit.Begun
		var ran bool
		b := &pgx.Batch{}
		audit.QueueBegin(b, a, 2, nil, &into, &ran)
		require.NoError(t, db.Pool.SendBatch(ctx, b).Close())
		require.True(t, ran)
		return into
	}

	cut := begin()
	db.Exec(t, `UPDATE idem.pipeline_audit SET started_at = pg_postmaster_start_time() - interval '1 second' WHERE id = $1`, cut.ID)
	kind, err := audit.FailAfterOutage(ctx, db.Pool, cut.ID, errors.New("unexpected EOF"))
	require.NoError(t, err)
	require.Equal(t, audit.KindUnavailable, kind)

	lived := begin()
	require.Equal(t, 1, lived.Attempt, "the restart's attempt spent nothing")
	kind, err = audit.FailAfterOutage(ctx, db.Pool, lived.ID, errors.New("unexpected EOF"))
	require.NoError(t, err)
	require.Equal(t, audit.KindTransient, kind)
	kind, err = audit.FailAfterOutage(ctx, db.Pool, lived.ID, errors.New("again"))
	require.NoError(t, err)
	require.Empty(t, kind, "recorded once")
	require.EqualValues(t, 1, db.Int(t, `SELECT count(*) FROM idem.pipeline_audit WHERE error = 'unexpected EOF' AND error_kind = 'transient'`))

	require.Equal(t, 2, begin().Attempt, "the attempt the warehouse lived through counted")
}
