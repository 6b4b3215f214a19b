package service

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/audittest"
)

func TestPlanAgesBeginWhenATableDoubles(t *testing.T) {
	p := &planAges{}
	require.False(t, p.observe([]int64{0, 3, 100}), "the first reading is the baseline")
	require.False(t, p.observe([]int64{0, 3, 127}), "100 and 127 pages are one order")
	require.True(t, p.observe([]int64{0, 3, 128}))
	require.Equal(t, int64(1), p.age.Load())
	require.True(t, p.observe([]int64{1, 3, 128}), "an empty table that gets its first page")
	require.False(t, p.observe([]int64{1, 2, 128}), "2 and 3 pages are one order")
	require.True(t, p.observe([]int64{1, 3, 128, 0}), "a new table")
	require.Equal(t, int64(3), p.age.Load())
}

// TestPlansArePreparedAgainAsTablesGrow: a statement whose plan the
// server kept while the audit was empty reads the whole table; once the
// table has grown a connection forgets it before its next use, and the
// plan made again takes the index.
func TestPlansArePreparedAgainAsTablesGrow(t *testing.T) {
	ctx := context.Background()
	db := audittest.NewDB(t)
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	db.Exec(t, "ALTER TABLE idem.pipeline_audit SET (autovacuum_enabled = false); ANALYZE idem.pipeline_audit")

	plans := &planAges{log: zerolog.Nop()}
	sep := "?"
	if strings.Contains(db.URL, "?") {
		sep = "&"
	}
	pool, _, err := connectSized(ctx, dial{url: db.URL + sep + "pool_max_conns=1", plans: plans})
	require.NoError(t, err)
	defer pool.Close()
	plans.check(ctx, pool)

	const lookup = `SELECT count(*) FROM idem.pipeline_audit WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3`
	kept := func() string {
		t.Helper()
		for range 6 { // the server keeps a generic plan from the sixth execution
			var n int
			require.NoError(t, pool.QueryRow(ctx, lookup, "d", "t", "p-1").Scan(&n))
		}
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		var name string
		require.NoError(t, c.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement = $1`, lookup).Scan(&name))
		rows, err := c.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE "+name+"('d', 't', 'p-1')")
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var l string
			require.NoError(t, rows.Scan(&l))
			plan = append(plan, l)
		}
		require.NoError(t, rows.Err())
		return strings.Join(plan, "\n")
	}
	require.Contains(t, kept(), "Seq Scan on pipeline_audit", "planned on an empty, analyzed table")

	db.Exec(t, `INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, finished_at)
		SELECT 'd', 't', 'p-' || g, 'r', 'success', 1, now() FROM generate_series(1, 20000) g`)
	require.Contains(t, kept(), "Seq Scan on pipeline_audit", "the kept plan outlives the table's growth")

	before := plans.age.Load()
	plans.check(ctx, pool)
	require.Greater(t, plans.age.Load(), before, "20,000 rows is more pages than an empty table")
	plan := kept()
	require.NotContains(t, plan, "Seq Scan")
	require.Contains(t, plan, "Index Scan")
}
