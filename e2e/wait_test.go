package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/internal/results"
)

// waitOut is `idem publish --wait`'s exit code, its last stdout line
// decoded, and its stderr.
type waitOut struct {
	code   int
	last   map[string]any
	stderr string
}

func publishWait(t *testing.T, w *world, args ...string) waitOut {
	t.Helper()
	code, stdout, stderr := rbExec(t, w, append([]string{"publish"}, args...))
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	out := waitOut{code: code, stderr: stderr}
	if last := lines[len(lines)-1]; last != "" {
		require.NoError(t, json.Unmarshal([]byte(last), &out.last), "the last stdout line is one JSON object: %q\nstderr: %s", stdout, stderr)
	}
	return out
}

// resultsOf reads every result message of the results stream.
func resultsOf(t *testing.T, w *world) []results.Result {
	t.Helper()
	ctx := context.Background()
	s, err := w.js.Stream(ctx, "IDEM_RESULTS")
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []results.Result
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		r, err := results.Parse(m.Data)
		require.NoError(t, err)
		require.Equal(t, r.Status, m.Header.Get(results.HeaderStatus))
		out = append(out, r)
	}
	return out
}

const waitDatasets = `  strict:
    strategy: delete_insert
    target: analytics.t
    partition_column: event_date
    source: SELECT id, event_date, amount, note FROM staging.src WHERE event_date = @partition
    checks:
      - row_count: {min: 100}
`

