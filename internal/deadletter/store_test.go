package deadletter

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/natstest"
)

// world is a real JetStream with an events stream and a dead-letter stream
// (direct gets allowed, so reads see the response headers to strip).
type world struct {
	t      *testing.T
	js     jetstream.JetStream
	store  *Store
	events jetstream.Stream
	dlq    jetstream.Stream
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	js := natstest.JetStream(t, natstest.RunServer(t))
	events, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_EVENTS", Subjects: []string{"idem.ready.>"}})
	require.NoError(t, err)
	dlq, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_DLQ", Subjects: []string{"idem.dlq.>"}, AllowDirect: true})
	require.NoError(t, err)
	s, err := Open(ctx, js, Config{Stream: "IDEM_DLQ", SubjectPrefix: "idem.dlq", EventsStream: "IDEM_EVENTS"})
	require.NoError(t, err)
	return &world{t: t, js: js, store: s, events: events, dlq: dlq}
}

// deadLetter publishes e's dead letter, as the consumer does, and returns its sequence.
func (w *world) deadLetter(e Envelope) uint64 {
	w.t.Helper()
	ack, err := w.js.PublishMsg(context.Background(), e.Msg(Subject("idem.dlq", e.Dataset)), jetstream.WithExpectStream("IDEM_DLQ"))
	require.NoError(w.t, err)
	return ack.Sequence
}

func (w *world) count(s jetstream.Stream) uint64 {
	w.t.Helper()
	info, err := s.Info(context.Background())
	require.NoError(w.t, err)
	return info.State.Msgs
}

func seqs(ls []Letter) []uint64 {
	out := []uint64{}
	for _, l := range ls {
		out = append(out, l.Seq)
	}
	return out
}

func orders(seq uint64, kind Kind, failedAt string) Envelope {
	at, _ := time.Parse(time.RFC3339, failedAt)
	return Envelope{Kind: kind, Err: errors.New("boom"), Subject: "idem.ready.orders", Stream: "IDEM_EVENTS", Seq: seq,
		Deliveries: 1, Data: []byte(`{"dataset":"orders"}`), Dataset: "orders", Partition: "2026-11-28", RunID: "r1", FailedAt: at}
}

func TestOpenMissingStream(t *testing.T) {
	js := natstest.JetStream(t, natstest.RunServer(t))
	_, err := Open(context.Background(), js, Config{Stream: "IDEM_DLQ"})
	require.EqualError(t, err, "dead-letter stream IDEM_DLQ not found: run 'idem streams' (or start 'idem serve'), or check nats.dlq_stream")
}

// What Envelope.Msg writes, Get reads back.
func TestEnvelopeRoundTrip(t *testing.T) {
	w := newWorld(t)
	e := orders(42, KindExhausted, "2026-11-28T09:00:00Z")
	e.Deliveries = 4
	e.Header = nats.Header{"X-Tag": {"a"}, "Idem-Replay-Count": {"2"}}
	seq := w.deadLetter(e)

	l, err := w.store.Get(context.Background(), seq)
	require.NoError(t, err)
	require.Equal(t, Letter{Seq: seq, Subject: "idem.dlq.orders", StoredAt: l.StoredAt,
		FailedAt: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC), Kind: KindExhausted, Dataset: "orders", Partition: "2026-11-28",
		RunID: "r1", Deliveries: 4, Replays: 2, Error: "boom", OriginalSubject: "idem.ready.orders", OriginalStream: "IDEM_EVENTS",
		OriginalSeq: 42, Header: l.Header, Body: e.Data}, l)
	require.WithinDuration(t, time.Now(), l.StoredAt, time.Minute)
	require.Equal(t, "a", l.Header.Get("X-Tag"))
	for _, h := range directGetHeaders {
		require.NotContains(t, l.Header, h, "a direct get's own headers are not the dead letter's")
	}

	_, err = w.store.Get(context.Background(), 99)
	require.EqualError(t, err, "no dead letter 99 in stream IDEM_DLQ (already replayed or purged?): see 'idem dlq ls'")
}

