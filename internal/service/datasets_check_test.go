package service

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/testkit/pgtest"
)

// TestStartCheckTellsBrokenFromUnreachable: at start, a dataset whose
// source names a missing table is broken (its events will be
// dead-lettered); a warehouse that does not answer breaks nothing, and the
// log says so instead of sending an operator after a healthy dataset.
func TestStartCheckTellsBrokenFromUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := config.Parse([]byte(`pipeline: shop
nats: {url: "nats://127.0.0.1:4222"}
datasets:
  orders:
    strategy: delete_insert
    target: analytics.t
    partition_column: event_date
    source: SELECT * FROM staging.missing WHERE event_date = @partition
`), nil)
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	check := func(pool *pgxpool.Pool) string {
		t.Helper()
		dss, err := Datasets(cfg)
		require.NoError(t, err)
		var out bytes.Buffer
		log := zerolog.New(&out)
		checkDatasets(ctx, pool, &handlers.Handler{DB: pool, Pipeline: cfg.Pipeline, Datasets: dss, Log: log}, log)
		return out.String()
	}

	db := pgtest.NewDB(t)
	_, err = db.Pool.Exec(ctx, `CREATE SCHEMA analytics; CREATE TABLE analytics.t (id int, event_date date)`)
	require.NoError(t, err)
	require.Contains(t, check(db.Pool), "dataset is broken")

	out := check(unreachablePool(t))
	require.NotContains(t, out, "dataset is broken")
	require.Contains(t, out, "dataset not checked: the warehouse did not answer")
}

// unreachablePool is a pool whose every connection is refused at once: a
// warehouse that does not answer.
func unreachablePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://idem@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
