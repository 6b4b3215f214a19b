package e2e

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The diamond: orders (the web shop's sales, the world's dataset) and shop
// (the store's) each name revenue in then:, and revenue sums both for the
// partition. staging.hold(name) lets a test keep one upstream's load open
// until it says so, to choose the finishing order.
const diamondYAML = `  shop:
    strategy: delete_insert
    target: analytics.shop
    partition_column: event_date
    source: SELECT id, event_date, amount FROM staging.shop_src WHERE event_date = @partition AND staging.hold('shop')
    retry_delay: 300ms
    then: [revenue]
  revenue:
    strategy: delete_insert
    target: analytics.revenue
    partition_column: event_date
    source: >-
      SELECT @partition::date AS event_date,
             (SELECT coalesce(sum(amount), 0) FROM analytics.t WHERE event_date = @partition)
           + (SELECT coalesce(sum(amount), 0) FROM analytics.shop WHERE event_date = @partition) AS total
    retry_delay: 300ms
`

const diamondSQL = `
CREATE TABLE staging.shop_src (id bigint, event_date date, amount numeric(12,2));
CREATE TABLE analytics.shop (id bigint, event_date date NOT NULL, amount numeric(12,2));
CREATE TABLE analytics.revenue (event_date date NOT NULL, total numeric(14,2));
INSERT INTO staging.shop_src SELECT d * 1000 + i, date '2026-11-01' + d, 100 + i FROM generate_series(0, 29) d, generate_series(1, 3) i;
CREATE FUNCTION staging.hold(name text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM pg_advisory_lock_shared(hashtext('hold:' || name));
  PERFORM pg_advisory_unlock_shared(hashtext('hold:' || name));
  RETURN true;
END $$;`

type diamond struct {
	*world
	mu    sync.Mutex
	holds map[string]*pgx.Conn
}

func newDiamond(t *testing.T) *diamond {
	// orders' source waits on hold('web') too.
	w := newWorld(t, opts{then: "[revenue]", extraYAML: diamondYAML})
	w.db.Exec(t, diamondSQL)
	w.db.Exec(t, `CREATE OR REPLACE FUNCTION staging.gate() RETURNS boolean LANGUAGE sql AS $$ SELECT staging.hold('web') $$`)
	return &diamond{world: w, holds: map[string]*pgx.Conn{}}
}

// hold keeps the loads of upstream name ("web" or "shop") open until release.
func (d *diamond) hold(name string) {
	d.t.Helper()
	c, err := pgx.Connect(context.Background(), d.db.URL)
	require.NoError(d.t, err)
	_, err = c.Exec(context.Background(), "SELECT pg_advisory_lock(hashtext('hold:' || $1))", name)
	require.NoError(d.t, err)
	d.mu.Lock()
	d.holds[name] = c
	d.mu.Unlock()
	d.t.Cleanup(func() { _ = c.Close(context.Background()) })
}

func (d *diamond) release(name string) {
	d.t.Helper()
	d.mu.Lock()
	c := d.holds[name]
	delete(d.holds, name)
	d.mu.Unlock()
	require.NoError(d.t, c.Close(context.Background()))
}

