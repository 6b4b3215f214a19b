package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/testkit/natstest"
)

func TestSuccessAcksOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var got calls
	e.start(func(ctx context.Context, m *Message) error {
		got.add(m)
		zerolog.Ctx(ctx).Info().Msg("handler line")
		return nil
	})
	seq := e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)

	info := e.settled(seq)
	require.Equal(t, uint64(1), info.Delivered.Consumer, "the server delivered it once")
	require.Equal(t, 1, got.count())
	msgs, _ := got.snapshot()
	m := msgs[0]
	require.Equal(t, "orders", m.Dataset)
	require.Equal(t, "2026-11-28", m.Event.Key.Key)
	require.Equal(t, "r1", m.Event.RunID)
	require.Equal(t, 1, m.NumDelivered)
	require.Equal(t, seq, m.StreamSeq)
	require.Equal(t, testStream, m.Stream)
	e.hook.waitEvent(t, "orders/acked", 1)
	require.Zero(t, e.streamMsgs(testDLQ))

	// Every log line about the message carries the keys of docs/SPEC.md, the handler's
	// own lines included (its logger comes from the context).
	var about int
	for _, l := range e.logs.lines(t) {
		if _, ok := l["stream_seq"]; !ok {
			continue
		}
		about++
		for _, k := range []string{"dataset", "partition", "run_id", "delivery"} {
			require.Contains(t, l, k, "log line %v", l)
		}
	}
	require.GreaterOrEqual(t, about, 2)
}

func TestFatalErrorDeadLettersAfterOneDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var got calls
	e.start(func(_ context.Context, m *Message) error {
		got.add(m)
		return &fatalError{"undefined_object: relation \"analytics.fact_orders\" does not exist\nSQLSTATE 42P01"}
	})
	body := event("orders", "2026-11-28", "scheduled__2026-11-28")
	hdr := nats.Header{"X-Trace": {"t1", "t2"}, "Nats-Msg-Id": {"orders:2026-11-28:scheduled__2026-11-28"}}
	before := time.Now().Add(-time.Second)
	seq := e.publish("idem.ready.orders", body, hdr)

	dl := e.deadLetters(1)[0]
	info := e.settled(seq)
	require.Equal(t, uint64(1), info.Delivered.Consumer, "one delivery only")
	require.Equal(t, 1, got.count())

	require.Equal(t, "idem.dlq.orders", dl.Subject)
	require.Equal(t, body, dl.Data, "body byte-identical")
	h := dl.Header
	require.Equal(t, []string{"t1", "t2"}, h.Values("X-Trace"))
	require.Equal(t, "orders:2026-11-28:scheduled__2026-11-28", h.Get("Idem-Original-Nats-Msg-Id"))
	require.Equal(t, deadletter.MsgID(testStream, seq), h.Get("Nats-Msg-Id"))
	require.Equal(t, `undefined_object: relation "analytics.fact_orders" does not exist SQLSTATE 42P01`, h.Get(deadletter.HeaderError))
	require.Equal(t, "fatal", h.Get(deadletter.HeaderErrorKind))
	require.Equal(t, "idem.ready.orders", h.Get(deadletter.HeaderOriginalSubject))
	require.Equal(t, testStream, h.Get(deadletter.HeaderOriginalStream))
	require.Equal(t, "1", h.Get(deadletter.HeaderOriginalSeq))
	require.Equal(t, "1", h.Get(deadletter.HeaderDeliveries))
	require.Equal(t, "orders", h.Get(deadletter.HeaderDataset))
	require.Equal(t, "2026-11-28", h.Get(deadletter.HeaderPartition))
	require.Equal(t, "scheduled__2026-11-28", h.Get(deadletter.HeaderRunID))
	failedAt, err := time.Parse(time.RFC3339, h.Get(deadletter.HeaderFailedAt))
	require.NoError(t, err)
	require.WithinRange(t, failedAt, before, time.Now().Add(time.Second))
	e.hook.waitDeadLetter(t, "orders/fatal", 1)
	e.hook.waitEvent(t, "orders/dead_lettered", 1)
}

