package strategies

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

func TestProbesTarget(t *testing.T) {
	node := func(typ, alias string, kids ...string) string {
		s := `{"Node Type": "` + typ + `", "Alias": "` + alias + `"`
		if len(kids) > 0 {
			s += `, "Plans": [`
			for i, k := range kids {
				if i > 0 {
					s += ","
				}
				s += k
			}
			s += "]"
		}
		return s + "}"
	}
	plan := func(root string) []byte { return []byte(`[{"Plan": ` + root + `}]`) }
	merge := func(join string) []byte { return plan(node("ModifyTable", "idem_t", join)) }

	require.True(t, probesTarget(merge(node("Nested Loop", "", node("Seq Scan", "src"), node("Index Scan", "idem_t")))))
	require.True(t, probesTarget(merge(node("Nested Loop", "", node("Index Scan", "src"),
		node("Append", "", node("Index Only Scan", "idem_t_1"), node("Index Scan", "idem_t_2"))))), "a partitioned target")
	require.False(t, probesTarget(merge(node("Hash Join", "", node("Seq Scan", "idem_t"), node("Hash", "", node("Seq Scan", "src"))))))
	require.False(t, probesTarget(merge(node("Nested Loop", "", node("Seq Scan", "src"), node("Materialize", "", node("Seq Scan", "idem_t"))))),
		"no index to probe")
	require.False(t, probesTarget(merge(node("Nested Loop", "", node("Nested Loop", "", node("Seq Scan", "a"), node("Index Scan", "b")),
		node("Index Scan", "idem_t")))), "the source joins tables of its own")
	require.False(t, probesTarget([]byte("not json")))
}

// The merge route turns join methods and seq scans off for its statement
// and back on for the rest of the transaction only: a session setting it
// changed would outlive the load and, behind a transaction pooler, stay on
// a server connection that other clients get next. Here the session has
// its own value, which the load must leave as it found it.
func TestMergeLeavesTheSessionsSettings(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	db.Exec(t, `
CREATE SCHEMA staging; CREATE SCHEMA analytics;
CREATE TABLE staging.customers (customer_id int, tier text, updated_at timestamptz);
CREATE TABLE analytics.customers (customer_id int PRIMARY KEY, tier text, updated_at timestamptz);
INSERT INTO staging.customers SELECT i, 'gold', '2026-11-28 10:00+00' FROM generate_series(1, 5) AS i;`)
	s, err := New("merge", Spec{
		Target: Table{Schema: "analytics", Name: "customers"}, Key: []string{"customer_id"}, VersionColumn: "updated_at",
		Source: "SELECT customer_id, tier, updated_at FROM staging.customers WHERE updated_at::date = @partition::date",
	})
	require.NoError(t, err)
	c, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	settings := []string{"enable_hashjoin", "enable_mergejoin", "enable_seqscan"}
	show := func() string {
		var v string
		require.NoError(t, c.QueryRow(ctx, "SELECT string_agg(name || '=' || setting, ',' ORDER BY name) FROM pg_settings WHERE name = ANY ($1)", settings).Scan(&v))
		return v
	}
	for _, name := range settings {
		_, err := c.Exec(ctx, "SET "+name+" = off")
		require.NoError(t, err)
	}
	defer func() { _, _ = c.Exec(context.Background(), "RESET ALL") }()

	// The first load checks the route, the second takes it from the cache.
	for _, run := range []string{"r1", "r2"} {
		err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			res, err := Load(ctx, tx, s, Params{Partition: "2026-11-28", RunID: run})
			if err != nil {
				return err
			}
			require.Equal(t, routeMerge, res.Route)
			var joins string
			require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('enable_hashjoin') || current_setting('enable_mergejoin')").Scan(&joins))
			require.Equal(t, "onon", joins, "the rest of the transaction plans joins with the defaults")
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, "enable_hashjoin=off,enable_mergejoin=off,enable_seqscan=off", show(), "the session's own values, as before the load")
	}
}