// TestPublishWait: `idem publish --wait` through the built binary, against
// a real idem serve, for every outcome a scheduler acts on, with the exit
// codes of the contract.
func TestPublishWait(t *testing.T) {
	w := newWorld(t, opts{ackWait: "2s", extraYAML: waitDatasets, timeout: "1s"})
	p := w.serve()
	defer func() {
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 30*time.Second))
	}()

	t.Run("loaded", func(t *testing.T) {
		o := publishWait(t, w, "orders", "2026-11-01", "--run-id", "sched__1", "--wait", "--timeout", "60s")
		require.Equal(t, 0, o.code, o.stderr)
		require.Equal(t, "loaded", o.last["status"])
		require.Equal(t, "sched__1", o.last["run_id"])
		require.EqualValues(t, 1, o.last["attempts"])
		require.EqualValues(t, 10, o.last["rows"].(map[string]any)["inserted"])
		require.Contains(t, o.stderr, "loaded orders 2026-11-01")
		// The same command again: JetStream drops it as a duplicate and the
		// wait reports the first load's outcome; nothing loads twice.
		o = publishWait(t, w, "orders", "2026-11-01", "--run-id", "sched__1", "--wait", "--timeout", "60s")
		require.Equal(t, 0, o.code, o.stderr)
		require.Equal(t, "loaded", o.last["status"])
		require.Contains(t, o.stderr, "already holds")
		require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'sched__1' AND status = 'success'"))
	})

	t.Run("already loaded", func(t *testing.T) {
		// Loaded by an event published with another message id (a
		// scheduler's own client); the wait's event is then a new message
		// the ledger skips.
		w.publish("2026-11-02", "sched__2", nats.Header{"Nats-Msg-Id": []string{"theirs-2"}})
		w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'sched__2' AND status = 'success'")
		o := publishWait(t, w, "orders", "2026-11-02", "--run-id", "sched__2", "--wait", "--timeout", "60s")
		require.Equal(t, 0, o.code, o.stderr)
		require.Equal(t, "skipped", o.last["status"])
		require.Contains(t, o.stderr, "had already loaded")
		require.EqualValues(t, 10, o.last["rows"].(map[string]any)["inserted"], "the rows of the run's load")
		require.NotZero(t, o.last["loaded_by_audit_id"])
	})

	t.Run("fatal", func(t *testing.T) {
		// No staging rows for that day: an empty source is fatal.
		o := publishWait(t, w, "orders", "2026-12-25", "--run-id", "sched__x", "--wait", "--timeout", "60s")
		require.Equal(t, 1, o.code, o.stderr)
		require.Equal(t, "dead_lettered", o.last["status"])
		require.Equal(t, "fatal", o.last["error_kind"])
		require.NotEmpty(t, o.last["error"])
		require.Contains(t, o.stderr, o.last["error"].(string)[:20])
		require.Contains(t, o.stderr, "idem dlq replay")
	})

	t.Run("rejected by its checks", func(t *testing.T) {
		o := publishWait(t, w, "strict", "2026-11-03", "--run-id", "sched__c", "--wait", "--timeout", "60s")
		require.Equal(t, 1, o.code, o.stderr)
		require.Equal(t, "rejected", o.last["status"])
		require.Equal(t, "check", o.last["error_kind"])
		require.Equal(t, []any{"row_count"}, o.last["failed_checks"])
	})

	t.Run("slower than the timeout, then again", func(t *testing.T) {
		w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (800)") // under the dataset's 1s statement timeout
		o := publishWait(t, w, "orders", "2026-11-04", "--run-id", "sched__4", "--wait", "--timeout", "300ms")
		require.Equal(t, 3, o.code, o.stderr)
		require.Equal(t, "waiting", o.last["status"])
		require.Contains(t, o.stderr, "run the same command again")
		o = publishWait(t, w, "orders", "2026-11-04", "--run-id", "sched__4", "--wait", "--timeout", "60s")
		w.db.Exec(t, "DELETE FROM staging.gate_on")
		require.Equal(t, 0, o.code, o.stderr)
		require.Equal(t, "loaded", o.last["status"])
		require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'sched__4' AND status <> 'skipped'"), "one load")
	})

	t.Run("a transient failure, then success", func(t *testing.T) {
		// The first attempt sleeps past the dataset's 1s statement timeout.
		w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (3000)")
		done := make(chan waitOut, 1)
		go func() {
			done <- publishWait(t, w, "orders", "2026-11-05", "--run-id", "sched__5", "--wait", "--timeout", "60s")
		}()
		w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'sched__5' AND status = 'failed'")
		w.db.Exec(t, "DELETE FROM staging.gate_on")
		o := <-done
		require.Equal(t, 0, o.code, o.stderr)
		require.Equal(t, "loaded", o.last["status"])
		require.EqualValues(t, 2, o.last["attempts"])
	})

	t.Run("backfill --wait", func(t *testing.T) {
		code, stdout, stderr := rbExec(t, w, []string{"backfill", "orders", "--from", "2026-11-20", "--to", "2026-11-21", "--wait", "--timeout", "60s"})
		require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
		require.Contains(t, stdout, "2 loaded, 0 failed, 0 pending")
		// Refused by their checks: failed for good, from the results stream
		// (the audit alone says only "failed, check").
		code, stdout, stderr = rbExec(t, w, []string{"backfill", "strict", "--from", "2026-11-20", "--to", "2026-11-21", "--wait", "--timeout", "60s", "--json"})
		require.Equal(t, 1, code, "%s\n%s", stdout, stderr)
		var res struct {
			Partitions []struct {
				Partition string `json:"partition"`
				Outcome   struct {
					Status, DLQ, Error string
					Final              bool
				} `json:"outcome"`
			} `json:"partitions"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &res), stdout)
		require.Len(t, res.Partitions, 2)
		for _, p := range res.Partitions {
			require.Equal(t, "failed", p.Outcome.Status, p.Partition)
			require.True(t, p.Outcome.Final)
			require.Contains(t, p.Outcome.Error, "check_failed: row_count")
		}
		// Both backfills travelled on the backfill lane, through the serve's
		// backfill durable, and their dead letters keep that subject.
		ctx := context.Background()
		w.waitCount(0, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL")
		ev, err := w.js.Stream(ctx, "IDEM_EVENTS")
		require.NoError(t, err)
		lanes := map[string]int{}
		for _, r := range resultsOf(t, w) {
			if !strings.HasPrefix(r.RunID, "backfill__") {
				continue
			}
			m, err := ev.GetMsg(ctx, r.StreamSeq)
			require.NoError(t, err)
			lanes[m.Subject]++
		}
		require.Equal(t, map[string]int{"idem.backfill.orders": 2, "idem.backfill.strict": 2}, lanes)
		dlq, err := w.js.Stream(ctx, "IDEM_DLQ")
		require.NoError(t, err)
		m, err := dlq.GetLastMsgForSubject(ctx, "idem.dlq.strict")
		require.NoError(t, err)
		require.Equal(t, "idem.backfill.strict", m.Header.Get("Idem-Original-Subject"))
		c, err := w.js.Consumer(ctx, "IDEM_EVENTS", "idem_backfill")
		require.NoError(t, err)
		info, err := c.Info(ctx)
		require.NoError(t, err)
		require.Zero(t, info.NumPending+uint64(info.NumAckPending), "the backfill durable delivered them all")
	})

	t.Run("bad timeout is usage", func(t *testing.T) {
		for _, bad := range []string{"0", "soon", "-1s"} {
			code, _, stderr := rbExec(t, w, []string{"publish", "orders", "2026-11-06", "--wait", "--timeout", bad})
			require.Equal(t, 2, code, "--timeout %s: %s", bad, stderr)
		}
		require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = '2026-11-06'"), "nothing published")
	})

	// One result per outcome on the stream, none for the rolled-back
	// attempt, each naming its event.
	w.waitCount(0, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL")
	rs := resultsOf(t, w)
	byRun := map[string][]string{}
	for _, r := range rs {
		require.NotZero(t, r.StreamSeq)
		require.Equal(t, "IDEM_EVENTS", r.Stream)
		byRun[r.RunID] = append(byRun[r.RunID], r.Status)
	}
	require.Equal(t, []string{"loaded"}, byRun["sched__1"])
	require.Equal(t, []string{"loaded", "skipped"}, byRun["sched__2"])
	require.Equal(t, []string{"dead_lettered"}, byRun["sched__x"])
	require.Equal(t, []string{"rejected"}, byRun["sched__c"])
	require.Equal(t, []string{"loaded"}, byRun["sched__4"])
	require.Equal(t, []string{"loaded"}, byRun["sched__5"], "no result for the attempt that failed and was retried")
	require.Len(t, rs, 11, "one result per outcome: %v", byRun)
}

// TestPublishWaitUnreachable: a results stream that is missing, and NATS
// stopped, are exit 4 with the reason; nothing is published.
func TestPublishWaitUnreachable(t *testing.T) {
	w := newWorld(t, opts{})
	w.streams()
	ctx := context.Background()
	require.NoError(t, w.js.DeleteStream(ctx, "IDEM_RESULTS"))
	o := publishWait(t, w, "orders", "2026-11-01", "--run-id", "r", "--wait", "--timeout", "5s")
	require.Equal(t, 4, o.code, o.stderr)
	require.Contains(t, o.stderr, "IDEM_RESULTS")
	require.Contains(t, o.stderr, "idem streams")
	ev, err := w.js.Stream(ctx, "IDEM_EVENTS")
	require.NoError(t, err)
	info, err := ev.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "an event nobody can follow is not published")

	w.ns.Stop()
	o = publishWait(t, w, "orders", "2026-11-01", "--run-id", "r", "--wait", "--timeout", "5s")
	require.Equal(t, 4, o.code, o.stderr)
	require.Contains(t, o.stderr, "nats")
}

// TestPublishWaitRollingRestart: eight schedulers wait on their events
// while one of the two replicas is killed mid-load (kill -9), the other
// dies between a commit and its ack, and both are restarted in turn. Every
// waiter gets exactly one final answer, the right one, and every run loads
// once.
func TestPublishWaitRollingRestart(t *testing.T) {
	w := newWorld(t, opts{ackWait: "2s", inFlight: 2})
	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (700)")
	p1 := w.serve("IDEM_TEST_CRASH=after_commit:roll_3")
	p2 := w.serve()
	const n = 8
	outs := make(chan waitOut, n)
	parts := make([]string, n)
	for i := range n {
		parts[i] = time.Date(2026, 11, 10+i, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)
		go func() {
			outs <- publishWait(t, w, "orders", parts[i], "--run-id", "roll_"+strconv.Itoa(i), "--wait", "--timeout", "120s")
		}()
	}
	w.waitSleeping()
	p2.signal(syscall.SIGKILL) // whatever it was loading rolls back
	p2.exit(t, 10*time.Second)
	p2 = w.serve()
	require.Eventually(t, func() bool {
		return w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success' AND run_id <> 'roll_3'") > 0
	}, 60*time.Second, 50*time.Millisecond, "a load after the kill")
	p1.signal(syscall.SIGTERM) // or it already died after roll_3's commit
	p1.exit(t, 30*time.Second)
	p1 = w.serve()
	w.db.Exec(t, "DELETE FROM staging.gate_on")

	seen := map[string]bool{}
	for range n {
		o := <-outs
		require.Equal(t, 0, o.code, o.stderr)
		// roll_3's first delivery committed and died before its ack: its
		// redelivery may be answered first, skipped, with the load's rows.
		require.Contains(t, []any{"loaded", "skipped"}, o.last["status"], o.stderr)
		require.EqualValues(t, 10, o.last["rows"].(map[string]any)["inserted"], o.stderr)
		run := o.last["run_id"].(string)
		require.False(t, seen[run], "one answer per waiter")
		seen[run] = true
		i, _ := strconv.Atoi(strings.TrimPrefix(run, "roll_"))
		require.Equal(t, parts[i], o.last["partition"])
	}
	require.EqualValues(t, n, w.count("SELECT count(DISTINCT run_id) FROM idem.pipeline_audit WHERE run_id LIKE 'roll_%' AND status = 'success'"))
	require.EqualValues(t, n, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id LIKE 'roll_%' AND status = 'success'"), "every run loads once")
	require.Equal(t, w.expected(parts...), w.target())
	w.waitCount(0, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL")
	loaded := map[string]int{}
	for _, r := range resultsOf(t, w) {
		if r.Status == results.StatusLoaded {
			loaded[r.RunID]++
		}
	}
	for i := range n {
		require.Equal(t, 1, loaded["roll_"+strconv.Itoa(i)], "one loaded result per committed load")
	}
	for _, p := range []*proc{p1, p2} {
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 30*time.Second))
	}
}

// TestPublishWaitThroughAWarehouseOutage: the waiting publisher needs no
// warehouse; PostgreSQL stopped while it waits delays the answer, which is
// "loaded" once it is back.
func TestPublishWaitThroughAWarehouseOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := localpg.Start(ctx, localpg.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	w := newWorld(t, opts{ackWait: "2s", pgAdmin: srv.URL("")})
	p := w.serve()
	require.NoError(t, srv.Stop(ctx, "fast"))
	done := make(chan waitOut, 1)
	go func() {
		done <- publishWait(t, w, "orders", "2026-11-07", "--run-id", "through", "--wait", "--timeout", "90s")
	}()
	time.Sleep(5 * time.Second)
	select {
	case o := <-done:
		t.Fatalf("answered during the outage: %d %v\n%s", o.code, o.last, o.stderr)
	default:
	}
	require.NoError(t, srv.Restart(ctx, ""))
	o := <-done
	require.Equal(t, 0, o.code, o.stderr)
	require.Equal(t, "loaded", o.last["status"])
	require.Empty(t, w.deadLetters())
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second))
}
