package cli

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

// schemaDriftSQL: staging.orders has a column note that analytics.orders
// lacks; staging.items has qty bigint where analytics.items has integer.
const schemaDriftSQL = `
CREATE SCHEMA staging; CREATE SCHEMA analytics;
CREATE TABLE staging.orders (order_id bigint, event_date date, note text);
CREATE TABLE analytics.orders (order_id bigint, event_date date);
CREATE TABLE staging.items (item_id bigint, event_date date, qty bigint);
CREATE TABLE analytics.items (item_id bigint, event_date date, qty integer);
`

func schemaDriftConfig(dataset, policy string) string {
	return fmt.Sprintf(`pipeline: shop
datasets:
  %[1]s:
    strategy: delete_insert
    target: analytics.%[1]s
    partition_column: event_date
    on_schema_change: %[2]s
    source: SELECT * FROM staging.%[1]s WHERE event_date = @partition
`, dataset, policy)
}

// TestValidatePredictsSchemaChanges: validate says, per dataset, which
// differences between the source's columns and the target's a load would
// meet and what its on_schema_change would do, and alters nothing. What the
// policy takes is information (exit 0); what it refuses is a problem naming
// the ALTER TABLE that fixes it.
func TestValidatePredictsSchemaChanges(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, schemaDriftSQL)
	env := map[string]string{"IDEM_DATABASE_URL": db.URL}
	require.NoError(t, runCLI(t, env, "migrate", "--config", writeConfig(t, schemaDriftConfig("orders", "fail"))).e)
	columns := func(table string) []string {
		t.Helper()
		var out []string
		rows, err := db.Pool.Query(t.Context(), `SELECT attname || ' ' || format_type(atttypid, atttypmod) FROM pg_attribute
			WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, table)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var c string
			require.NoError(t, rows.Scan(&c))
			out = append(out, c)
		}
		require.NoError(t, rows.Err())
		return out
	}
	orders, items := columns("analytics.orders"), columns("analytics.items")

	for _, tc := range []struct {
		dataset, policy, want string
		refused               bool
	}{
		{"orders", "append_new_columns", `dataset "orders": source column note text is not in analytics.orders: on_schema_change append_new_columns would add it (ALTER TABLE "analytics"."orders" ADD COLUMN "note" text)`, false},
		{"orders", "ignore", `dataset "orders": source column note text is not in analytics.orders: on_schema_change ignore would ignore it (the load leaves it out)`, false},
		{"orders", "fail", `dataset "orders": source column note text is not in analytics.orders: on_schema_change fail would refuse it and fail the load (schema_mismatch); fix it with ALTER TABLE "analytics"."orders" ADD COLUMN "note" text, or set on_schema_change: append_new_columns on the dataset`, true},
		{"items", "sync_all_columns", `dataset "items": column qty is bigint in the source, integer in analytics.items: on_schema_change sync_all_columns would widen it (ALTER TABLE "analytics"."items" ALTER COLUMN "qty" TYPE bigint)`, false},
	} {
		r := runCLI(t, env, "validate", "--config", writeConfig(t, schemaDriftConfig(tc.dataset, tc.policy)))
		if tc.refused {
			require.ErrorIs(t, r.e, ErrReported, tc.policy)
			require.Contains(t, r.err, "1 problem(s)", tc.policy)
			require.Contains(t, r.err, tc.want, tc.policy)
			require.NotContains(t, r.out, tc.dataset, tc.policy)
		} else {
			require.NoError(t, r.e, "%s: %s", tc.policy, r.err)
			require.Contains(t, r.out, tc.want+"\n", tc.policy)
			require.Contains(t, r.out, "ok, 1 dataset(s) (config and database)", tc.policy)
		}
		require.Equal(t, orders, columns("analytics.orders"), "%s altered the target", tc.policy)
		require.Equal(t, items, columns("analytics.items"), "%s altered the target", tc.policy)
	}

	// The prediction takes no lock a load's ALTER would wait for: under a
	// writer of the target it answers at once, as before.
	writer, err := db.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = writer.Rollback(t.Context()) }()
	_, err = writer.Exec(t.Context(), `LOCK TABLE analytics.orders IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)
	r := runCLI(t, env, "validate", "--config", writeConfig(t, schemaDriftConfig("orders", "append_new_columns")))
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "would add it")
	require.NoError(t, writer.Rollback(t.Context()))

	// A narrowing is refused by sync_all_columns, with the reason.
	db.Exec(t, `ALTER TABLE staging.items ALTER COLUMN qty TYPE smallint`)
	r = runCLI(t, env, "validate", "--config", writeConfig(t, schemaDriftConfig("items", "sync_all_columns")))
	require.ErrorIs(t, r.e, ErrReported)
	require.Contains(t, r.err, `dataset "items": column qty is smallint in the source, integer in analytics.items: on_schema_change sync_all_columns would refuse it`)
	require.Contains(t, r.err, "never narrows a column")

	// No difference, no line.
	db.Exec(t, `ALTER TABLE staging.items ALTER COLUMN qty TYPE integer`)
	r = runCLI(t, env, "validate", "--config", writeConfig(t, schemaDriftConfig("items", "sync_all_columns")))
	require.NoError(t, r.e, r.err)
	require.NotContains(t, r.out, `dataset "items"`)
}

// TestLoadDryRunShowsSchemaChanges: idem load --dry-run runs the load as it
// would run, its schema changes made in the rolled-back transaction, and
// says which it met and what on_schema_change did; the target is left as
// it was.
func TestLoadDryRunShowsSchemaChanges(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, schemaDriftSQL)
	db.Exec(t, `INSERT INTO staging.orders VALUES (1, '2026-11-05', 'gift'), (2, '2026-11-05', NULL)`)
	env := map[string]string{"IDEM_DATABASE_URL": db.URL}
	require.NoError(t, runCLI(t, env, "migrate", "--config", writeConfig(t, schemaDriftConfig("orders", "fail"))).e)

	r := runCLI(t, env, "load", "orders", "2026-11-05", "--dry-run", "--config", writeConfig(t, schemaDriftConfig("orders", "append_new_columns")))
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, `source column note text is not in analytics.orders: on_schema_change append_new_columns would add it (ALTER TABLE "analytics"."orders" ADD COLUMN "note" text)`)
	require.Contains(t, r.out, "2 inserted")
	require.Contains(t, r.out, `"note":"gift"`, "the rows that would appear carry the new column")
	require.Zero(t, db.Int(t, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'analytics.orders'::regclass AND attname = 'note'`), "rolled back")

	r = runCLI(t, env, "load", "orders", "2026-11-05", "--dry-run", "--config", writeConfig(t, schemaDriftConfig("orders", "fail")))
	require.Error(t, r.e)
	require.Contains(t, r.out, "on_schema_change fail would refuse it")
	require.Contains(t, r.err, "schema_mismatch")
}
