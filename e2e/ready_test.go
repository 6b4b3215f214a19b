package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
)

// TestReadyWhenWaitsForTheRows: a SELECT source with ready_when, through a
// real idem serve. An event published before its rows waits (no attempt,
// no retry spent, the story says so), then loads once when they land; a
// run that already loaded is a duplicate even once its rows are gone; one
// whose rows never come is dead-lettered once as not_ready after
// wait_up_to.
func TestReadyWhenWaitsForTheRows(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{extraYAML: `  gated:
    strategy: delete_insert
    target: analytics.gated
    partition_column: event_date
    source: SELECT id, event_date, amount, note FROM staging.late WHERE event_date = @partition
    ready_when: SELECT count(*) >= 3 FROM staging.late WHERE event_date = @partition
    wait_up_to: 2m
  gated_short:
    strategy: delete_insert
    target: analytics.gated
    partition_column: event_date
    source: SELECT id, event_date, amount, note FROM staging.late WHERE event_date = @partition
    ready_when: SELECT count(*) >= 3 FROM staging.late WHERE event_date = @partition
    wait_up_to: 6s
`})
	w.db.Exec(t, `CREATE TABLE staging.late (id bigint, event_date date, amount numeric(12,2), note text);
		CREATE TABLE analytics.gated (id bigint, event_date date NOT NULL, amount numeric(12,2), note text)`)
	p := w.serve()
	defer func() {
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 30*time.Second))
	}()
	// gated waits long enough for the steps below on a loaded machine;
	// gated_short (the same source) shows the give-up.
	publish := func(dataset, partition, runID string) {
		_, err := w.js.Publish(context.Background(), "idem.ready."+dataset,
			fmt.Appendf(nil, `{"dataset":%q,"partition":%q,"run_id":%q}`, dataset, partition, runID))
		require.NoError(t, err)
	}

	publish("gated", "2026-12-01", "early")
	require.Eventually(t, func() bool {
		code, out, _ := rbExec(t, w, []string{"audit", "why", "gated", "2026-12-01"})
		return code == 3 && strings.Contains(out, "WAITING: waiting for its source since") && strings.Contains(out, "ready_when is not true yet") &&
			!strings.Contains(out, "checked 1 time(s)")
	}, 30*time.Second, 200*time.Millisecond)
	w.db.Exec(t, "INSERT INTO staging.late SELECT g, '2026-12-01', g, 'late' FROM generate_series(1, 2) g")
	time.Sleep(2500 * time.Millisecond) // a redelivery sees two rows of three: still waiting
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'gated'"), "a wait is no attempt")
	w.db.Exec(t, "INSERT INTO staging.late VALUES (3, '2026-12-01', 3, 'late')")
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'gated' AND status = 'success'")
	require.EqualValues(t, 3, w.count("SELECT count(*) FROM analytics.gated"))
	require.EqualValues(t, 1, w.count("SELECT attempt FROM idem.pipeline_audit WHERE task_id = 'gated' AND status = 'success'"), "no retry spent")

	// The rows gone, the same run again is a duplicate, not a wait.
	w.db.Exec(t, "DELETE FROM staging.late")
	_, err := w.js.Publish(context.Background(), "idem.ready.gated", []byte(`{"dataset":"gated","partition":"2026-12-01","run_id":"early"}`),
		jetstream.WithMsgID("again"))
	require.NoError(t, err)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'gated' AND status = 'skipped'")

	sent := time.Now()
	publish("gated_short", "2026-12-02", "never")
	dl := w.waitDeadLetters(1)[0]
	require.GreaterOrEqual(t, time.Since(sent), 6*time.Second)
	require.Equal(t, "not_ready", dl.Header.Get(deadletter.HeaderErrorReason))
	time.Sleep(time.Second)
	require.Len(t, w.deadLetters(), 1, "dead-lettered once")
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'gated_short' AND partition_key = '2026-12-02'"))
}