func TestTransientRetriesAfterBackoffThenExhausted(t *testing.T) {
	t.Parallel()
	const delay = 150 * time.Millisecond
	e := newEnv(t, func(c *Config) {
		c.Datasets["orders"] = Dataset{Retry: Retry{MaxAttempts: 3, Delay: delay, MaxDelay: time.Second}}
	})
	var got calls
	e.start(func(_ context.Context, m *Message) error {
		got.add(m)
		if m.Dataset == "customers" && m.NumDelivered == 2 {
			return nil // recovers on its second delivery
		}
		return errors.New("connection reset by peer")
	})
	seq := e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)

	dl := e.deadLetters(1)[0]
	e.settled(seq)
	require.Equal(t, "exhausted", dl.Header.Get(deadletter.HeaderErrorKind))
	require.Equal(t, "3", dl.Header.Get(deadletter.HeaderDeliveries))
	require.Equal(t, "connection reset by peer", dl.Header.Get(deadletter.HeaderError))
	msgs, at := got.snapshot()
	require.Len(t, msgs, 3)
	for i, m := range msgs {
		require.Equal(t, i+1, m.NumDelivered)
	}
	// Rand is 0: the delays are exactly Delay, then 2·Delay.
	require.GreaterOrEqual(t, at[1].Sub(at[0]), delay)
	require.GreaterOrEqual(t, at[2].Sub(at[1]), 2*delay)
	e.hook.waitEvent(t, "orders/retried", 2)
	e.hook.waitDeadLetter(t, "orders/exhausted", 1)

	// A transient failure that goes away: acked on the retry, no dead letter.
	seq = e.publish("idem.ready.customers", event("customers", "2026-11-28", "r1"), nil)
	e.settled(seq)
	require.Equal(t, uint64(1), e.streamMsgs(testDLQ))
	e.hook.waitEvent(t, "customers/acked", 1)
	e.hook.waitEvent(t, "customers/retried", 1)
}

