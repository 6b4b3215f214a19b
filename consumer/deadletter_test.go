package consumer

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
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
