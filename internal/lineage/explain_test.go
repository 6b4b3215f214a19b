package lineage

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

const explainSchema = `
CREATE SCHEMA staging;
CREATE SCHEMA "Odd ""Schema""";
CREATE TABLE staging.orders (id int PRIMARY KEY, customer_id int, event_date date, amount numeric);
CREATE TABLE staging.customers (id int PRIMARY KEY, region text);
CREATE TABLE staging.regions (name text PRIMARY KEY, active boolean);
CREATE TABLE staging.fx (day date, rate numeric);
CREATE TABLE "Odd ""Schema"""."My.Table" (x int);
CREATE VIEW staging.big_orders AS SELECT o.*, c.region FROM staging.orders o JOIN staging.customers c ON c.id = o.customer_id WHERE amount > 100;
CREATE TABLE staging.events (id int, event_date date) PARTITION BY RANGE (event_date);
CREATE TABLE staging.events_2026_11 PARTITION OF staging.events FOR VALUES FROM ('2026-11-01') TO ('2026-12-01') PARTITION BY RANGE (event_date);
CREATE TABLE staging.events_2026_11_a PARTITION OF staging.events_2026_11 FOR VALUES FROM ('2026-11-01') TO ('2026-11-16');
CREATE TABLE staging.events_2026_11_b PARTITION OF staging.events_2026_11 FOR VALUES FROM ('2026-11-16') TO ('2026-12-01');
CREATE TABLE staging.events_2026_12 PARTITION OF staging.events FOR VALUES FROM ('2026-12-01') TO ('2027-01-01');
`

func TestSourceTables(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, explainSchema)
	require.NoError(t, err)
	args := pgx.NamedArgs{"partition": "2026-11-28", "run_id": "r1"}

	tests := []struct {
		name, source string
		want         []string
	}{
		{"one table", `SELECT * FROM staging.orders WHERE event_date = @partition`, []string{"staging.orders"}},
		{"join and run_id", `SELECT o.id, c.region, @run_id AS run FROM staging.orders o JOIN staging.customers c ON c.id = o.customer_id WHERE o.event_date = @partition::date`,
			[]string{"staging.customers", "staging.orders"}},
		{"a view is the tables behind it", `SELECT * FROM staging.big_orders WHERE event_date = @partition`, []string{"staging.customers", "staging.orders"}},
		{"subquery and init plan", `SELECT * FROM staging.orders o
			WHERE o.customer_id IN (SELECT id FROM staging.customers WHERE region IN (SELECT name FROM staging.regions WHERE active))
			  AND amount > (SELECT max(rate) FROM staging.fx WHERE day = @partition)`,
			[]string{"staging.customers", "staging.fx", "staging.orders", "staging.regions"}},
		{"cte and union", `WITH c AS MATERIALIZED (SELECT id FROM staging.customers) SELECT id FROM c UNION ALL SELECT id FROM staging.orders WHERE event_date = @partition`,
			[]string{"staging.customers", "staging.orders"}},
		{"partitions are their partitioned table", `SELECT * FROM staging.events WHERE event_date = @partition`, []string{"staging.events"}},
		{"all partitions", `SELECT count(*) FROM staging.events`, []string{"staging.events"}},
		{"a partition named directly", `SELECT * FROM staging.events_2026_11_b`, []string{"staging.events"}},
		{"quoted names come back raw", `SELECT * FROM "Odd ""Schema"""."My.Table"`, []string{`Odd "Schema".My.Table`}},
		{"no table", `SELECT @partition::date AS day, generate_series(1, 3) AS n`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := SourceTables(ctx, db.Pool, tt.source, args)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}

	t.Run("in a transaction, without running the source", func(t *testing.T) {
		t.Parallel()
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		// EXPLAIN plans; a division by zero would fail only if the source ran.
		got, err := SourceTables(ctx, tx, `SELECT id / 0 FROM staging.orders WHERE event_date = @partition`, args)
		require.NoError(t, err)
		require.Equal(t, []string{"staging.orders"}, got)
	})

	t.Run("a source that does not plan", func(t *testing.T) {
		t.Parallel()
		_, err := SourceTables(ctx, db.Pool, `SELECT * FROM staging.nope`, args)
		require.ErrorContains(t, err, "explaining the source")
	})
}

func TestTablesFromExplain(t *testing.T) {
	t.Parallel()
	plan := []byte(`[{"Plan": {"Node Type": "Hash Join", "Plans": [
		{"Node Type": "Seq Scan", "Relation Name": "orders", "Schema": "staging", "Alias": "o"},
		{"Node Type": "Hash", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "customers", "Schema": "staging", "Alias": "c"}]},
		{"Node Type": "Seq Scan", "Relation Name": "orders", "Schema": "staging", "Alias": "o2"},
		{"Node Type": "CTE Scan", "CTE Name": "x"},
		{"Node Type": "Function Scan", "Function Name": "generate_series"}
	]}}]`)
	got, err := TablesFromExplain(plan)
	require.NoError(t, err)
	require.Equal(t, []Table{{"staging", "customers"}, {"staging", "orders"}}, got)
	require.Equal(t, "staging.orders", got[1].String())

	_, err = TablesFromExplain([]byte(`[{"Plan": {"Node Type": "Seq Scan", "Relation Name": "orders"}}]`))
	require.ErrorContains(t, err, "run EXPLAIN with VERBOSE")
	_, err = TablesFromExplain([]byte(`[]`))
	require.ErrorContains(t, err, "no plan")
	_, err = TablesFromExplain([]byte(`{"Plan": 1}`))
	require.Error(t, err)
}