func TestHeartbeatsKeepALongHandlerOwned(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	e := newEnv(t, func(c *Config) { c.AckWait = ackWait })
	var got calls
	e.start(func(ctx context.Context, m *Message) error {
		got.add(m)
		select { // a load three times longer than the ack wait
		case <-time.After(3 * ackWait):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	seq := e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)
	info := e.settled(seq)
	require.Equal(t, 1, got.count(), "delivered exactly once")
	require.Equal(t, uint64(1), info.Delivered.Consumer, "never redelivered")
	require.GreaterOrEqual(t, e.hook.heartbeatCount(), 6, "InProgress every AckWait/3")
	e.hook.waitEvent(t, "orders/acked", 1)
}

func TestInvalidMessagesSkipTheHandler(t *testing.T) {
	t.Parallel()
	// Each is dead-lettered at its first delivery: an ack wait no loaded
	// machine outlasts keeps a fetched message from being redelivered
	// before its turn comes.
	e := newEnv(t, func(c *Config) { c.AckWait = 10 * time.Second })
	var got calls
	e.start(func(_ context.Context, m *Message) error { got.add(m); return nil })

	e.publish("idem.ready.orders", []byte(`{"dataset":"orders","partition":"2026-11-28"`), nil) // truncated JSON
	e.publish("idem.ready.nope", event("nope", "2026-11-28", "r1"), nil)                        // not configured
	e.publish("idem.ready.Bad-Name", []byte("\xff\xfe"), nil)                                   // no dataset at all
	last := e.publish("idem.ready.orders", event("customers", "2026-11-28", "r1"), nil)         // body for another subject

	dls := e.deadLetters(4)
	e.settled(last)
	require.Zero(t, got.count(), "the handler never sees an invalid message")
	bySeq := map[string]string{}
	bodies := map[string][]byte{}
	for _, dl := range dls {
		bodies[dl.Header.Get(deadletter.HeaderOriginalSeq)] = dl.Data
		require.Equal(t, "fatal", dl.Header.Get(deadletter.HeaderErrorKind))
		require.Contains(t, dl.Header.Get(deadletter.HeaderError), "invalid event")
		require.Equal(t, "1", dl.Header.Get(deadletter.HeaderDeliveries))
		require.Empty(t, dl.Header.Get(deadletter.HeaderPartition))
		bySeq[dl.Header.Get(deadletter.HeaderOriginalSeq)] = dl.Subject
	}
	require.Equal(t, map[string]string{
		"1": "idem.dlq.orders", // a configured dataset with a bad body
		"2": "idem.dlq._invalid",
		"3": "idem.dlq._invalid",
		"4": "idem.dlq.orders",
	}, bySeq)
	require.Equal(t, []byte("\xff\xfe"), bodies["3"], "bytes kept, even invalid UTF-8")
	for _, dl := range dls {
		if dl.Header.Get(deadletter.HeaderOriginalSeq) == "2" {
			require.Equal(t, "nope", dl.Header.Get(deadletter.HeaderDataset), "a valid but unconfigured name is still told")
		}
	}
	e.hook.waitDeadLetter(t, "_invalid/fatal", 2)
	e.hook.waitDeadLetter(t, "orders/fatal", 2)
}

func TestRepeatedHeaderKeysCrashNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var got calls
	e.start(func(_ context.Context, m *Message) error {
		got.add(m)
		if m.Dataset == "customers" {
			return &fatalError{"fatal"}
		}
		return nil
	})
	hdr := nats.Header{"X-Tag": {"one", "two", "three"}, "Idem-Run-Id": {"x", "y"}}
	e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), hdr)
	last := e.publish("idem.ready.customers", event("customers", "2026-11-28", "r1"), hdr)

	dl := e.deadLetters(1)[0]
	e.settled(last)
	msgs, _ := got.snapshot()
	require.Len(t, msgs, 2)
	for _, m := range msgs {
		require.Equal(t, []string{"one", "two", "three"}, m.Headers.Values("X-Tag"), "the handler sees every value")
	}
	require.Equal(t, []string{"one", "two", "three"}, dl.Header.Values("X-Tag"))
	require.Equal(t, []string{"r1"}, dl.Header.Values(deadletter.HeaderRunID), "ours, not a forged one")
	require.Equal(t, []string{"x", "y"}, dl.Header.Values("Idem-Original-Idem-Run-Id"), "the publisher's kept, renamed")
	e.hook.waitEvent(t, "orders/acked", 1)
}

func TestConcurrencyLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.AckWait = time.Second // waiting for a turn takes longer: heartbeats must cover it
		c.MaxInFlight = 3
		c.Datasets["orders"] = Dataset{MaxConcurrency: 1, Retry: Retry{MaxAttempts: 1, Delay: time.Millisecond, MaxDelay: time.Millisecond}}
	})
	var mu sync.Mutex
	running := map[string]int{}
	peak := map[string]int{}
	var got calls
	e.start(func(ctx context.Context, m *Message) error {
		got.add(m)
		mu.Lock()
		running[m.Dataset]++
		running["all"]++
		for _, k := range []string{m.Dataset, "all"} {
			peak[k] = max(peak[k], running[k])
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			running[m.Dataset]--
			running["all"]--
			mu.Unlock()
		}()
		select { // work
		case <-time.After(400 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	var last uint64
	for i := range 5 {
		last = e.publish("idem.ready.orders", event("orders", "2026-11-0"+string(rune('1'+i)), "r1"), nil)
		e.publish("idem.ready.customers", event("customers", "2026-11-0"+string(rune('1'+i)), "r1"), nil)
	}
	last++
	info := e.settled(last)
	require.Equal(t, 10, got.count(), "each message handled once")
	// A message beyond the dataset's queue is deferred (nak'ed, by design);
	// every other delivery is a message's first: waiting for a turn, its
	// heartbeats kept it owned past the ack wait.
	deferred := e.hook.event("orders/" + string(OutcomeDeferred))
	require.Equal(t, uint64(10+deferred), info.Delivered.Consumer, "waiting messages stayed owned: no redelivery but deferrals")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, peak["orders"], "max_concurrency")
	require.LessOrEqual(t, peak["all"], 3, "max_in_flight")
	require.GreaterOrEqual(t, peak["all"], 2, "datasets ran side by side")
	e.hook.mu.Lock()
	require.LessOrEqual(t, e.hook.maxInFlight, 3, "never more held than max_in_flight")
	e.hook.mu.Unlock()
}

func TestDatasetAtItsLimitDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.MaxInFlight = 4
		c.Datasets["orders"] = Dataset{MaxConcurrency: 1, Retry: Retry{MaxAttempts: 3, Delay: time.Millisecond, MaxDelay: time.Millisecond}}
	})
	release := make(chan struct{})
	var customers atomic.Int32
	var orders calls
	e.start(func(ctx context.Context, m *Message) error {
		if m.Dataset == "customers" {
			customers.Add(1)
			return nil
		}
		orders.add(m)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	e.publish("idem.ready.orders", event("orders", "2026-11-01", "r1"), nil)
	e.publish("idem.ready.orders", event("orders", "2026-11-02", "r1"), nil)
	last := e.publish("idem.ready.customers", event("customers", "2026-11-01", "r1"), nil)
	require.Eventually(t, func() bool { return customers.Load() == 1 && orders.count() == 1 }, waitFor, tick,
		"customers runs while orders holds its only turn and a second order waits")
	require.Never(t, func() bool { return orders.count() != 1 }, 200*time.Millisecond, tick,
		"the second order waits for its turn")
	close(release)
	e.settled(last)
	require.Equal(t, 2, orders.count())
}

func TestShutdownNaksAndTheNextConsumerGetsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	started := make(chan struct{})
	var cause atomic.Value
	_, stop := e.start(func(ctx context.Context, m *Message) error {
		close(started)
		<-ctx.Done() // a load that outlives the grace period
		cause.Store(context.Cause(ctx))
		return ctx.Err()
	})
	seq := e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)
	<-started
	require.NoError(t, stop(100*time.Millisecond), "Run returns nil after a stop")
	require.ErrorIs(t, cause.Load().(error), ErrShutdown, "the handler learns why")
	e.hook.waitEvent(t, "orders/interrupted", 1)

	var next calls
	e.start(func(_ context.Context, m *Message) error { next.add(m); return nil })
	info := e.settled(seq)
	msgs, _ := next.snapshot()
	require.Len(t, msgs, 1)
	require.Equal(t, 2, msgs[0].NumDelivered, "redelivered to the next consumer")
	require.Equal(t, uint64(2), info.Delivered.Consumer, "two deliveries in all")
	require.Zero(t, e.streamMsgs(testDLQ), "a shutdown is not a failure")
}

func TestShutdownLetsInFlightHandlersFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	started := make(chan struct{})
	c, err := New(e.js, e.cfg, func(ctx context.Context, m *Message) error {
		close(started)
		select { // finishes well inside the grace period
		case <-time.After(300 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	seq := e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)
	<-started
	cancel(errors.New("SIGTERM")) // context cancellation is a stop with ShutdownGrace
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("Run did not return")
	}
	info := e.settled(seq)
	require.Equal(t, uint64(1), info.Delivered.Consumer)
	require.Equal(t, 1, e.hook.event("orders/acked"), "finished and acked during the grace period")
}

func TestPanicIsRetriedThenDeadLetteredAsCrashed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.Datasets["orders"] = Dataset{Retry: Retry{MaxAttempts: 2, Delay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond}}
	})
	var got calls
	e.start(func(_ context.Context, m *Message) error {
		got.add(m)
		var empty []byte
		_ = empty[len(m.Data)] // a real runtime panic: index out of range
		return nil
	})
	seq := e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)
	dl := e.deadLetters(1)[0]
	e.settled(seq)
	require.Equal(t, 2, got.count())
	require.Equal(t, "crashed", dl.Header.Get(deadletter.HeaderErrorKind))
	require.Contains(t, dl.Header.Get(deadletter.HeaderError), "handler panicked: runtime error: index out of range")
	require.Equal(t, uint64(1), e.streamMsgs(testDLQ), "exactly once")
	require.Contains(t, e.logs.String(), "goroutine", "the stack is logged")
}

