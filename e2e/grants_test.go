package e2e

// idem under the least-privilege Postgres role of deploy/postgres/grants.sql,
// with the config deploy/idem.yaml on the tables of
// deploy/postgres/example-schema.sql: the deploy files are what is tested.

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/embeddednats"
	"github.com/idem-data/idem/testkit/pgtest"
)

// leastPrivilege is a database laid out by deploy/postgres/example-schema.sql,
// migrated by its administrator, with a login role set up by
// deploy/postgres/grants.sql (edited by editGrants), and a world whose idem
// runs as that role with deploy/idem.yaml. env is what `idem` needs to run so.
type leastPrivilege struct {
	*world
	role, roleURL string
	env           []string
}

func newLeastPrivilege(t *testing.T, editGrants func(string) string, adminSQL string) *leastPrivilege {
	t.Helper()
	db := pgtest.NewDB(t)
	schema, err := os.ReadFile(repoPath(t, "deploy/postgres/example-schema.sql"))
	require.NoError(t, err)
	db.Exec(t, string(schema))
	db.Exec(t, adminSQL)
	code, out := runIdem(t, nil, "migrate", "--database-url", db.URL)
	require.Equal(t, 0, code, out)

	role, roleURL := db.LoaderRole(t, repoPath(t, "deploy/postgres/grants.sql"), editGrants)
	u, err := url.Parse(roleURL)
	require.NoError(t, err)

	dir := t.TempDir()
	ns, err := embeddednats.Start(embeddednats.Options{StoreDir: filepath.Join(dir, "js")})
	require.NoError(t, err)
	t.Cleanup(ns.Stop)
	nc, err := nats.Connect(ns.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	w := &world{t: t, ns: ns, nc: nc, js: js, db: db, cfg: repoPath(t, "deploy/idem.yaml"), dir: dir}
	env := []string{"IDEM_DATABASE_URL=" + u.String(), "IDEM_NATS_URL=" + ns.URL(), "IDEM_HTTP_ADDR=127.0.0.1:0"}
	return &leastPrivilege{world: w, role: role, roleURL: u.String(), env: env}
}

func (lp *leastPrivilege) publishEvent(dataset, partition, runID string) {
	lp.t.Helper()
	body := fmt.Sprintf(`{"dataset":%q,"partition":%q,"run_id":%q}`, dataset, partition, runID)
	_, err := lp.js.Publish(context.Background(), "idem.ready."+dataset, []byte(body))
	require.NoError(lp.t, err)
}

func TestLeastPrivilegeRoleLoadsEveryStrategy(t *testing.T) {
	t.Parallel()
	lp := newLeastPrivilege(t, nil, "")
	code, out := runIdem(t, lp.env, "validate", "--config", lp.cfg)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "config and database")

	p := lp.serve(lp.env...)
	lp.publishEvent("orders", "2026-11-25", "r1")    // a child of its own: route delete_child
	lp.publishEvent("orders", "2026-11-27", "r1")    // the default child: DELETE route
	lp.publishEvent("customers", "2026-11-28", "r1") // merge
	lp.publishEvent("events", "2026-11-26", "r1")    // append_dedupe
	lp.publishEvent("orders", "2026-11-25", "r2")    // a rerun, replacing the day
	lp.publishEvent("orders", "2030-01-01", "r1")    // empty: dead-lettered
	lp.waitCount(5, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	// The role records each dataset's definition (INSERT, never UPDATE).
	lp.waitCount(3, "SELECT count(DISTINCT task_id) FROM idem.definitions WHERE task_id IN ('orders', 'customers', 'events')")
	dl := lp.waitDeadLetters(1)
	lp.waitSettled()

	require.Contains(t, dl[0].Header.Get(deadletter.HeaderError), "empty_source")
	require.Contains(t, p.output(), `"route":"delete_child"`) // the default: MVCC-safe, no TRUNCATE privilege needed
	require.Contains(t, p.output(), `"route":"delete"`)
	require.NotContains(t, p.output(), "permission denied")
	sum := func(q string) string { return lp.db.Checksum(t, q) }
	require.Equal(t, sum("SELECT order_id, customer_id, total, status, event_date FROM staging.orders WHERE event_date IN ('2026-11-25', '2026-11-27')"),
		sum("SELECT order_id, customer_id, total, status, event_date FROM analytics.fact_orders"))
	require.Equal(t, sum("SELECT customer_id, name, tier, updated_at FROM staging.customers"), sum("analytics.dim_customers"))
	require.Equal(t, sum("SELECT event_id, event_date, kind, amount FROM staging.events WHERE event_date = '2026-11-26'"), sum("raw.latest_events"))

	// And no more than that: the role cannot change schema idem, erase the
	// audit, fake a migration, write a source or read outside its grants.
	ctx := context.Background()
	c, err := pgx.Connect(ctx, lp.roleURL)
	require.NoError(t, err)
	defer c.Close(ctx)
	for _, stmt := range []string{
		"CREATE TABLE idem.x (id int)",
		"DELETE FROM idem.pipeline_audit",
		"TRUNCATE idem.run_ledger",
		"INSERT INTO idem.schema_migrations (version, name) VALUES (999, 'x')",
		"UPDATE idem.definitions SET definition = '{}'",
		"INSERT INTO staging.orders (order_id) VALUES (1)",
		"TRUNCATE analytics.fact_orders",
		"DELETE FROM analytics.dim_customers",
		"CREATE TABLE analytics.x (id int)",
		"CREATE TABLE public.x (id int)",
	} {
		_, err := c.Exec(ctx, stmt)
		require.ErrorContains(t, err, "SQLSTATE 42501", stmt)
	}
	var super bool
	require.NoError(t, c.QueryRow(ctx, "SELECT rolsuper OR rolcreaterole OR rolcreatedb FROM pg_roles WHERE rolname = current_user").Scan(&super))
	require.False(t, super)
}

// TestAppendDedupeWithoutOwningTheTarget is the grant set docs/SECURITY.md
// would like for append_dedupe: SELECT and INSERT on the target, CREATE on
// the view's schema, the index made beforehand by the administrator.
func TestAppendDedupeWithoutOwningTheTarget(t *testing.T) {
	t.Parallel()
	lp := newLeastPrivilege(t, func(sql string) string {
		return strings.Replace(sql, "ALTER TABLE raw.events OWNER TO", "GRANT SELECT, INSERT ON raw.events TO", 1)
	}, "CREATE INDEX events_idem_dedupe ON raw.events (event_date, event_id, load_seq DESC)")
	p := lp.serve(lp.env...)
	lp.publishEvent("events", "2026-11-26", "r1")
	lp.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	lp.waitSettled()
	require.NotContains(t, p.output(), "dataset is broken")
}
