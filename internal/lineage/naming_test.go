package lineage

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestNewWarehouse(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]Warehouse{
		"postgres://idem@DB.Example.com:6543/warehouse":              {"postgres://db.example.com:6543", "warehouse"},
		"postgres://idem@db/w":                                       {"postgres://db:5432", "w"},
		"postgres://idem@[::1]:5433/w":                               {"postgres://[::1]:5433", "w"},
		"host=/var/run/postgresql user=loader":                       {"postgres://localhost:5432", "loader"},
		"postgres://u@primary:5432,standby:5433/w?sslmode=disable":   {"postgres://primary:5432", "w"},
		"host=10.0.0.7 port=5444 dbname=analytics user=u password=x": {"postgres://10.0.0.7:5444", "analytics"},
	} {
		cfg, err := pgconn.ParseConfig(url)
		require.NoError(t, err, url)
		require.Equal(t, want, NewWarehouse(cfg), url)
	}
}

func TestWarehouseDatasets(t *testing.T) {
	t.Parallel()
	w := Warehouse{"postgres://db:5432", "w"}
	require.Equal(t, Dataset{"postgres://db:5432", "w.analytics.fact_orders"}, w.Dataset("analytics.fact_orders"))
	require.Equal(t, Dataset{"postgres://db:5432", "w.public.orders"}, w.Dataset("orders"))
	require.Equal(t, []InputDataset{
		{Dataset: Dataset{"postgres://db:5432", "w.public.orders"}},
		{Dataset: Dataset{"postgres://db:5432", "w.staging.a"}},
	}, w.Inputs([]string{"staging.a", "orders", "public.orders", "staging.a"}))
	require.Empty(t, w.Inputs(nil))
	require.Equal(t, "shop.orders", JobName("shop", "orders"))
}
