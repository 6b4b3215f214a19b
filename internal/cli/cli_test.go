package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type result struct {
	out, err string
	e        error
}

func runCLI(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut, func(k string) string { return env[k] })
	return result{out.String(), errOut.String(), err}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idem.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

const goodConfig = `
pipeline: shop
datasets:
  orders:
    strategy: delete_insert
    target: analytics.fact_orders
    partition_column: event_date
    source: SELECT * FROM staging.orders WHERE event_date = @partition
  customers:
    strategy: merge
    target: analytics.dim_customers
    key: [customer_id]
    version_column: updated_at
    source: SELECT * FROM staging.customers WHERE updated_at::date = @partition
  events:
    strategy: append_dedupe
    target: raw.events
    key: [event_id]
    view: raw.latest_events
    source: SELECT * FROM staging.events WHERE event_date = @partition
`

const tablesSQL = `
CREATE SCHEMA staging; CREATE SCHEMA analytics; CREATE SCHEMA raw;
CREATE TABLE staging.orders (order_id bigint, event_date date, total numeric);
CREATE TABLE analytics.fact_orders (order_id bigint, event_date date, total numeric);
CREATE TABLE staging.customers (customer_id bigint, name text, updated_at timestamptz);
CREATE TABLE analytics.dim_customers (customer_id bigint PRIMARY KEY, name text, updated_at timestamptz);
CREATE TABLE staging.events (event_id text, event_date date, payload jsonb);
CREATE TABLE raw.events (event_id text, event_date date, payload jsonb, run_id text, load_seq bigint);
`

func TestVersionAndUsage(t *testing.T) {
	r := runCLI(t, nil, "version")
	require.NoError(t, r.e)
	require.Contains(t, r.out, "idem ")

	var usage *UsageError
	for _, args := range [][]string{{"bogus"}, {"validate", "--nope"}, {"version", "extra"}} {
		r := runCLI(t, nil, args...)
		require.True(t, errors.As(r.e, &usage), "%v: %v", args, r.e)
		require.Contains(t, r.err, "idem --help")
	}
}

func TestMigrateTwice(t *testing.T) {
	db := pgtest.NewDB(t)
	env := map[string]string{"IDEM_DATABASE_URL": db.URL}
	r := runCLI(t, env, "migrate", "--config", filepath.Join(t.TempDir(), "none.yaml"))
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "applied 001_audit")
	r = runCLI(t, env, "migrate", "--config", filepath.Join(t.TempDir(), "none.yaml"))
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "up to date")
	all, err := audit.Migrations()
	require.NoError(t, err)
	require.EqualValues(t, len(all), db.Int(t, "SELECT count(*) FROM idem.schema_migrations"))

	r = runCLI(t, nil, "migrate", "--config", filepath.Join(t.TempDir(), "none.yaml"))
	require.Error(t, r.e)
	require.Contains(t, r.err, "IDEM_DATABASE_URL")
}

func TestValidateConfigOnly(t *testing.T) {
	r := runCLI(t, nil, "validate", "--config", writeConfig(t, goodConfig))
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "ok, 3 dataset(s)")
	require.Contains(t, r.out, "no database configured")

	bad := strings.NewReplacer(
		"strategy: merge", "strategy: upsert",
		"staging.events WHERE event_date = @partition", "staging.events WHERE event_date = CURRENT_DATE",
		"target: raw.events", "target: raw.Events",
	).Replace(goodConfig)
	r = runCLI(t, nil, "validate", "--config", writeConfig(t, bad))
	require.ErrorIs(t, r.e, ErrReported)
	for _, want := range []string{`"customers"`, "upsert", "CURRENT_DATE", "@partition", "lower case", "3 problem(s)"} {
		require.Contains(t, r.err, want)
	}

	r = runCLI(t, nil, "validate", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, r.e)
	require.Contains(t, r.err, "not found")
}

