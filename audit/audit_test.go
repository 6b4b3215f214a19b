package audit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func migrated(t *testing.T) *pgtest.DB {
	t.Helper()
	db := pgtest.NewDB(t)
	_, err := audit.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	return db
}

func day(s string) *time.Time {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return &d
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	all, err := audit.Migrations()
	require.NoError(t, err)

	errs := make(chan error, 3)
	applied := make(chan int, 3)
	for range 3 {
		go func() {
			ms, err := audit.Migrate(ctx, db.Pool)
			applied <- len(ms)
			errs <- err
		}()
	}
	total := 0
	for range 3 {
		require.NoError(t, <-errs)
		total += <-applied
	}
	require.Equal(t, len(all), total, "each migration applied exactly once across concurrent runs")

	again, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, again)
	v, err := audit.Version(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, len(all), v)
}

func TestLedgerAllowsOneSuccessPerRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-28", RunID: "r1"}, LogicalDate: day("2026-11-28"), Attempt: 1}

	id1, err := audit.Start(ctx, db.Pool, a)
	require.NoError(t, err)
	require.NoError(t, audit.RecordSuccess(ctx, db.Pool, a.RunKey, id1, false))
	ok, err := audit.Succeeded(ctx, db.Pool, a.RunKey)
	require.NoError(t, err)
	require.True(t, ok)

	id2, err := audit.Start(ctx, db.Pool, a)
	require.NoError(t, err)
	require.ErrorIs(t, audit.RecordSuccess(ctx, db.Pool, a.RunKey, id2, false), audit.ErrAlreadySucceeded)

	// The database itself refuses a second ledger row, whatever the code does.
	_, err = db.Pool.Exec(ctx, `INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id)
		VALUES ('shop', 'orders', '2026-11-28', 'r1', $1)`, id2)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "got %v", err)
	require.Equal(t, "23505", pgErr.Code)

	// force replaces the entry and counts the load.
	require.NoError(t, audit.RecordSuccess(ctx, db.Pool, a.RunKey, id2, true))
	require.EqualValues(t, 2, db.Int(t, "SELECT loads FROM idem.run_ledger"))
	require.EqualValues(t, id2, db.Int(t, "SELECT audit_id FROM idem.run_ledger"))
}

func TestAttemptLifecycleAndGuards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-28", RunID: "r1"}, LogicalDate: day("2026-11-28"), Attempt: 2, StreamSeq: 42}

	id, err := audit.Start(ctx, db.Pool, a)
	require.NoError(t, err)
	require.NoError(t, audit.Succeed(ctx, db.Pool, id, audit.Rows{Inserted: 3, Updated: 2, Deleted: -1}))
	// A finished row is never finished again.
	require.ErrorIs(t, audit.Succeed(ctx, db.Pool, id, audit.Rows{}), audit.ErrNotStarted)
	require.NoError(t, audit.Fail(ctx, db.Pool, id, errors.New("late"), "transient"))

	rows, err := audit.Attempts(ctx, db.Pool, a.RunKey)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, audit.StatusSuccess, rows[0].Status)
	require.EqualValues(t, 5, *rows[0].RowCount)
	require.EqualValues(t, 42, *rows[0].StreamSeq)
	require.Equal(t, 2, rows[0].Attempt)
	require.Nil(t, rows[0].Error)
	require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE rows_deleted IS NULL"))

	// Hostile text is stored as data.
	b := a
	b.RunID = `'; DROP TABLE idem.pipeline_audit; --`
	id2, err := audit.Start(ctx, db.Pool, b)
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, id2, errors.New(`boom "quoted" $1`), "fatal"))
	require.EqualValues(t, 2, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"))
}

func TestStatusAndMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	run := func(part, runID, final string) {
		a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: part, RunID: runID}, LogicalDate: day(part), Attempt: 1}
		id, err := audit.Start(ctx, db.Pool, a)
		require.NoError(t, err)
		switch final {
		case audit.StatusSuccess:
			require.NoError(t, audit.Succeed(ctx, db.Pool, id, audit.Rows{Inserted: 10}))
		case audit.StatusFailed:
			require.NoError(t, audit.Fail(ctx, db.Pool, id, errors.New("boom"), "fatal"))
		}
	}
	run("2026-11-01", "r1", audit.StatusSuccess)
	run("2026-11-02", "r1", audit.StatusFailed)
	run("2026-11-03", "r1", audit.StatusFailed)
	run("2026-11-03", "r2", audit.StatusSuccess)
	run("2026-11-04", "r1", audit.StatusStarted) // a process died here
	// Another pipeline's success does not count.
	other := audit.Attempt{RunKey: audit.RunKey{Pipeline: "other", Dataset: "orders", Partition: "2026-11-05", RunID: "r1"}, LogicalDate: day("2026-11-05"), Attempt: 1}
	id, err := audit.Start(ctx, db.Pool, other)
	require.NoError(t, err)
	require.NoError(t, audit.Succeed(ctx, db.Pool, id, audit.Rows{}))

	missing, err := audit.Missing(ctx, db.Pool, "shop", "orders", *day("2026-11-01"), *day("2026-11-05"))
	require.NoError(t, err)
	var got []string
	for _, d := range missing {
		got = append(got, d.Format(time.DateOnly))
	}
	require.Equal(t, []string{"2026-11-02", "2026-11-04", "2026-11-05"}, got)

	st, err := audit.StatusRange(ctx, db.Pool, "shop", "orders", *day("2026-11-01"), *day("2026-11-05"))
	require.NoError(t, err)
	require.Len(t, st, 5)
	var statuses []string
	for _, s := range st {
		statuses = append(statuses, s.Status)
	}
	require.Equal(t, []string{"success", "failed", "success", "started", "missing"}, statuses)
	require.Equal(t, 2, st[2].Attempts)
	require.Equal(t, "r2", st[2].RunID)
	require.Equal(t, "boom", st[1].Error)
}
