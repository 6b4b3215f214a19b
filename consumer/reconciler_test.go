package consumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
)

// crash takes the next message like a process that dies before acking it:
// fetched, never acked, so JetStream redelivers it after AckWait.
func (e *env) crash(wantDelivery uint64) { e.crashOn(e.cfg.Consumer, wantDelivery) }

// crashOn is crash on the durable named.
func (e *env) crashOn(durable string, wantDelivery uint64) {
	e.t.Helper()
	cons, err := e.js.Consumer(context.Background(), testStream, durable)
	require.NoError(e.t, err)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(3*e.cfg.AckWait))
	require.NoError(e.t, err)
	var got jetstream.Msg
	for m := range batch.Messages() {
		got = m
	}
	require.NotNil(e.t, got, "delivery %d", wantDelivery)
	meta, err := got.Metadata()
	require.NoError(e.t, err)
	require.Equal(e.t, wantDelivery, meta.NumDelivered)
}

// The backfill durable's max-deliveries advisory reaches the reconciler
// too, and the dead letter keeps the backfill subject, where a replay
// republishes it.
func TestCrashedBackfillIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.AckWait = time.Second
		c.MaxDeliver = 2
		c.Datasets = map[string]Dataset{"orders": {Retry: Retry{MaxAttempts: 2, Delay: time.Millisecond, MaxDelay: time.Millisecond}}}
	})
	e.reconciler()
	seq := e.publish("idem.backfill.orders", event("orders", "2026-11-28", "backfill__1"), nil)
	e.crashOn("idem_backfill", 1)
	e.crashOn("idem_backfill", 2)
	e.start(func(context.Context, *Message) error { return nil })
	dl := e.deadLetters(1)[0]
	require.Equal(t, "idem.dlq.orders", dl.Subject)
	require.Equal(t, "crashed", dl.Header.Get(deadletter.HeaderErrorKind))
	require.Equal(t, "idem.backfill.orders", dl.Header.Get(deadletter.HeaderOriginalSubject))
	require.Equal(t, fmt.Sprint(seq), dl.Header.Get(deadletter.HeaderOriginalSeq))
}

func TestCrashedProcessIsDeadLetteredOnceByTwoReconcilers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.AckWait = time.Second
		c.MaxDeliver = 2 // JetStream's backstop, reached here by two deaths
		c.Datasets["orders"] = Dataset{Retry: Retry{MaxAttempts: 2, Delay: time.Millisecond, MaxDelay: time.Millisecond}}
		c.Datasets["customers"] = Dataset{Retry: Retry{MaxAttempts: 2, Delay: time.Millisecond, MaxDelay: time.Millisecond}}
	})
	e.reconciler()
	e.reconciler()
	body := event("orders", "2026-11-28", "r1")
	seq := e.publish("idem.ready.orders", body, nil)
	e.crash(1)
	e.crash(2) // the last delivery JetStream allows

	// The restarted process. JetStream raises the advisory when the last
	// delivery's ack wait expires while some client has a pull waiting
	// (nats-server 2.15.2 raises none while no one pulls), and serving
	// replicas always have one.
	var got calls
	e.start(func(_ context.Context, m *Message) error { got.add(m); return nil })
	dl := e.deadLetters(1)[0]
	require.Equal(t, "idem.dlq.orders", dl.Subject)
	require.Equal(t, body, dl.Data)
	require.Equal(t, "crashed", dl.Header.Get(deadletter.HeaderErrorKind))
	require.Equal(t, "2", dl.Header.Get(deadletter.HeaderDeliveries))
	require.Equal(t, fmt.Sprint(seq), dl.Header.Get(deadletter.HeaderOriginalSeq))
	require.Equal(t, "2026-11-28", dl.Header.Get(deadletter.HeaderPartition))
	require.Equal(t, "r1", dl.Header.Get(deadletter.HeaderRunID))
	require.Contains(t, dl.Header.Get(deadletter.HeaderError), "after 2 deliveries")

	// The same advisory again, twice at once, one per reconciler (an ack
	// lost after the dead letter was stored looks like this): JetStream
	// drops the copies by their Nats-Msg-Id.
	adv := fmt.Sprintf(`{"type":%q,"stream":%q,"consumer":%q,"stream_seq":%d,"deliveries":2}`,
		maxDeliverAdvisoryType, testStream, e.cfg.Consumer, seq)
	for range 2 {
		_, err := e.js.Publish(context.Background(), MaxDeliveriesSubject(testStream, e.cfg.Consumer), []byte(adv))
		require.NoError(t, err)
	}
	advisories := e.cfg.WithDefaults().AdvisoryStream
	require.Eventually(t, func() bool { return e.streamMsgs(advisories) == 0 }, waitFor, tick, "every advisory handled and acked")
	require.Equal(t, uint64(1), e.streamMsgs(testDLQ), "dead-lettered exactly once")
	require.Eventually(t, func() bool { return e.hook.deadLetter("orders/crashed") == 1 }, waitFor, tick)
	require.Equal(t, uint64(1), e.streamMsgs(testStream), "the original stays in the stream (limits retention)")
	require.Equal(t, 1, e.hook.deadLetter("orders/crashed"), "counted once")

	// The poison message is out of the way: the others are served.
	next := e.publish("idem.ready.customers", event("customers", "2026-11-28", "r1"), nil)
	e.settled(next)
	msgs, _ := got.snapshot()
	require.Len(t, msgs, 1)
	require.Equal(t, "customers", msgs[0].Dataset, "the crashed message is never run again")
}

func TestDeliveriesThatRanNoLoadDoNotSpendTheBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.AckWait = time.Second
		c.Datasets["orders"] = Dataset{Retry: Retry{MaxAttempts: 1, Delay: time.Millisecond, MaxDelay: time.Millisecond}}
	})
	seq := e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)
	e.crash(1) // a delivery that dies before any load: no attempt
	e.crash(2)

	var got calls
	e.start(func(_ context.Context, m *Message) error { got.add(m); return nil })
	e.settled(seq)
	require.Equal(t, 1, got.count(), "run on its third delivery: the budget of one attempt was never spent")
	require.Zero(t, e.streamMsgs(testDLQ))
}

// attemptErr is a transient error of a load that ran, numbered by the
// handler as handlers.AttemptError is.
type attemptErr struct{ n int }

func (e attemptErr) Error() string { return fmt.Sprintf("attempt %d: serialization failure", e.n) }
func (e attemptErr) Attempt() int  { return e.n }

func TestBudgetSpentIsDeadLetteredByKind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var got calls
	e.start(func(_ context.Context, m *Message) error {
		got.add(m)
		switch m.Event.RunID {
		case "died":
			return spent{crashed: true}
		case "failed":
			return spent{}
		}
		// The handler counts attempts itself: 3 is the budget (MaxAttempts 3).
		return attemptErr{n: 3}
	})
	e.publish("idem.ready.orders", event("orders", "2026-11-28", "died"), nil)
	e.publish("idem.ready.orders", event("orders", "2026-11-29", "failed"), nil)
	e.publish("idem.ready.orders", event("orders", "2026-11-30", "last"), nil)
	kinds := map[string]string{}
	for _, dl := range e.deadLetters(3) {
		kinds[dl.Header.Get(deadletter.HeaderRunID)] = dl.Header.Get(deadletter.HeaderErrorKind)
	}
	require.Equal(t, map[string]string{"died": "crashed", "failed": "exhausted", "last": "exhausted"}, kinds)
	require.Equal(t, 3, got.count(), "each delivered once: the handler's count, not the delivery's, ends them")
}
