package service

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/testkit/audittest"
)

func TestPruneAuditCountsWhatItDeletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := audittest.NewDB(t)
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	// Two partitions, each with two old failures and an old success.
	db.Exec(t, `
		INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt,
		                                 error_kind, started_at, finished_at)
		SELECT 'shop', 'orders', date '2020-01-01' + p, to_char(date '2020-01-01' + p, 'YYYY-MM-DD'), 'r' || k,
		       CASE WHEN k = 3 THEN 'success' ELSE 'failed' END, 1, CASE WHEN k < 3 THEN 'fatal' END,
		       now() - interval '30 days', now() - interval '30 days'
		  FROM generate_series(0, 1) p, generate_series(1, 3) k ORDER BY p, k`)
	m := metrics.New("test")

	pruneAudit(ctx, db.Pool, config.Retention{}, m, zerolog.Nop())
	require.EqualValues(t, 6, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"), "forever keeps everything")
	pruneAudit(ctx, db.Pool, config.Retention{Days: 60}, m, zerolog.Nop())
	require.EqualValues(t, 6, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"), "all inside 60 days")
	pruneAudit(ctx, db.Pool, config.Retention{Days: 7}, m, zerolog.Nop())
	require.EqualValues(t, 2, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"), "the successes stay")
	require.EqualValues(t, 4, testutil.ToFloat64(m.AuditPruned))
}
