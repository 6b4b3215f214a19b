package schemas

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewMessage(t *testing.T) {
	m, err := NewMessage("idem.ready", PartitionReady{Dataset: "hourly", Partition: "2026-11-28T13", RunID: "r1"}, testLookup, time.Time{})
	require.NoError(t, err)
	require.Equal(t, "idem.ready.hourly", m.Subject)
	require.Equal(t, `{"dataset":"hourly","partition":"2026-11-28T13:00:00Z","run_id":"r1"}`, string(m.Body), "the canonical partition")
	require.Equal(t, "hourly:2026-11-28T13:00:00Z:r1", m.MsgID)
	require.Equal(t, "2026-11-28T13:00:00Z", m.Event.Partition)
	got, err := Decode(m.Subject, m.Body, testLookup)
	require.NoError(t, err)
	require.Equal(t, m.Event, got.PartitionReady)

	at := time.Unix(0, 1_700_000_000_000_000_000)
	m, err = NewMessage("idem.ready", PartitionReady{Dataset: "orders", Partition: "2026-11-28", RunID: "r1", Force: true}, testLookup, at)
	require.NoError(t, err)
	require.Equal(t, "orders:2026-11-28:r1:force:"+strconv.FormatInt(at.UnixNano(), 36), m.MsgID, "a rerun is never a duplicate")

	for _, ev := range []PartitionReady{
		{Dataset: "orders", Partition: "2026-02-30", RunID: "r1"},
		{Dataset: "nope", Partition: "2026-02-01", RunID: "r1"},
		{Dataset: "orders", Partition: "2026-02-01", RunID: "bad\x01id"},
	} {
		_, err := NewMessage("idem.ready", ev, testLookup, time.Time{})
		var invalid *InvalidEventError
		require.True(t, errors.As(err, &invalid), "%+v: %v", ev, err)
	}
}

func TestNewTriggeredMessage(t *testing.T) {
	ev := PartitionReady{Dataset: "daily", Partition: "2026-11-01", RunID: "r1", Attributes: map[string]string{"triggered_by": "up:2026-11-01:r1"}}
	m, err := NewTriggeredMessage("idem.ready", ev, 42, "")
	require.NoError(t, err)
	require.Equal(t, "idem.ready.daily", m.Subject)
	require.Equal(t, "daily:2026-11-01:r1:42", m.MsgID)
	const token = "0b7e6f4c-3a51-4f7e-9d2a-6c1e2f3a4b5c"
	m, err = NewTriggeredMessage("idem.ready", ev, 42, token)
	require.NoError(t, err)
	require.Equal(t, "daily:2026-11-01:r1:42:"+token, m.MsgID, "the outbox row's token tells apart two attempts with one audit id")
	want, err := ev.Marshal()
	require.NoError(t, err)
	require.Equal(t, want, m.Body)
}

func TestBackfillPrefix(t *testing.T) {
	require.Equal(t, "idem.backfill", BackfillPrefix("idem.ready"))
	require.Equal(t, "acme.idem.backfill", BackfillPrefix("acme.idem.ready"))
	require.Equal(t, "events_backfill", BackfillPrefix("events"))
	m, err := NewMessage(BackfillPrefix("idem.ready"), PartitionReady{Dataset: "orders", Partition: "2026-11-28", RunID: "r1"}, testLookup, time.Time{})
	require.NoError(t, err)
	require.Equal(t, "idem.backfill.orders", m.Subject)
	require.Equal(t, "orders:2026-11-28:r1", m.MsgID, "the lane changes the subject only")
}