func TestListFilters(t *testing.T) {
	w := newWorld(t)
	w.deadLetter(orders(1, KindFatal, "2026-11-28T03:00:00Z"))
	w.deadLetter(orders(2, KindExhausted, "2026-11-28T04:10:00Z"))
	invalid := orders(3, KindFatal, "2026-11-28T05:00:00Z")
	invalid.Dataset, invalid.Partition, invalid.RunID = "", "", ""
	w.deadLetter(invalid)
	customers := orders(4, KindCrashed, "2026-11-29T01:00:00Z")
	customers.Dataset = "customers"
	w.deadLetter(customers)
	hand, err := w.js.Publish(context.Background(), "idem.dlq.orders", []byte("no envelope"))
	require.NoError(t, err)

	since := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return tm
	}
	for _, c := range []struct {
		f    Filter
		want []uint64
	}{
		{Filter{}, []uint64{1, 2, 3, 4, hand.Sequence}},
		{Filter{Dataset: "orders"}, []uint64{1, 2, hand.Sequence}},
		{Filter{Dataset: InvalidSubjectToken}, []uint64{3}},
		{Filter{Dataset: "nope"}, []uint64{}},
		{Filter{Kind: KindFatal}, []uint64{1, 3}},
		{Filter{Dataset: "orders", Kind: KindExhausted}, []uint64{2}},
		{Filter{Since: since("2026-11-28T04:00:00Z")}, []uint64{2, 3, 4, hand.Sequence}},
		{Filter{Newest: 2}, []uint64{4, hand.Sequence}},
		{Filter{Newest: 2, Dataset: "orders"}, []uint64{hand.Sequence}},
		{Filter{Newest: 99}, []uint64{1, 2, 3, 4, hand.Sequence}},
	} {
		got, err := w.store.List(context.Background(), c.f, false)
		require.NoError(t, err)
		require.Equal(t, c.want, seqs(got), "%+v", c.f)
	}

	all, err := w.store.List(context.Background(), Filter{}, false)
	require.NoError(t, err)
	require.Nil(t, all[0].Body, "bodies only when asked for")
	require.Equal(t, "_invalid", all[2].Dataset, "the subject's token stands in")
	require.Equal(t, Letter{Seq: hand.Sequence, Subject: "idem.dlq.orders", StoredAt: all[4].StoredAt, FailedAt: all[4].StoredAt,
		Dataset: "orders", Header: nats.Header{}}, all[4], "a message without an envelope is listed with what is known")
	withBody, err := w.store.List(context.Background(), Filter{Kind: KindFatal}, true)
	require.NoError(t, err)
	require.Equal(t, []byte(`{"dataset":"orders"}`), withBody[0].Body)

	require.NoError(t, w.store.Delete(context.Background(), 2))
	got, err := w.store.List(context.Background(), Filter{Dataset: "orders"}, false)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, hand.Sequence}, seqs(got))
}