// waitHeld waits until n loads wait on a hold.
func (d *diamond) waitHeld(n int) {
	d.t.Helper()
	require.Eventually(d.t, func() bool {
		return d.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND wait_event = 'advisory'`) == int64(n)
	}, 30*time.Second, 20*time.Millisecond, "want %d loads held", n)
}

func (d *diamond) pub(dataset, partition, runID string) {
	d.t.Helper()
	_, err := d.js.Publish(context.Background(), "idem.ready."+dataset,
		[]byte(fmt.Sprintf(`{"dataset":%q,"partition":%q,"run_id":%q}`, dataset, partition, runID)))
	require.NoError(d.t, err)
}

// wantRevenue: revenue for the partition equals web + shop from staging now.
func (d *diamond) wantRevenue(partition string) {
	d.t.Helper()
	want := d.db.Checksum(d.t, fmt.Sprintf(`SELECT '%s'::date, (SELECT sum(amount) FROM staging.src WHERE event_date = '%[1]s')
		+ (SELECT sum(amount) FROM staging.shop_src WHERE event_date = '%[1]s')`, partition))
	require.Eventually(d.t, func() bool {
		return d.db.Checksum(d.t, "SELECT event_date, total FROM analytics.revenue WHERE event_date = '"+partition+"'") == want
	}, 60*time.Second, 50*time.Millisecond, "revenue of %s is not web + shop", partition)
}

func (d *diamond) revenueRuns(partition string) int64 {
	return d.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'revenue' AND partition_key = $1 AND status = 'success'", partition)
}

func TestJoinRunsOnceAfterBothUpstreamsInEitherOrder(t *testing.T) {
	t.Parallel()
	d := newDiamond(t)
	d.serve()
	for i, order := range [][2]string{{"web", "shop"}, {"shop", "web"}} {
		p := fmt.Sprintf("2026-11-%02d", i+1)
		first, second := order[0], order[1]
		d.hold(second)
		d.pub("orders", p, "scheduled")
		d.pub("shop", p, "scheduled")
		// The first upstream commits; the join waits for the second.
		up := map[string]string{"web": "orders", "shop": "shop"}
		d.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = $1 AND partition_key = $2", up[first], p)
		d.waitHeld(1)
		require.Zero(t, d.revenueRuns(p), "%s: the join ran before its second upstream", p)
		d.release(second)
		d.wantRevenue(p)
		d.waitSettled()
		require.EqualValues(t, 1, d.revenueRuns(p), "%s, %s first: a first run runs the join once", p, first)
	}
	require.Empty(t, d.deadLetters())
	// Lineage: the upstream that completed the join.
	require.EqualValues(t, 2, d.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'revenue' AND triggered_by IS NOT NULL"))
}

func TestJoinFollowsEveryLaterUpstreamSuccess(t *testing.T) {
	t.Parallel()
	d := newDiamond(t)
	d.serve()
	const p = "2026-11-05"
	d.pub("orders", p, "r1")
	d.pub("shop", p, "r1")
	d.wantRevenue(p)

	// One upstream replayed alone on new data re-runs the join.
	d.db.Exec(t, "UPDATE staging.shop_src SET amount = amount + 1000 WHERE event_date = $1", p)
	d.pub("shop", p, "r2")
	d.wantRevenue(p)

	// The whole pipeline re-run for the day after both inputs changed (the
	// same run_id as the first run: a scheduler's "clear and rerun").
	d.db.Exec(t, "UPDATE staging.src SET amount = amount + 7 WHERE event_date = $1", p)
	d.db.Exec(t, "UPDATE staging.shop_src SET amount = amount + 70 WHERE event_date = $1", p)
	code, out := runIdem(t, nil, "publish", "--config", d.cfg, "orders", p, "--run-id", "r1", "--force")
	require.Equal(t, 0, code, out)
	code, out = runIdem(t, nil, "publish", "--config", d.cfg, "shop", p, "--run-id", "r1", "--force")
	require.Equal(t, 0, code, out)
	d.wantRevenue(p)
	d.waitSettled()
	require.Empty(t, d.deadLetters())

	// A whole-pipeline rerun on unchanged inputs ends on the same tables.
	before := d.db.Checksum(t, "SELECT * FROM analytics.revenue")
	d.pub("orders", p, "r3")
	d.pub("shop", p, "r3")
	d.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'shop' AND run_id = 'r3'")
	d.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'orders' AND run_id = 'r3'")
	d.waitSettled()
	require.Equal(t, before, d.db.Checksum(t, "SELECT * FROM analytics.revenue"))
}

func TestFatalUpstreamKeepsTheJoinFromRunning(t *testing.T) {
	t.Parallel()
	d := newDiamond(t)
	d.serve()
	const p = "2026-11-06"
	d.db.Exec(t, "DELETE FROM staging.shop_src WHERE event_date = $1", p) // empty: fatal
	d.pub("shop", p, "r1")
	dl := d.waitDeadLetters(1)[0]
	require.Equal(t, "idem.dlq.shop", dl.Subject)
	d.pub("orders", p, "r1")
	d.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'orders' AND partition_key = $1", p)
	d.waitSettled()
	require.Zero(t, d.revenueRuns(p), "the join ran on one upstream while the other's latest attempt failed")
	require.EqualValues(t, 0, d.count("SELECT count(*) FROM idem.outbox WHERE dataset = 'revenue'"))
	// The operator sees what the join waits for.
	code, out := runIdem(t, nil, "audit", "status", "revenue", "--config", d.cfg, "--from", p, "--to", p)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "join waiting for shop: failed")
	require.NotContains(t, out, "orders: ")
}

func TestUpstreamsCommittingTogetherTriggerTheJoin(t *testing.T) {
	t.Parallel()
	d := newDiamond(t)
	d.serve()
	for i := range 3 {
		p := fmt.Sprintf("2026-11-%02d", 10+i)
		d.hold("web")
		d.hold("shop")
		d.pub("orders", p, "r1")
		d.pub("shop", p, "r1")
		d.waitHeld(2)
		// Both loads are past their statements' start; let go at once.
		d.release("web")
		d.release("shop")
		d.wantRevenue(p)
		d.waitSettled()
		require.GreaterOrEqual(t, d.revenueRuns(p), int64(1), "two upstreams committing together never trigger the join zero times")
	}
	require.Empty(t, d.deadLetters())
}

func TestForcedPublishInsideTheDuplicateWindowLoads(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	w.serve()
	const p = "2026-11-07"
	code, out := runIdem(t, nil, "publish", "--config", w.cfg, "orders", p, "--run-id", "r1")
	require.Equal(t, 0, code, out)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	code, out = runIdem(t, nil, "publish", "--config", w.cfg, "orders", p, "--run-id", "r1", "--force")
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "duplicate", "a forced publish is never swallowed by JetStream's duplicate window")
	w.waitCount(2, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitSettled()
	require.EqualValues(t, 2, w.count("SELECT loads FROM idem.run_ledger"))
}

func TestForcedEventRedeliveredAfterCommitLoadsOnce(t *testing.T) {
	t.Parallel()
	d := newDiamond(t)
	d.streams()
	const p = "2026-11-08"
	d.pub("shop", p, "r1")
	d.pub("orders", p, "r1")
	first := d.serve()
	d.wantRevenue(p)
	d.waitSettled()
	first.signal(syscall.SIGTERM)
	require.Equal(t, 0, first.exit(t, 30*time.Second))

	// A forced rerun of orders whose process dies after the commit, before
	// the ack: the redelivery must neither load again nor trigger revenue again.
	d.db.Exec(t, "UPDATE staging.src SET amount = amount + 3 WHERE event_date = $1", p)
	code, out := runIdem(t, nil, "publish", "--config", d.cfg, "orders", p, "--run-id", "rF", "--force")
	require.Equal(t, 0, code, out)
	crashing := d.serve("IDEM_TEST_CRASH=after_commit:rF")
	require.Equal(t, 3, crashing.exit(t, 30*time.Second), crashing.output())
	d.serve()
	d.wantRevenue(p)
	d.waitSettled()
	require.EqualValues(t, 1, d.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'rF' AND task_id = 'orders' AND status = 'success'"))
	require.GreaterOrEqual(t, d.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'rF' AND task_id = 'orders' AND status = 'skipped'"), int64(1),
		"the redelivery was seen and skipped")
	require.EqualValues(t, 1, d.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'rF' AND task_id = 'revenue' AND status = 'success'"),
		"the downstream was triggered once")
	require.Empty(t, d.deadLetters())
}
