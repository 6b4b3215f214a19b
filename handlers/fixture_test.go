package handlers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }

// staging.src holds the source rows of every partition. staging.gate() sleeps
// once per transaction for staging.gate_on.ms milliseconds while that table has
// a row: it lets a test catch a load mid-statement, or make loads overlap.
const stagingSQL = `
CREATE SCHEMA staging;
CREATE SCHEMA analytics;
CREATE TABLE staging.src (id bigint, event_date date, amount numeric(12,2), note text, version int);
` + pgtest.GateSQL

const sourceSQL = `SELECT id, event_date, amount, note, version FROM staging.src
 WHERE event_date = @partition AND staging.gate()`

// fixture is one strategy set up on a fresh database, with the query that
// shows what a reader sees (the view for append_dedupe).
type fixture struct {
	name     string
	strategy string
	ddl      string
	spec     strategies.Spec
	visible  string // what readers see, as a query
	raw      string // the physical table
	// grouped sends every load of the env through HandleGroup, the event
	// the group's one valid member (beside an event of no configured
	// dataset, which writes nothing): the group's statements and its
	// fallback, on every conformance case.
	grouped bool
}

var fixtures = []fixture{
	{
		name: "delete_insert", strategy: "delete_insert",
		ddl: `CREATE TABLE analytics.t (id bigint, event_date date NOT NULL, amount numeric(12,2), note text, version int);
		      CREATE INDEX ON analytics.t (event_date);`,
		spec:    strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"},
		visible: "SELECT id, event_date, amount, note, version FROM analytics.t", raw: "analytics.t",
	},
	{
		name: "delete_insert_partitioned", strategy: "delete_insert",
		ddl: `CREATE TABLE analytics.t (id bigint, event_date date NOT NULL, amount numeric(12,2), note text, version int) PARTITION BY RANGE (event_date);
		      CREATE TABLE analytics.t_20261127 PARTITION OF analytics.t FOR VALUES FROM ('2026-11-27') TO ('2026-11-28');
		      CREATE TABLE analytics.t_20261128 PARTITION OF analytics.t FOR VALUES FROM ('2026-11-28') TO ('2026-11-29');
		      CREATE TABLE analytics.t_rest PARTITION OF analytics.t DEFAULT;`,
		spec:    strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"},
		visible: "SELECT id, event_date, amount, note, version FROM analytics.t", raw: "analytics.t",
	},
	{
		name: "merge", strategy: "merge",
		ddl:     `CREATE TABLE analytics.t (id bigint PRIMARY KEY, event_date date, amount numeric(12,2), note text, version int);`,
		spec:    strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, Key: []string{"id"}, VersionColumn: "version"},
		visible: "SELECT id, event_date, amount, note, version FROM analytics.t", raw: "analytics.t",
	},
	{
		name: "append_dedupe", strategy: "append_dedupe",
		ddl: `CREATE TABLE analytics.t (id bigint, event_date date, amount numeric(12,2), note text, version int, run_id text, load_seq bigint);`,
		spec: strategies.Spec{Target: strategies.Table{Schema: "analytics", Name: "t"}, Key: []string{"id"},
			View: strategies.Table{Schema: "analytics", Name: "v"}},
		visible: "SELECT id, event_date, amount, note, version FROM analytics.v", raw: "analytics.t",
	},
}

// env is one fixture on its own database with a handler ready.
type env struct {
	t  *testing.T
	db *pgtest.DB
	f  fixture
	h  *handlers.Handler
	ds *handlers.Dataset
}

func newEnv(t *testing.T, f fixture, mutate ...func(*strategies.Spec)) *env {
	t.Helper()
	return newEnvOn(t, audittest.NewDB(t), f, mutate...)
}

// newEnvOn is newEnv in db, a database of the test's choosing.
func newEnvOn(t *testing.T, db *pgtest.DB, f fixture, mutate ...func(*strategies.Spec)) *env {
	t.Helper()
	_, err := audit.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	db.Exec(t, stagingSQL)
	db.Exec(t, f.ddl)
	spec := f.spec
	spec.Dataset = "ds"
	spec.Source = sourceSQL
	for _, m := range mutate {
		m(&spec)
	}
	st, err := strategies.New(f.strategy, spec)
	require.NoError(t, err)
	ds := &handlers.Dataset{Name: "ds", Strategy: st}
	h := &handlers.Handler{DB: db.Pool, Pipeline: "test", Datasets: map[string]*handlers.Dataset{"ds": ds}, Log: zerolog.Nop()}
	require.Empty(t, h.Prepare(context.Background()))
	return &env{t: t, db: db, f: f, h: h, ds: ds}
}

// stage replaces the staging rows of a partition: n rows with ids from base,
// amounts derived from salt and version ver.
func (e *env) stage(partition string, base, n, salt, ver int) {
	e.t.Helper()
	e.db.Exec(e.t, "DELETE FROM staging.src WHERE event_date = $1", partition)
	e.db.Exec(e.t, `INSERT INTO staging.src
		SELECT base + i, $1::date, ((base + i) * 7 + $4) % 1000 + 0.25, 'note ' || (base + i) || ' ''quoted'' ' || $4, $5
		  FROM generate_series(0, $3 - 1) AS i, (SELECT $2::bigint AS base) b`, partition, base, n, salt, ver)
}

func (e *env) load(partition, runID string, force bool) (handlers.Outcome, error) {
	return e.loadCtx(context.Background(), partition, runID, force)
}

func (e *env) loadCtx(ctx context.Context, partition, runID string, force bool) (handlers.Outcome, error) {
	body, err := schemas.PartitionReady{Dataset: "ds", Partition: partition, RunID: runID, Force: force}.Marshal()
	require.NoError(e.t, err)
	if !e.f.grouped {
		return e.h.HandleMessage(ctx, "idem.ready.ds", body, handlers.Meta{})
	}
	ev, err := schemas.Decode("idem.ready.ds", body, e.h.Lookup)
	if err != nil {
		return handlers.Outcome{}, err
	}
	stray := schemas.Event{PartitionReady: schemas.PartitionReady{Dataset: "not_configured", Partition: partition, RunID: runID}}
	outs, errs := e.h.HandleGroup(ctx, []schemas.Event{ev, stray}, []handlers.Meta{{}, {}})
	require.True(e.t, handlers.IsFatal(errs[1]), "the stray member: %v", errs[1])
	return outs[0], errs[0]
}

func (e *env) mustLoad(partition, runID string, force bool) handlers.Outcome {
	e.t.Helper()
	out, err := e.load(partition, runID, force)
	require.NoError(e.t, err, "load %s %s", partition, runID)
	return out
}

func (e *env) visible() string { return e.db.Checksum(e.t, e.f.visible) }

// expected is what readers must see once partitions were loaded from the
// current staging: exactly the staging rows of those partitions.
func (e *env) expected(partitions ...string) string {
	return e.db.Checksum(e.t, fmt.Sprintf(
		"SELECT id, event_date, amount, note, version FROM staging.src WHERE event_date IN ('%s')",
		strings.Join(partitions, "','")))
}

func (e *env) auditCount(status string) int64 {
	return e.db.Int(e.t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = $1", status)
}

func handlersMeta() handlers.Meta { return handlers.Meta{} }