// A replay republishes the original as it was delivered, then deletes the
// dead letter; if it fails again, the count comes back with the new dead
// letter, and the fourth replay needs Force.
func TestReplay(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	e := orders(7, KindFatal, "2026-11-28T03:00:00Z")
	e.Header = nats.Header{"Traceparent": {"00-abc-01"}, "Nats-Msg-Id": {"orders:2026-11-28:r1"},
		"Nats-Expected-Last-Sequence": {"1"}, "Idem-Note": {"from the scheduler"}}
	seq := w.deadLetter(e)

	l, err := w.store.Get(ctx, seq)
	require.NoError(t, err)
	r := w.store.Replay(ctx, l, ReplayOptions{DryRun: true})
	require.Equal(t, ReplayResult{Seq: seq, Dataset: "orders", Partition: "2026-11-28", RunID: "r1", Kind: KindFatal,
		Action: ActionWouldReplay, Subject: "idem.ready.orders", ReplayCount: 1}, r)
	require.EqualValues(t, 0, w.count(w.events), "a dry run publishes nothing")
	require.EqualValues(t, 1, w.count(w.dlq), "and deletes nothing")

	for i := 1; i <= MaxReplays; i++ {
		r = w.store.Replay(ctx, l, ReplayOptions{})
		require.Equal(t, ActionReplayed, r.Action, r.Reason)
		require.Equal(t, i, r.ReplayCount)
		require.Equal(t, "IDEM_EVENTS", r.Stream)
		_, err = w.store.Get(ctx, l.Seq)
		require.Error(t, err, "deleted once the replay is stored")

		m, err := w.events.GetMsg(ctx, r.StreamSeq)
		require.NoError(t, err)
		require.Equal(t, "idem.ready.orders", m.Subject)
		require.Equal(t, e.Data, m.Data)
		require.Equal(t, nats.Header{"Traceparent": {"00-abc-01"}, "Idem-Note": {"from the scheduler"},
			"Nats-Expected-Stream": {"IDEM_EVENTS"}, headerReplayOf: {itoa(l.Seq)}, headerReplayCount: {itoa(uint64(i))}},
			m.Header, "no original Nats-Msg-Id or directive, no envelope")

		// The replay fails again: the consumer dead-letters it as delivered.
		again := orders(m.Sequence, KindFatal, "2026-11-28T03:00:00Z")
		again.Header = m.Header
		l, err = w.store.Get(ctx, w.deadLetter(again))
		require.NoError(t, err)
		require.Equal(t, i, l.Replays)
	}

	events := w.count(w.events)
	r = w.store.Replay(ctx, l, ReplayOptions{})
	require.Equal(t, ActionSkipped, r.Action)
	require.Contains(t, r.Reason, "already replayed 3 times")
	require.Contains(t, r.Reason, "--force")
	require.Equal(t, events, w.count(w.events), "a refused replay publishes nothing")
	_, err = w.store.Get(ctx, l.Seq)
	require.NoError(t, err, "and deletes nothing")

	r = w.store.Replay(ctx, l, ReplayOptions{Force: true})
	require.Equal(t, ActionReplayed, r.Action, r.Reason)
	require.Equal(t, MaxReplays+1, r.ReplayCount)
}

func TestReplayRefusesOrKeeps(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	get := func(e Envelope, omit bool) Letter {
		m := e.Msg(Subject("idem.dlq", e.Dataset))
		if omit {
			e.OmitBody(m, "too big")
		}
		ack, err := w.js.PublishMsg(ctx, m)
		require.NoError(t, err)
		l, err := w.store.Get(ctx, ack.Sequence)
		require.NoError(t, err)
		return l
	}

	noEnvelope := get(Envelope{Dataset: "orders"}, false)
	noEnvelope.OriginalSubject = ""
	r := w.store.Replay(ctx, noEnvelope, ReplayOptions{})
	require.Equal(t, ActionSkipped, r.Action)
	require.Equal(t, "no Idem-Original-Subject header: not a dead letter idem wrote", r.Reason)

	r = w.store.Replay(ctx, get(orders(1, KindFatal, "2026-11-28T03:00:00Z"), true), ReplayOptions{})
	require.Equal(t, ActionSkipped, r.Action)
	require.Contains(t, r.Reason, "its body was not kept (20 bytes omitted: too big;")

	nowhere := orders(2, KindFatal, "2026-11-28T03:00:00Z")
	nowhere.Subject = "elsewhere.orders"
	l := get(nowhere, false)
	r = w.store.Replay(ctx, l, ReplayOptions{})
	require.Equal(t, ActionFailed, r.Action)
	require.Equal(t, "no stream answers on elsewhere.orders (the events stream is IDEM_EVENTS); the dead letter is kept", r.Reason)

	loop := orders(3, KindFatal, "2026-11-28T03:00:00Z")
	loop.Subject = "idem.dlq.orders"
	r = w.store.Replay(ctx, get(loop, false), ReplayOptions{})
	require.Equal(t, ActionFailed, r.Action, "the dead-letter stream is not the events stream")
	require.Contains(t, r.Reason, "publish to idem.dlq.orders: ")
	require.Contains(t, r.Reason, "; the dead letter is kept")

	require.EqualValues(t, 0, w.count(w.events))
	require.EqualValues(t, 4, w.count(w.dlq), "every dead letter kept")
}

func itoa(n uint64) string { return fmt.Sprint(n) }
