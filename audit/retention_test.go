package audit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/pgtest"
)

// prune runs one pass.
func prune(t *testing.T, db *pgtest.DB, o audit.PruneOptions) audit.PruneResult {
	t.Helper()
	res, err := audit.Prune(context.Background(), db.Pool, o)
	require.NoError(t, err)
	return res
}

// answers is what the readers of the audit say about the history written
// by TestPruneKeepsWhatReadersNeed.
type answers struct {
	Status, ClicksStatus []audit.PartitionStatus
	Missing              []time.Time
	Latest               []audit.LatestAttempt
	Grid                 []audit.Latest
	Loaded               map[string]bool
	Upstreams            map[string]map[string]string
	Ledger               string
}

func readAnswers(t *testing.T, db *pgtest.DB) answers {
	t.Helper()
	ctx := context.Background()
	var a answers
	var err error
	from, to := *day("2026-01-01"), *day("2026-01-08")
	a.Status, err = audit.StatusRange(ctx, db.Pool, "shop", "orders", from, to)
	require.NoError(t, err)
	a.ClicksStatus, err = audit.StatusRange(ctx, db.Pool, "shop", "clicks", from, to)
	require.NoError(t, err)
	a.Missing, err = audit.Missing(ctx, db.Pool, "shop", "orders", from, to)
	require.NoError(t, err)
	a.Latest, err = audit.LatestAttempts(ctx, db.Pool, "shop", "orders",
		[]string{"2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05", "2026-01-06", "2026-01-07"})
	require.NoError(t, err)
	for i := range a.Latest {
		a.Latest[i].Age = 0 // the clock moves between the two reads
	}
	a.Grid, err = audit.LatestInRange(ctx, db.Pool, "shop", []string{"orders", "clicks"}, "2026-01-01", "2026-01-08")
	require.NoError(t, err)
	a.Loaded, err = audit.LoadedPartitions(ctx, db.Pool, "shop", "orders", "2026-01-01", "2026-01-08")
	require.NoError(t, err)
	a.Upstreams, err = audit.UpstreamStates(ctx, db.Pool, "shop", []string{"orders", "clicks"}, from, to)
	require.NoError(t, err)
	a.Ledger = db.Checksum(t, "idem.run_ledger")
	return a
}

func TestPruneKeepsWhatReadersNeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	at := func(ds, p, run string) audit.Attempt {
		d := day(p[:10])
		return audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: ds, Partition: p, RunID: run}, LogicalDate: d}
	}
	load := func(a audit.Attempt) int64 {
		id, err := audittest.Load(ctx, db.Pool, a, audit.Rows{Inserted: 10})
		require.NoError(t, err)
		return id
	}
	fail := func(a audit.Attempt, kind string) {
		id, err := audittest.Start(ctx, db.Pool, a)
		require.NoError(t, err)
		require.NoError(t, audit.Fail(ctx, db.Pool, id, errors.New("boom"), kind))
	}
	skip := func(a audit.Attempt) {
		b, err := audittest.Begin(ctx, db.Pool, a, 0)
		require.NoError(t, err)
		require.True(t, b.Skipped)
	}
	// 01: r1 loaded, a duplicate skipped, r2 failed, r3 loaded: r3 alone stays.
	load(at("orders", "2026-01-01", "r1"))
	skip(at("orders", "2026-01-01", "r1"))
	fail(at("orders", "2026-01-01", "r2"), "fatal")
	load(at("orders", "2026-01-01", "r3"))
	// 02: r1 loaded, then r2 failed: both stay (latest success, latest attempt).
	load(at("orders", "2026-01-02", "r1"))
	fail(at("orders", "2026-01-02", "r2"), "fatal")
	// 03: two failures, then a start whose process died: the first failure goes.
	fail(at("orders", "2026-01-03", "r1"), "transient")
	fail(at("orders", "2026-01-03", "r1"), "fatal")
	_, err := audittest.Start(ctx, db.Pool, at("orders", "2026-01-03", "r2"))
	require.NoError(t, err)
	// 04: loaded, then a duplicate skipped: the skip goes.
	load(at("orders", "2026-01-04", "r1"))
	skip(at("orders", "2026-01-04", "r1"))
	// 05: never attempted. 06: r1's attempt is named by an outbox row, so it
	// stays although r2 loaded after it.
	r1 := load(at("orders", "2026-01-06", "r1"))
	db.Exec(t, "INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id) VALUES ('web', '2026-01-06', 'r1', $1)", r1)
	load(at("orders", "2026-01-06", "r2"))
	// clicks is hourly: each hour failed, then loaded.
	for _, h := range []string{"2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"} {
		fail(at("clicks", h, "r1"), "fatal")
		load(at("clicks", h, "r2"))
	}
	// All of that is 100 days old; 07 happened now, inside the retention.
	db.Exec(t, `UPDATE idem.pipeline_audit SET started_at = started_at - interval '100 days',
	            finished_at = finished_at - interval '100 days'`)
	fail(at("orders", "2026-01-07", "r1"), "fatal")
	load(at("orders", "2026-01-07", "r2"))

	before := readAnswers(t, db)
	res := prune(t, db, audit.PruneOptions{Retention: 30 * 24 * time.Hour, Batch: 3})
	require.False(t, res.Busy)
	require.EqualValues(t, 7, res.Deleted)
	require.Greater(t, res.Batches, 3, "small batches")

	type row struct{ Dataset, Partition, RunID, Status string }
	rows, err := db.Pool.Query(ctx, "SELECT task_id, partition_key, run_id, status FROM idem.pipeline_audit ORDER BY id")
	require.NoError(t, err)
	var kept []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.Dataset, &r.Partition, &r.RunID, &r.Status))
		kept = append(kept, r)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []row{
		{"orders", "2026-01-01", "r3", "success"},
		{"orders", "2026-01-02", "r1", "success"},
		{"orders", "2026-01-02", "r2", "failed"},
		{"orders", "2026-01-03", "r1", "failed"},
		{"orders", "2026-01-03", "r2", "started"},
		{"orders", "2026-01-04", "r1", "success"},
		{"orders", "2026-01-06", "r1", "success"},
		{"orders", "2026-01-06", "r2", "success"},
		{"clicks", "2026-01-01T00:00:00Z", "r2", "success"},
		{"clicks", "2026-01-01T01:00:00Z", "r2", "success"},
		{"orders", "2026-01-07", "r1", "failed"},
		{"orders", "2026-01-07", "r2", "success"},
	}, kept)
	require.Equal(t, before, readAnswers(t, db), "every reader answers the same after pruning")
	require.EqualValues(t, 3, before.Status[0].Attempts, "01: r1, r2, r3; the skip is not an attempt")
	require.EqualValues(t, 4, before.ClicksStatus[0].Attempts, "four attempts on the hours of 01")

	again := prune(t, db, audit.PruneOptions{Retention: 30 * 24 * time.Hour})
	require.Zero(t, again.Deleted, "a second pass finds nothing")
	require.Equal(t, before, readAnswers(t, db))
	require.EqualValues(t, 3, db.Int(t, "SELECT sum(attempts) FROM idem.pruned_attempts WHERE task_id = 'orders'"))
	require.EqualValues(t, 2, db.Int(t, "SELECT sum(skipped) FROM idem.pruned_attempts"))

	// With everything inside the retention nothing goes.
	n := db.Int(t, "SELECT count(*) FROM idem.pipeline_audit")
	require.Zero(t, prune(t, db, audit.PruneOptions{Retention: 1000 * 24 * time.Hour}).Deleted)
	require.Equal(t, n, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"))

	_, err = audit.Prune(ctx, db.Pool, audit.PruneOptions{})
	require.ErrorContains(t, err, "retention must be positive")
}

func TestConcurrentPrunersDoNotConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	// 300 partitions, each with 4 old failures and a success: 1,200 attempts
	// to prune, 300 to keep.
	oldAttempts(t, db, 300, 5)
	var pruned sync.Map
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				res, err := audit.Prune(ctx, db.Pool, audit.PruneOptions{Retention: 24 * time.Hour, Batch: 50})
				if err != nil {
					errs <- err
					return
				}
				v, _ := pruned.LoadOrStore(i, new(int64))
				*v.(*int64) += res.Deleted
			}
		}()
	}
	// Meanwhile loads fail on the same partitions (a newer success would make
	// the old one prunable, and the count depend on timing).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for p := range 20 {
			key := time.Date(2020, 1, 1+p, 0, 0, 0, 0, time.UTC)
			a := audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: key.Format(time.DateOnly), RunID: "now"}, LogicalDate: &key}
			id, err := audittest.Start(ctx, db.Pool, a)
			if err == nil {
				err = audit.Fail(ctx, db.Pool, id, errors.New("boom"), "fatal")
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	total := int64(0)
	pruned.Range(func(_, v any) bool { total += *v.(*int64); return true })
	require.EqualValues(t, 1200, total, "every old failure pruned once")
	require.EqualValues(t, 320, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"))
	require.EqualValues(t, 1200, db.Int(t, "SELECT sum(attempts) FROM idem.pruned_attempts"))
	require.EqualValues(t, 300, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'r5'"), "each partition's old success stays")
}

// TestPruneHoldsALeaseNotALock: between the batches of a pass no backend
// holds an advisory lock (behind a transaction pooler a session lock would
// stay on a server connection other clients get), another pass is Busy all
// the same, and once the pass is done the next one runs.
func TestPruneHoldsALeaseNotALock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t)
	oldAttempts(t, db, 10, 3)
	var during []audit.PruneResult
	var locks []int64
	res, err := audit.Prune(ctx, db.Pool, audit.PruneOptions{Retention: 24 * time.Hour, Batch: 6, Pruned: func(int64) {
		locks = append(locks, advisoryLocks(t, db))
		other, err := audit.Prune(ctx, db.Pool, audit.PruneOptions{Retention: 24 * time.Hour})
		require.NoError(t, err)
		during = append(during, other)
	}})
	require.NoError(t, err)
	require.False(t, res.Busy)
	require.EqualValues(t, 20, res.Deleted)
	require.Greater(t, len(during), 1, "several batches")
	for i, other := range during {
		require.True(t, other.Busy, "batch %d: another pass is busy", i)
		require.Zero(t, other.Batches)
		require.Zero(t, locks[i], "batch %d: no advisory lock between batches", i)
	}
	require.Zero(t, advisoryLocks(t, db), "none after the pass")

	again, err := audit.Prune(ctx, db.Pool, audit.PruneOptions{Retention: 24 * time.Hour})
	require.NoError(t, err)
	require.False(t, again.Busy, "the lease was given back")
}

// oldAttempts writes 200-day-old attempts of orders for partitions days from
// 2020-01-01: per partition, runs-1 fatal failures and then a success.
func oldAttempts(t *testing.T, db *pgtest.DB, partitions, runs int) {
	t.Helper()
	db.Exec(t, `
		INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt,
		                                 error_kind, started_at, finished_at)
		SELECT 'shop', 'orders', date '2020-01-01' + p, to_char(date '2020-01-01' + p, 'YYYY-MM-DD'), 'r' || k,
		       CASE WHEN k = $2 THEN 'success' ELSE 'failed' END, 1, CASE WHEN k < $2 THEN 'fatal' END,
		       now() - interval '200 days', now() - interval '200 days'
		  FROM generate_series(0, $1 - 1) p, generate_series(1, $2) k
		 ORDER BY p, k`, partitions, runs)
}
