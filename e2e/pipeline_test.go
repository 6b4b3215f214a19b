package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
)

// A three-step pipeline: orders (delete_insert) -> b (daily aggregate,
// delete_insert) -> c (merge of b).
const chainYAML = `  b:
    strategy: delete_insert
    target: analytics.b
    partition_column: event_date
    source: SELECT event_date, count(*) AS n, sum(amount) AS total FROM analytics.t WHERE event_date = @partition GROUP BY event_date
    retries: 3
    retry_delay: 300ms
    then: [c]
  c:
    strategy: merge
    target: analytics.c
    key: [event_date]
    source: SELECT event_date, n, total FROM analytics.b WHERE event_date = @partition
    retries: 3
    retry_delay: 300ms
`

const chainSQL = `
CREATE TABLE analytics.b (event_date date NOT NULL, n bigint, total numeric(14,2));
CREATE TABLE analytics.c (event_date date PRIMARY KEY, n bigint, total numeric(14,2));`

func chainWorld(t *testing.T) *world {
	w := newWorld(t, opts{then: "[b]", extraYAML: chainYAML})
	w.db.Exec(t, chainSQL)
	return w
}

// chainExpected: every table equals what the staging rows of the partitions imply.
func (w *world) requireChain(partitions ...string) {
	w.t.Helper()
	require.Equal(w.t, w.expected(partitions...), w.target(), "orders")
	agg := "SELECT event_date, count(*)::bigint AS n, sum(amount)::numeric(14,2) AS total FROM staging.src WHERE event_date IN ('" +
		joinQuoted(partitions) + "') GROUP BY event_date"
	require.Equal(w.t, w.db.Checksum(w.t, agg), w.db.Checksum(w.t, "SELECT event_date, n, total FROM analytics.b"), "b")
	require.Equal(w.t, w.db.Checksum(w.t, agg), w.db.Checksum(w.t, "SELECT event_date, n, total FROM analytics.c"), "c")
}

func joinQuoted(ps []string) string {
	out := ""
	for i, p := range ps {
		if i > 0 {
			out += "','"
		}
		out += p
	}
	return out
}

func TestPipelineSurvivesACrashBetweenCommitAndRelay(t *testing.T) {
	t.Parallel()
	w := chainWorld(t)
	w.streams()
	w.publish("2026-11-15", "r1", nil)
	w.publish("2026-11-15", "r1", nil) // a duplicate delivery of the upstream event
	// The first process dies right after the upstream load commits, before
	// the ack and (most likely) before its relay publishes b's event.
	p := w.serve("IDEM_TEST_CRASH=after_commit:r1")
	require.Equal(t, 3, p.exit(t, 30*time.Second), p.output())
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.run_ledger WHERE task_id = 'orders'"))

	w.serve()
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'c' AND run_id = 'r1'")
	w.waitSettled()
	w.waitCount(0, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL")
	for _, ds := range []string{"orders", "b", "c"} {
		require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = $1 AND status = 'success'", ds), ds)
	}
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'b' AND triggered_by = 'orders:2026-11-15:r1'"))
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'c' AND triggered_by = 'b:2026-11-15:r1'"))
	w.requireChain("2026-11-15")
	require.Empty(t, w.deadLetters())
}

func TestRerunningTheFirstStepRerunsTheChainOnce(t *testing.T) {
	t.Parallel()
	w := chainWorld(t)
	w.serve()
	w.publish("2026-11-16", "r1", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'c'")
	w.db.Exec(t, "UPDATE staging.src SET amount = amount + 1 WHERE event_date = '2026-11-16'")
	w.publish("2026-11-16", "r2", nil)
	w.publish("2026-11-16", "r2", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'c' AND run_id = 'r2'")
	w.waitSettled()
	for _, ds := range []string{"orders", "b", "c"} {
		require.EqualValues(t, 2, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = $1 AND status = 'success'", ds), ds)
	}
	w.requireChain("2026-11-16")
}

func TestFailedDownstreamDoesNotTouchUpstream(t *testing.T) {
	t.Parallel()
	w := chainWorld(t)
	w.db.Exec(t, "DROP TABLE analytics.c")
	p := w.serve()
	w.publish("2026-11-17", "r1", nil)
	dl := w.waitDeadLetters(1)[0]
	require.Equal(t, "idem.dlq.c", dl.Subject)
	require.Equal(t, "fatal", dl.Header.Get(deadletter.HeaderErrorKind))
	w.waitSettled()
	// orders and b succeeded once each; c failed on its own and rolled back nothing of theirs.
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.run_ledger WHERE task_id = 'orders'"))
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.run_ledger WHERE task_id = 'b'"))
	require.EqualValues(t, 0, w.count("SELECT count(*) FROM idem.run_ledger WHERE task_id = 'c'"))
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'c' AND status = 'failed' AND error_kind = 'fatal'"))
	require.Equal(t, w.expected("2026-11-17"), w.target(), "the upstream load stands")
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second))
}
