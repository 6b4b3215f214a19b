package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
)

func TestDuplicateDeliveryLoadsOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	w.serve()
	w.publish("2026-11-02", "r1", nil)
	w.publish("2026-11-02", "r1", nil) // no Nats-Msg-Id: JetStream stores both
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'skipped'")
	w.waitSettled()
	require.Equal(t, w.expected("2026-11-02"), w.target())
	require.Empty(t, w.deadLetters())
}

func TestTransientFailureIsRetriedAndSucceeds(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{retries: 5, timeout: "300ms"})
	w.serve()
	// Another session holds the target past the statement timeout, then lets go.
	ctx := context.Background()
	tx, err := w.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE analytics.t IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	w.publish("2026-11-03", "r1", nil)
	w.waitCount(1, "SELECT least(count(*), 1) FROM idem.pipeline_audit WHERE status = 'failed' AND error_kind = 'transient'")
	require.NoError(t, tx.Rollback(ctx))

	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitSettled()
	require.Equal(t, w.expected("2026-11-03"), w.target())
	require.Empty(t, w.deadLetters(), "a transient failure reached the DLQ")
	// Each attempt is audited with its delivery number.
	require.GreaterOrEqual(t, w.count("SELECT max(attempt) FROM idem.pipeline_audit"), int64(2))
	require.Contains(t, w.db.Checksum(t, "SELECT error FROM idem.pipeline_audit WHERE status = 'failed' LIMIT 1"), ":1")
}

func TestFatalErrorGoesToDLQAfterOneDelivery(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{retries: 3})
	w.serve()
	hdr := nats.Header{}
	hdr.Add("X-Trace", "abc")
	hdr.Add("X-Trace", "def") // a repeated key, kept whole
	seq := w.publish("2030-01-01", "no-rows", hdr)
	dl := w.waitDeadLetters(1)[0]
	w.waitSettled()

	require.Equal(t, "idem.dlq.orders", dl.Subject)
	require.JSONEq(t, `{"dataset":"orders","partition":"2030-01-01","run_id":"no-rows"}`, string(dl.Data))
	h := dl.Header
	require.Equal(t, "fatal", h.Get(deadletter.HeaderErrorKind))
	require.Contains(t, h.Get(deadletter.HeaderError), "empty_source")
	require.Equal(t, "idem.ready.orders", h.Get(deadletter.HeaderOriginalSubject))
	require.Equal(t, fmt.Sprint(seq), h.Get(deadletter.HeaderOriginalSeq))
	require.Equal(t, "1", h.Get(deadletter.HeaderDeliveries))
	require.Equal(t, "orders", h.Get(deadletter.HeaderDataset))
	require.Equal(t, "2030-01-01", h.Get(deadletter.HeaderPartition))
	require.Equal(t, "no-rows", h.Get(deadletter.HeaderRunID))
	_, err := time.Parse(time.RFC3339, h.Get(deadletter.HeaderFailedAt))
	require.NoError(t, err)
	require.Equal(t, []string{"abc", "def"}, h.Values("X-Trace"))
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit"), "one delivery, one attempt")
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'failed' AND error_kind = 'fatal'"))
}

func TestTransientOnLastAttemptIsExhausted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{retries: 1, timeout: "200ms"})
	w.serve()
	ctx := context.Background()
	tx, err := w.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE analytics.t IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	w.publish("2026-11-04", "r1", nil)
	dl := w.waitDeadLetters(1)[0]
	require.Equal(t, "exhausted", dl.Header.Get(deadletter.HeaderErrorKind))
	require.Equal(t, "2", dl.Header.Get(deadletter.HeaderDeliveries))
	// Exactly retries+1 attempts ran, numbered 1 and 2.
	require.EqualValues(t, 2, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'failed' AND error_kind = 'transient'"))
	require.EqualValues(t, 2, w.count("SELECT count(*) FROM idem.pipeline_audit"))
	require.EqualValues(t, 2, w.count("SELECT max(attempt) FROM idem.pipeline_audit"))
	w.waitSettled()
}

func TestKilledMidLoadCompletesOnceAfterRestart(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (60000)")
	p := w.serve()
	w.publish("2026-11-05", "r1", nil)
	w.waitSleeping()
	p.signal(syscall.SIGKILL)
	p.exit(t, 10*time.Second)
	// The server notices the dead client (client_connection_check_interval)
	// and rolls its transaction back.
	w.waitCount(0, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'")
	w.db.Exec(t, "DELETE FROM staging.gate_on")

	w.serve()
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitSettled()
	require.Equal(t, w.expected("2026-11-05"), w.target())
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'started'"), "the killed attempt stays visible as started")
	require.EqualValues(t, 2, w.count("SELECT max(attempt) FROM idem.pipeline_audit"))
	require.Empty(t, w.deadLetters())
}

func TestLongLoadIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{ackWait: "2s"})
	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (6500)") // over 3x the ack wait
	w.serve()
	w.publish("2026-11-06", "r1", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitSettled()
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit"), "a second delivery ran while the first was loading")
	require.EqualValues(t, 1, w.count("SELECT max(attempt) FROM idem.pipeline_audit"))
}