func TestValidateAgainstDatabase(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, tablesSQL)
	env := map[string]string{"IDEM_DATABASE_URL": db.URL}
	path := writeConfig(t, goodConfig)

	r := runCLI(t, env, "validate", "--config", path)
	require.ErrorIs(t, r.e, ErrReported)
	require.Contains(t, r.err, "idem migrate")

	require.NoError(t, runCLI(t, env, "migrate", "--config", path).e)
	r = runCLI(t, env, "validate", "--config", path)
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "config and database")

	// Drift: a source column the target lacks, a missing table, a merge key without a unique index.
	db.Exec(t, `ALTER TABLE staging.orders ADD COLUMN coupon text;
	            DROP TABLE raw.events;
	            ALTER TABLE analytics.dim_customers DROP CONSTRAINT dim_customers_pkey`)
	r = runCLI(t, env, "validate", "--config", path)
	require.ErrorIs(t, r.e, ErrReported)
	for _, want := range []string{`dataset "orders"`, "coupon", `dataset "events"`, "raw.events", `dataset "customers"`, "unique index", "3 problem(s)"} {
		require.Contains(t, r.err, want)
	}
	// Nothing was written by the checks.
	require.EqualValues(t, 0, db.Int(t, "SELECT count(*) FROM analytics.fact_orders"))

	r = runCLI(t, env, "validate", "--offline", "--config", path)
	require.NoError(t, r.e, r.err)

	// An unreachable database is a problem, not a silent skip.
	r = runCLI(t, map[string]string{"IDEM_DATABASE_URL": "postgres://idem@127.0.0.1:1/x?connect_timeout=2"}, "validate", "--config", path)
	require.ErrorIs(t, r.e, ErrReported)
	require.Contains(t, r.err, "cannot reach PostgreSQL")
}

func TestDevScenario(t *testing.T) {
	db := pgtest.NewDB(t)
	r := runCLI(t, map[string]string{"IDEM_DATABASE_URL": db.URL}, "dev", "--once")
	require.NoError(t, r.e, r.err)
	for _, want := range []string{"skipped", "25 deleted", "not a calendar date", "dead letter on idem.dlq.orders, kind fatal, after 1 delivery",
		"empty_source", "check_failed: unique(order_id): 25 failing", "holds 75 rows", "status page on http://", "shows 12 events", "stopped cleanly", "orders:2026-11-28:manual__replay"} {
		require.Contains(t, r.out, want)
	}
	require.EqualValues(t, 75, db.Int(t, "SELECT count(*) FROM analytics.fact_orders"))
	require.EqualValues(t, 1, db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'skipped'"))
}

// TestValidateChecksAgainstDatabase: a check naming a column the target
// lacks, a range bound its column's type cannot read, or a relationships
// table that does not exist is found before the first event.
func TestValidateChecksAgainstDatabase(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, tablesSQL)
	env := map[string]string{"IDEM_DATABASE_URL": db.URL}
	withChecks := strings.Replace(goodConfig, "    source: SELECT * FROM staging.orders WHERE event_date = @partition\n",
		"    source: SELECT * FROM staging.orders WHERE event_date = @partition\n    checks:\n      - not_null: [order_id]\n", 1)
	path := writeConfig(t, withChecks)
	require.NoError(t, runCLI(t, env, "migrate", "--config", path).e)
	r := runCLI(t, env, "validate", "--config", path)
	require.NoError(t, r.e, r.err)

	for bad, want := range map[string]string{
		"      - not_null: [order_id]\n":                                                                "",
		"      - not_null: [coupon]\n":                                                                  `check not_null(coupon)`,
		"      - {accepted_range: {column: total, min: cheap}}\n":                                       `check accepted_range(total)`,
		"      - {relationships: {column: order_id, to: analytics.nowhere, field: id}}\n":               `analytics.nowhere`,
		"      - {sql: \"SELECT order_id FROM analytics.fact_orders WHERE event_date = @partition\"}\n": "",
	} {
		cfg := strings.Replace(withChecks, "      - not_null: [order_id]\n", bad, 1)
		r := runCLI(t, env, "validate", "--config", writeConfig(t, cfg))
		if want == "" {
			require.NoError(t, r.e, "%s: %s", bad, r.err)
			continue
		}
		require.ErrorIs(t, r.e, ErrReported, bad)
		require.Contains(t, r.err, `dataset "orders"`, bad)
		require.Contains(t, r.err, want, bad)
	}
}
