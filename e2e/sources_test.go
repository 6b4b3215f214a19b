package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/testkit/pgtest"
)

// TestFileSourceWaitsThroughNATS: a file partition published before its
// marker waits on a real idem serve, redelivered by JetStream with no
// attempt spent, and every reader says so (idem audit why, the API, the
// metrics); once the marker lands it loads once. A partition whose marker
// never comes is dead-lettered as missing_files when its wait is over,
// once, and the story says it gave up.
func TestFileSourceWaitsThroughNATS(t *testing.T) {
	t.Parallel()
	landing := filepath.Join(t.TempDir(), "landing")
	w := newWorld(t, opts{extraYAML: fmt.Sprintf(`  landed:
    strategy: delete_insert
    target: analytics.landed
    partition_column: event_date
    source:
      files:
        url: file://%s/dt={partition}/
        format: csv
        ready: {marker: _SUCCESS}
    wait_up_to: 20s
`, landing)})
	w.db.Exec(t, "CREATE TABLE analytics.landed (id bigint, event_date date NOT NULL, amount numeric(12,2), note text)")
	part := filepath.Join(landing, "dt=2026-11-28")
	require.NoError(t, os.MkdirAll(part, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(part, "part-0001.csv"), []byte("id,amount,note\n1,1.50,a\n2,2.50,b\n3,3.50,c\n"), 0o644))
	p := w.serve()
	defer func() {
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 30*time.Second))
	}()

	publish := func(partition, runID string) {
		_, err := w.js.Publish(context.Background(), "idem.ready.landed",
			fmt.Appendf(nil, `{"dataset":"landed","partition":%q,"run_id":%q}`, partition, runID))
		require.NoError(t, err)
	}
	publish("2026-11-28", "sched__28")

	// Waiting: checked at least twice (a redelivery), no attempt, and the
	// story, the API and the metrics all say so.
	require.Eventually(t, func() bool {
		code, out, _ := rbExec(t, w, []string{"audit", "why", "landed", "2026-11-28"})
		return code == 3 && strings.Contains(out, "WAITING: waiting for its source since") && !strings.Contains(out, "checked 1 time(s)")
	}, 30*time.Second, 200*time.Millisecond)
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'landed'"), "a wait spends no attempt")
	var story struct{ Verdict struct{ State string } }
	require.Equal(t, 200, getAPIv1(t, "http://"+p.httpAddr()+"/api/v1/datasets/landed/partitions/2026-11-28", &story))
	require.Equal(t, "waiting", story.Verdict.State)
	var list struct{ Partitions []struct{ Status string } }
	require.Equal(t, 200, getAPIv1(t, "http://"+p.httpAddr()+"/api/v1/datasets/landed/partitions?from=2026-11-28&to=2026-11-28", &list))
	require.Len(t, list.Partitions, 1)
	require.Equal(t, "waiting", list.Partitions[0].Status)
	require.Contains(t, scrape(t, p.httpAddr()), `idem_events_total{dataset="landed",outcome="waiting"}`)

	// The marker lands: one load, three rows, and the story is loaded.
	require.NoError(t, os.WriteFile(filepath.Join(part, "_SUCCESS"), nil, 0o644))
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'landed' AND status = 'success'")
	require.EqualValues(t, 3, w.count("SELECT count(*) FROM analytics.landed WHERE event_date = '2026-11-28'"))
	code, out, _ := rbExec(t, w, []string{"audit", "why", "landed", "2026-11-28"})
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "read 1 file(s), listing ")
	require.NotContains(t, out, "waiting for its source")

	// A marker that never comes: dead-lettered once, missing_files, after
	// wait_up_to and not before.
	sent := time.Now()
	publish("2026-11-29", "sched__29")
	dl := w.waitDeadLetters(1)[0]
	require.GreaterOrEqual(t, time.Since(sent), 20*time.Second)
	require.Equal(t, "missing_files", dl.Header.Get(deadletter.HeaderErrorReason))
	require.Contains(t, dl.Header.Get(deadletter.HeaderError), "wait_up_to 20s")
	time.Sleep(time.Second)
	require.Len(t, w.deadLetters(), 1, "dead-lettered once")
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'landed' AND partition_key = '2026-11-29'"))
	code, out, _ = rbExec(t, w, []string{"audit", "why", "landed", "2026-11-29"})
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "gave up waiting for its source since")
	require.Contains(t, out, "DEAD LETTERED: dead-lettered")
}

// TestPostgresSourceWaitsForItsStandby: a dataset read from another
// PostgreSQL's streaming standby, through a real idem serve. While the
// standby's replay is held behind a commit for longer than
// max_replica_lag, the event waits (no attempt, the story says why); once
// replay resumes, it loads the rows the primary committed, once.
func TestPostgresSourceWaitsForItsStandby(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, standby, pc, sc := pgtest.PrimaryWithStandby(t)
	_, err := pc.Exec(ctx, `CREATE TABLE src (id bigint, event_date date, amount numeric(12,2), note text);
		INSERT INTO src SELECT g, '2026-11-28', g * 1.5, 'row ' || g FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return sc.QueryRow(ctx, "SELECT count(*) FROM src").Scan(&n) == nil && n == 5
	}, 30*time.Second, 20*time.Millisecond, "the standby caught up")

	w := newWorld(t, opts{extraYAML: fmt.Sprintf(`  replicated:
    strategy: delete_insert
    target: analytics.replicated
    partition_column: event_date
    source:
      postgres:
        url: %s
        sql: SELECT id, event_date, amount, note FROM src WHERE event_date = @partition
        max_replica_lag: 1s
`, standby.URL(""))})
	w.db.Exec(t, "CREATE TABLE analytics.replicated (id bigint, event_date date NOT NULL, amount numeric(12,2), note text)")
	p := w.serve()
	defer func() {
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 30*time.Second))
	}()
	publish := func(partition, runID string) {
		_, err := w.js.Publish(ctx, "idem.ready.replicated",
			fmt.Appendf(nil, `{"dataset":"replicated","partition":%q,"run_id":%q}`, partition, runID))
		require.NoError(t, err)
	}

	// Caught up: it loads, however long ago the primary last committed.
	publish("2026-11-28", "r28")
	w.waitCount(5, "SELECT count(*) FROM analytics.replicated WHERE event_date = '2026-11-28'")

	// Replay held behind a commit: the 29th waits.
	_, err = sc.Exec(ctx, "SELECT pg_wal_replay_pause()")
	require.NoError(t, err)
	_, err = pc.Exec(ctx, "INSERT INTO src SELECT g, '2026-11-29', g, 'late ' || g FROM generate_series(11, 17) g")
	require.NoError(t, err)
	time.Sleep(1200 * time.Millisecond)
	publish("2026-11-29", "r29")
	require.Eventually(t, func() bool {
		code, out, _ := rbExec(t, w, []string{"audit", "why", "replicated", "2026-11-29"})
		return code == 3 && strings.Contains(out, "WAITING: waiting for its source since") && strings.Contains(out, "max_replica_lag")
	}, 30*time.Second, 200*time.Millisecond)
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'replicated' AND partition_key = '2026-11-29'"))

	_, err = sc.Exec(ctx, "SELECT pg_wal_replay_resume()")
	require.NoError(t, err)
	w.waitCount(7, "SELECT count(*) FROM analytics.replicated WHERE event_date = '2026-11-29'")
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'replicated' AND partition_key = '2026-11-29'"))
	require.Empty(t, w.deadLetters())
}