func TestCrashLoopEndsInDLQAsCrashed(t *testing.T) {
	t.Parallel()
	// One message at a time: a crash kills only what the process holds, and
	// with more in flight the others would lose a delivery with it.
	w := newWorld(t, opts{ackWait: "1s", retries: 2, inFlight: 1})
	crash := "IDEM_TEST_CRASH=before_load:poison"
	w.streams()
	w.publish("2026-11-07", "poison", nil)
	w.publish("2026-11-08", "fine", nil)

	// A supervisor restarts idem whenever it dies, as systemd or Kubernetes would.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restarts := 0
	procs := make(chan *proc, 1)
	go func() {
		for ctx.Err() == nil {
			p := w.serve(crash)
			procs <- p
			select {
			case <-p.done:
				p.done <- nil
				restarts++
			case <-ctx.Done():
			}
			<-procs
		}
	}()
	dl := w.waitDeadLetters(1)
	require.Equal(t, "crashed", dl[0].Header.Get(deadletter.HeaderErrorKind))
	require.Equal(t, "poison", dl[0].Header.Get(deadletter.HeaderRunID))
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'fine' AND status = 'success'")
	w.waitSettled()
	// Exactly one copy, after exactly retries+1 attempts that died: each
	// left its `started` row, and the delivery after the last ran nothing.
	require.Len(t, w.deadLetters(), 1)
	require.Contains(t, dl[0].Header.Get(deadletter.HeaderError), "3 attempts ran and the last one never finished")
	require.EqualValues(t, 3, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'poison' AND status = 'started'"))
	require.EqualValues(t, 3, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'poison'"))
	require.EqualValues(t, 3, w.count("SELECT max(attempt) FROM idem.pipeline_audit WHERE run_id = 'poison'"))
	cancel()
}

func TestPlainPublishAndRepeatedHeaders(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	w.serve()
	// `nats pub` without --jetstream: a core publish, no headers, no ack.
	require.NoError(t, w.nc.Publish("idem.ready.orders", []byte(`{"dataset":"orders","partition":"2026-11-09","run_id":"plain"}`)))
	msg := nats.NewMsg("idem.ready.orders")
	msg.Data = []byte(`{"dataset":"orders","partition":"2026-11-10","run_id":"headers"}`)
	msg.Header["X-Dup"] = []string{"1", "2", "3"}
	require.NoError(t, w.nc.PublishMsg(msg))
	require.NoError(t, w.nc.Flush())
	w.waitCount(2, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitSettled()
	require.Equal(t, w.expected("2026-11-09", "2026-11-10"), w.target())
}

func TestTwoReplicasShareTheWork(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{inFlight: 2})
	a, b := w.serve(), w.serve()
	// Both pull before the first event: a replica still starting on a busy
	// machine would otherwise find the work done.
	require.Eventually(t, func() bool {
		return strings.Contains(a.output(), `"message":"consuming"`) && strings.Contains(b.output(), `"message":"consuming"`)
	}, 30*time.Second, 20*time.Millisecond)
	var parts []string
	for d := 10; d < 30; d++ {
		p := fmt.Sprintf("2026-11-%02d", d+1)
		parts = append(parts, p)
		w.publish(p, "r1", nil)
		w.publish(p, "r1", nil) // every event twice
	}
	w.waitCount(20, "SELECT count(*) FROM idem.run_ledger")
	w.waitCount(20, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'skipped'")
	w.waitSettled()
	require.EqualValues(t, 20, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'"))
	require.Equal(t, w.expected(parts...), w.target())
	// Each replica settled deliveries of the one consumer: a load, or a
	// copy the other's load made a duplicate (which of the two a replica
	// gets is the machine's timing).
	require.Greater(t, strings.Count(a.output(), `"message":"acked"`), 0, "replica a settled nothing")
	require.Greater(t, strings.Count(b.output(), `"message":"acked"`), 0, "replica b settled nothing")
	// A delivery's line is written once its ack is confirmed, after the
	// consumer's ack floor has moved.
	require.Eventually(t, func() bool { return strings.Count(a.output()+b.output(), `"message":"acked"`) >= 40 },
		10*time.Second, 20*time.Millisecond, "every delivery settled")
}

func TestSIGTERMLetsTheLoadFinishAndExitsZero(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (1500)")
	p := w.serve()
	w.publish("2026-11-11", "r1", nil)
	w.waitSleeping()
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second), p.output())
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'"))
	a, n := w.pending()
	require.Zero(t, a+int(n), "the finished load was not acknowledged")
	require.Contains(t, p.output(), "stopped cleanly")
}
