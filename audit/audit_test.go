package audit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }

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
	a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-28", RunID: "r1"}, LogicalDate: day("2026-11-28")}

	id1, err := audittest.Start(ctx, db.Pool, a)
	require.NoError(t, err)
	require.NoError(t, audittest.Succeed(ctx, db.Pool, a.RunKey, id1, audit.Rows{}, false))
	ok, err := audittest.Succeeded(ctx, db.Pool, a.RunKey)
	require.NoError(t, err)
	require.True(t, ok)

	// A forced rerun gets a started row; without force the ledger refuses it.
	rerun := a
	rerun.Force = true
	id2, err := audittest.Start(ctx, db.Pool, rerun)
	require.NoError(t, err)
	require.ErrorIs(t, audittest.Succeed(ctx, db.Pool, a.RunKey, id2, audit.Rows{}, false), audit.ErrAlreadySucceeded)

	// The database itself refuses a second ledger row, whatever the code does.
	_, err = db.Pool.Exec(ctx, `INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id)
		VALUES ('shop', 'orders', '2026-11-28', 'r1', $1)`, id2)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "got %v", err)
	require.Equal(t, "23505", pgErr.Code)

	// force replaces the entry and counts the load.
	require.NoError(t, audittest.Succeed(ctx, db.Pool, a.RunKey, id2, audit.Rows{}, true))
	require.EqualValues(t, 2, db.Int(t, "SELECT loads FROM idem.run_ledger"))
	require.EqualValues(t, id2, db.Int(t, "SELECT audit_id FROM idem.run_ledger"))
}

func TestAttemptLifecycleAndGuards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-28", RunID: "r1"}, LogicalDate: day("2026-11-28"), StreamSeq: 42}

	// A transient failure, then a second attempt of the same message.
	id1, err := audittest.Start(ctx, db.Pool, a)
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, id1, errors.New("reset"), audit.KindTransient))
	id, err := audittest.Start(ctx, db.Pool, a)
	require.NoError(t, err)
	require.NoError(t, audittest.Succeed(ctx, db.Pool, a.RunKey, id, audit.Rows{Inserted: 3, Updated: 2, Deleted: -1}, false))
	// A finished row is never finished again.
	require.ErrorIs(t, audittest.Succeed(ctx, db.Pool, a.RunKey, id, audit.Rows{}, false), audit.ErrNotStarted)
	require.NoError(t, audit.Fail(ctx, db.Pool, id, errors.New("late"), audit.KindTransient))

	rows := attempts(t, db, a.RunKey)
	require.Len(t, rows, 2)
	require.Equal(t, audit.StatusFailed, rows[0].Status)
	require.Equal(t, audit.StatusSuccess, rows[1].Status)
	require.EqualValues(t, 5, *rows[1].RowCount)
	require.EqualValues(t, 42, *rows[1].StreamSeq)
	require.Equal(t, 2, rows[1].Attempt)
	require.Nil(t, rows[1].Error)
	require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success' AND rows_deleted IS NULL"))

	// Hostile text is stored as data.
	b := a
	b.RunID = `'; DROP TABLE idem.pipeline_audit; --`
	id2, err := audittest.Start(ctx, db.Pool, b)
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, id2, errors.New(`boom "quoted" $1`), "fatal"))
	require.EqualValues(t, 3, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"))
}

// A day counts as loaded when a success of that day's date partition or of
// one of its hours is in the ledger; a text partition that looks like a
// date, another dataset's success, a failed attempt and a neighbouring
// day's hour do not.
func TestMissingReadsTheDaysPartitionsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	load := func(dataset, part string, logical *time.Time) {
		a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: dataset, Partition: part, RunID: "r1"}, LogicalDate: logical}
		_, err := audittest.Load(ctx, db.Pool, a, audit.Rows{Inserted: 1})
		require.NoError(t, err)
	}
	load("orders", "2026-11-01", day("2026-11-01"))
	load("orders", "2026-11-02T23:00:00Z", day("2026-11-02"))
	load("orders", "2026-11-03-backfill", nil) // a text key, no day
	load("orders", "2026-11-030", nil)
	load("refunds", "2026-11-04", day("2026-11-04"))
	a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-05", RunID: "r1"}, LogicalDate: day("2026-11-05")}
	id, err := audittest.Start(ctx, db.Pool, a)
	require.NoError(t, err)
	require.NoError(t, audit.Fail(ctx, db.Pool, id, errors.New("boom"), "fatal"))

	missing, err := audit.Missing(ctx, db.Pool, "shop", "orders", *day("2026-10-31"), *day("2026-11-05"))
	require.NoError(t, err)
	var got []string
	for _, d := range missing {
		got = append(got, d.Format(time.DateOnly))
	}
	require.Equal(t, []string{"2026-10-31", "2026-11-03", "2026-11-04", "2026-11-05"}, got)
}

func TestStatusAndMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	run := func(part, runID, final string) {
		a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: part, RunID: runID}, LogicalDate: day(part)}
		id, err := audittest.Start(ctx, db.Pool, a)
		require.NoError(t, err)
		switch final {
		case audit.StatusSuccess:
			require.NoError(t, audittest.Succeed(ctx, db.Pool, a.RunKey, id, audit.Rows{Inserted: 10}, false))
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
	other := audit.Attempt{RunKey: audit.RunKey{Pipeline: "other", Dataset: "orders", Partition: "2026-11-05", RunID: "r1"}, LogicalDate: day("2026-11-05")}
	_, err := audittest.Load(ctx, db.Pool, other, audit.Rows{})
	require.NoError(t, err)

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

// attemptRow is one row of idem.pipeline_audit, as these tests read it.
type attemptRow struct {
	Status    string
	Attempt   int
	RowCount  *int64
	Error     *string
	StreamSeq *int64
}

// attempts lists the audit rows of run key k, oldest first.
func attempts(t *testing.T, db *pgtest.DB, k audit.RunKey) []attemptRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT status, attempt, row_count, error, stream_seq
		  FROM idem.pipeline_audit
		 WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3 AND run_id = $4
		 ORDER BY id`, k.Pipeline, k.Dataset, k.Partition, k.RunID)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[attemptRow])
	require.NoError(t, err)
	return out
}
