package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestGroupLoadsThroughServe: a backlog of one dataset loads in groups
// (one transaction for several events) and a partition that fails inside a
// group fails alone: the others load once and are acked, the empty one is
// dead-lettered on its first attempt.
func TestGroupLoadsThroughServe(t *testing.T) {
	w := newWorld(t, opts{inFlight: 1, extraYAML: ""})
	w.streams()
	parts := w.backlog(12, "g1")
	w.publish("2026-12-25", "g1", nil) // no staging rows: fatal
	p := w.serve("IDEM_NATS_MAX_GROUP=8")
	w.waitCount(12, "SELECT count(*) FROM idem.run_ledger WHERE run_id = 'g1'")
	w.waitDeadLetters(1)
	w.waitSettled()
	require.Equal(t, w.expected(parts...), w.target())
	require.EqualValues(t, 12, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'g1' AND status = 'success'"), "every event loads once")
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = '2026-12-25'"), "the empty partition's one attempt")
	groups := w.count("SELECT count(DISTINCT xmin::text) FROM idem.pipeline_audit WHERE run_id = 'g1' AND status = 'success'")
	require.Less(t, groups, int64(12), "some events shared a transaction")
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second))
	out := p.output()
	require.Contains(t, out, `"group":`)
	require.True(t, strings.Contains(out, "group load rolled back") || groups >= 2, "the empty partition failed alone")
	t.Logf("12 loads in %d transactions", groups)
}

// TestGroupsStayWholeUnderABacklog: a process holds one group more than its
// loads take, so under a backlog every group after the first is whole. With
// only as many as the loads take, a max_in_flight of 1 alternated a whole
// group and the one message that had waited beside it (24 events in about
// ten transactions at max_group 4).
func TestGroupsStayWholeUnderABacklog(t *testing.T) {
	w := newWorld(t, opts{inFlight: 1})
	w.streams()
	parts := w.backlog(24, "whole")
	// Each load sleeps 300 ms in its source (staging.gate, once per
	// transaction), so the refill of a group's slots is fetched before the
	// next group forms even on a busy machine: what remains is the
	// fetch-ahead's own doing. (100 ms left a group short once, on 2
	// cores at a load average of 47.)
	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (300)")
	p := w.serve("IDEM_NATS_MAX_GROUP=4")
	w.waitCount(24, "SELECT count(*) FROM idem.run_ledger WHERE run_id = 'whole'")
	w.waitSettled()
	require.Equal(t, w.expected(parts...), w.target())
	// The sizes of the transactions, in the order they loaded. The first
	// groups may form before the whole backlog is fetched (on a busy
	// machine the first fetch arrives in pieces), and the last takes what
	// is left: short groups are allowed at either end, never between two
	// whole ones. (The old fetch-ahead alternated a whole group and a
	// single message: 6 of 10 short.)
	rows, err := w.db.Pool.Query(context.Background(), `SELECT count(*)::int FROM idem.pipeline_audit
		WHERE run_id = 'whole' AND status = 'success' GROUP BY xmin::text ORDER BY min(id)`)
	require.NoError(t, err)
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	first, last := slices.Index(sizes, 4), -1
	for i, n := range sizes {
		if n == 4 {
			last = i
		}
	}
	require.GreaterOrEqual(t, first, 0, "no whole group: %v", sizes)
	for i := first; i <= last; i++ {
		require.Equal(t, 4, sizes[i], "a short group between whole ones: %v", sizes)
	}
	require.GreaterOrEqual(t, last-first+1, 4, "most loads in whole groups: %v", sizes)
	groups, partial := len(sizes), len(sizes)-(last-first+1)
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second))
	t.Logf("24 loads in %d transactions, %d of them not whole", groups, partial)
}

// backlog publishes run for the first n days of November before idem
// starts, so the messages are fetched together, and returns the partitions.
func (w *world) backlog(n int, run string) []string {
	parts := make([]string, n)
	for d := range parts {
		parts[d] = fmt.Sprintf("2026-11-%02d", d+1)
		w.publish(parts[d], run, nil)
	}
	return parts
}