func TestDeadLetterPublishFailureKeepsTheMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.Datasets["orders"] = Dataset{Retry: Retry{MaxAttempts: 50, Delay: 50 * time.Millisecond, MaxDelay: 100 * time.Millisecond}}
	})
	require.NoError(t, e.js.DeleteStream(context.Background(), testDLQ))
	var got calls
	e.start(func(_ context.Context, m *Message) error { got.add(m); return &fatalError{"fatal"} })
	seq := e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)

	require.Eventually(t, func() bool { return got.count() >= 2 && e.hook.event("orders/dead_letter_failed") >= 1 },
		waitFor, tick, "nak'ed, not terminated: redelivered")
	require.Equal(t, uint64(1), e.streamMsgs(testStream), "still in the events stream")
	info := e.consumerInfo()
	require.Less(t, info.AckFloor.Stream, seq, "still pending")

	// The dead-letter stream comes back: the next delivery lands there.
	require.NoError(t, EnsureStreams(context.Background(), e.js, e.cfg.Streams()))
	dl := e.deadLetters(1)[0]
	e.settled(seq)
	require.Equal(t, "fatal", dl.Header.Get(deadletter.HeaderErrorKind))
	require.True(t, strings.HasPrefix(dl.Subject, "idem.dlq."))
}

func TestConsumerSurvivesAServerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var got calls
	e.start(func(_ context.Context, m *Message) error { got.add(m); return nil })
	e.settled(e.publish("idem.ready.orders", event("orders", "2026-11-01", "r1"), nil))

	e.srv = natstest.Restart(t, e.srv)
	var seq uint64
	require.Eventually(t, func() bool { // the test's own client reconnects too
		ack, err := e.js.Publish(context.Background(), "idem.ready.orders", event("orders", "2026-11-02", "r1"))
		if err == nil {
			seq = ack.Sequence
		}
		return err == nil
	}, waitFor, 100*time.Millisecond)
	e.settled(seq)
	require.Equal(t, 2, got.count())
	require.Contains(t, e.logs.String(), "nats: disconnected")
	require.Contains(t, e.logs.String(), "nats: reconnected")
}

func TestDatasetBacklogDoesNotHoardTheSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.MaxInFlight = 4
		// One attempt: a deferral counted against it would dead-letter.
		c.Datasets["orders"] = Dataset{MaxConcurrency: 1, Retry: Retry{MaxAttempts: 1, Delay: time.Millisecond, MaxDelay: time.Millisecond}}
	})
	release := make(chan struct{})
	var customers atomic.Int32
	var orders calls
	e.start(func(ctx context.Context, m *Message) error {
		if m.Dataset == "customers" {
			customers.Add(1)
			return nil
		}
		orders.add(m)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	for i := range 8 {
		e.publish("idem.ready.orders", event("orders", fmt.Sprintf("2026-11-%02d", i+1), "r1"), nil)
	}
	e.publish("idem.ready.customers", event("customers", "2026-11-01", "r1"), nil)
	last := e.publish("idem.ready.customers", event("customers", "2026-11-02", "r1"), nil)
	// Eight orders ahead of them in the stream, one running: the customers
	// still find free slots, because at most half the slots wait for a turn.
	require.Eventually(t, func() bool { return customers.Load() == 2 }, waitFor, tick,
		"customers run while orders' backlog waits in the stream, not in this process's slots")
	require.Equal(t, 1, orders.count())
	require.LessOrEqual(t, e.hook.held(), 3, "one order running, at most half the slots waiting for its turn")
	close(release)
	e.settled(last)
	msgs, _ := orders.snapshot()
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Event.Key.Key]++
	}
	require.Len(t, seen, 8)
	for p, n := range seen {
		require.Equal(t, 1, n, "partition %s loaded once", p)
	}
	require.Zero(t, e.streamMsgs(testDLQ), "deferrals are not attempts")
	require.Positive(t, e.hook.event("orders/deferred"))
}
