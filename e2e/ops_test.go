package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/testkit/pgtest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestMetricsHealthAndEventLogLines(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	p := w.serve()
	base := "http://" + p.httpAddr()
	code, _ := get(t, base+"/healthz")
	require.Equal(t, 200, code)
	code, body := get(t, base+"/readyz")
	require.Equal(t, 200, code, body)

	w.publish("2026-11-12", "r1", nil)
	w.publish("2026-11-12", "r1", nil)
	w.publish("2031-01-01", "empty", nil)
	w.waitDeadLetters(1)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'skipped'")
	w.waitSettled()

	// A settled message's counters are added just after its ack: scraped
	// until they are there (on a busy machine, a moment after).
	wants := []string{
		`idem_events_total{dataset="orders",outcome="acked"} 2`,
		`idem_events_total{dataset="orders",outcome="dead_lettered"} 1`,
		`idem_dead_letters_total{dataset="orders",kind="fatal"} 1`,
		`idem_duplicates_skipped_total{dataset="orders"} 1`,
		`idem_rows_written_total{dataset="orders"} 10`,
		`idem_load_duration_seconds_count{dataset="orders",status="success"} 1`,
		`idem_loads_in_flight 0`,
	}
	var metrics string
	require.Eventually(t, func() bool {
		_, metrics = get(t, base+"/metrics")
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)
	for _, want := range wants {
		require.Contains(t, metrics, want)
	}

	// Every log line about an event carries the five keys operators grep for.
	sc := bufio.NewScanner(strings.NewReader(p.output()))
	lines := 0
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec["run_id"] == nil {
			continue
		}
		lines++
		for _, k := range []string{"dataset", "partition", "run_id", "attempt", "stream_seq"} {
			require.Contains(t, rec, k, "log line without %s: %s", k, sc.Text())
		}
	}
	require.GreaterOrEqual(t, lines, 3)

	// Postgres gone: not ready. (NATS stays up in this process.)
	admin, err := pgx.Connect(t.Context(), pgtest.AdminURL())
	require.NoError(t, err)
	defer admin.Close(t.Context())
	_, err = admin.Exec(t.Context(), "ALTER DATABASE "+pgx.Identifier{w.db.Name}.Sanitize()+" ALLOW_CONNECTIONS false")
	require.NoError(t, err)
	_, err = admin.Exec(t.Context(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", w.db.Name)
	require.NoError(t, err)
	require.Eventually(t, func() bool { c, _ := get(t, base+"/readyz"); return c == 503 }, 10*time.Second, 100*time.Millisecond)
}

func TestBrokenDatasetDoesNotStopServe(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{extraYAML: `  broken:
    strategy: delete_insert
    target: analytics.does_not_exist
    partition_column: event_date
    source: SELECT id, event_date FROM staging.src WHERE event_date = @partition
`})
	p := w.serve()
	require.Contains(t, p.output(), "dataset is broken")
	w.streams()
	_, err := w.js.Publish(t.Context(), "idem.ready.broken", []byte(`{"dataset":"broken","partition":"2026-11-13","run_id":"r1"}`))
	require.NoError(t, err)
	w.publish("2026-11-13", "r1", nil)
	dl := w.waitDeadLetters(1)[0]
	require.Equal(t, "idem.dlq.broken", dl.Subject)
	require.Equal(t, "fatal", dl.Header.Get(deadletter.HeaderErrorKind))
	require.Contains(t, dl.Header.Get(deadletter.HeaderError), "analytics.does_not_exist")
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'orders' AND status = 'success'")
}

func TestSIGTERMPastGraceNaksAndTheNextProcessLoads(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (4000)")
	p := w.serveGrace("300ms")
	w.publish("2026-11-14", "r1", nil)
	w.waitSleeping()
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second), p.output())
	require.EqualValues(t, 0, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'"))
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'failed' AND error_kind = 'interrupted'"),
		"the interrupted attempt is audited as interrupted: it spends no retry")

	w.db.Exec(t, "DELETE FROM staging.gate_on")
	w.serve()
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitSettled()
	require.Equal(t, w.expected("2026-11-14"), w.target())
	require.Empty(t, w.deadLetters())
}
