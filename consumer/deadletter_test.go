package consumer

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/embeddednats"
)

// The consumer hands everything it knows of a failed message to the
// envelope; package deadletter tests what the envelope makes of it.
func TestDeadLetterEnvelope(t *testing.T) {
	failedAt := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	err := errors.New("undefined_object: relation \"x\" does not exist")
	dl := deadLetter{
		kind:       KindFatal,
		err:        err,
		subject:    "idem.ready.orders",
		stream:     "IDEM_EVENTS",
		seq:        42,
		deliveries: 3,
		header:     nats.Header{"X-Tag": {"a"}},
		data:       []byte(`{"dataset":"orders"}`),
		dataset:    "orders",
		partition:  "2026-11-28",
		runID:      "r1",
		failedAt:   failedAt,
	}
	require.Equal(t, deadletter.Envelope{
		Kind: deadletter.KindFatal, Err: err, Subject: "idem.ready.orders", Stream: "IDEM_EVENTS", Seq: 42, Deliveries: 3,
		Header: nats.Header{"X-Tag": {"a"}}, Data: []byte(`{"dataset":"orders"}`),
		Dataset: "orders", Partition: "2026-11-28", RunID: "r1", FailedAt: failedAt,
	}, dl.envelope())
	require.Equal(t, `idem: dead-lettered as fatal: undefined_object: relation "x" does not exist`, dl.termReason())

	p := &deadLetterer{prefix: "idem.dlq"}
	require.Equal(t, "idem.dlq.orders", p.subject("orders"))
	require.Equal(t, "idem.dlq._invalid", p.subject(""))
}

// TestSlowDeadLetteredHookKeepsTheMessage: while the DeadLettered hook
// waits (the event's result, for a results stream that is full) past the
// ack wait, the message stays owned: it is dead-lettered once, and the
// hook runs once, not again for a redelivery.
func TestSlowDeadLetteredHookKeepsTheMessage(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	e := newEnv(t, func(c *Config) {
		c.DeadLettered = func(context.Context, deadletter.Envelope, int, *jetstream.PubAck) {
			mu.Lock()
			calls++
			mu.Unlock()
			time.Sleep(3 * c.AckWait)
		}
	})
	e.start(func(context.Context, *Message) error { return nil })
	e.publish("idem.ready.orders", []byte(`{"dataset":`), nil)
	e.deadLetters(1)
	// Past the hook's wait and one more ack wait: a redelivery would have
	// called it again by now.
	time.Sleep(3*e.cfg.AckWait + e.cfg.AckWait + time.Second)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, calls, "the hook ran for a redelivery of a message being dead-lettered")
	require.EqualValues(t, 1, e.consumerInfo().Delivered.Consumer, "the message was delivered again")
}

// A dead letter's Term that does not reach the server (sent while the
// connection is down and not buffered, as one sent while a clustered
// consumer has no leader is dropped with no error) is sent again until the
// server confirms it. Fire-and-forget, the message came back after the ack
// wait, to be dead-lettered a second time, past the dead-letter stream's
// duplicate window when its next verdict came late.
func TestDeadLetterTermIsConfirmed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, func(c *Config) { c.AckWait = time.Second })
	e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)

	nc, err := nats.Connect(e.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cons, err := js.Consumer(ctx, testStream, e.cfg.Consumer)
	require.NoError(t, err)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var m jetstream.Msg
	for got := range batch.Messages() {
		m = got
	}
	require.NotNil(t, m)

	// Down while the Term is sent: the same port and store come back a
	// second later, as a restart brings them.
	again := embeddednats.Options{Port: e.srv.Addr().(*net.TCPAddr).Port, StoreDir: filepath.Dir(e.srv.StoreDir())}
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	done := make(chan error, 1)
	go func() { done <- confirmTerm(ctx, nc, m, "fatal: test", 500*time.Millisecond) }()
	time.Sleep(time.Second)
	restarted, err := embeddednats.Start(again)
	require.NoError(t, err)
	t.Cleanup(restarted.Stop)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(termConfirmFor + 5*time.Second):
		t.Fatal("confirmTerm did not return")
	}

	back, err := cons.Fetch(1, jetstream.FetchMaxWait(3*e.cfg.AckWait))
	require.NoError(t, err)
	for got := range back.Messages() {
		meta, _ := got.Metadata()
		t.Fatalf("the terminated message came back (delivery %d)", meta.NumDelivered)
	}
	info := e.consumerInfo()
	require.Zero(t, info.NumAckPending)
	require.Zero(t, info.NumRedelivered)
}
