package relay_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer/consumertest"
	"github.com/idem-data/idem/internal/pgtest"
	"github.com/idem-data/idem/internal/relay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type fixture struct {
	db *pgtest.DB
	js jetstream.JetStream
	s  jetstream.Stream
}

func setup(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	js := consumertest.JetStream(t, consumertest.RunServer(t))
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_EVENTS", Subjects: []string{"idem.ready.>"}})
	require.NoError(t, err)
	db := pgtest.NewDB(t)
	_, err = audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	return &fixture{db: db, js: js, s: s}
}

// queue writes n outbox rows as committed loads would.
func (f *fixture) queue(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id, err := audit.Start(ctx, f.db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "p", Dataset: "orders", Partition: fmt.Sprintf("p%d", i), RunID: "r1"}, Attempt: 1})
		require.NoError(t, err)
		require.NoError(t, audit.Enqueue(ctx, f.db.Pool, audit.OutboxEvent{
			Subject: "idem.ready.daily", MsgID: fmt.Sprintf("daily:p%d:r1", i), Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), AuditID: id}))
	}
}

func (f *fixture) streamMsgs(t *testing.T) uint64 {
	info, err := f.s.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

func TestFlushPublishesAndMarksSent(t *testing.T) {
	f := setup(t)
	f.queue(t, 5)
	r := relay.New(f.db.Pool, f.js, "IDEM_EVENTS", zerolog.Nop())
	n, err := r.Flush(context.Background())
	require.NoError(t, err)
	require.Equal(t, 5, n)
	require.EqualValues(t, 5, f.streamMsgs(t))
	require.EqualValues(t, 0, f.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL OR stream_seq IS NULL"))
	m, err := f.s.GetMsg(context.Background(), 1)
	require.NoError(t, err)
	require.Equal(t, "daily:p0:r1", m.Header.Get(jetstream.MsgIDHeader))
	require.JSONEq(t, `{"n":0}`, string(m.Data))

	n, err = r.Flush(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "sent rows are not sent again")
}

func TestRelaysShareRowsWithoutSendingOneTwice(t *testing.T) {
	f := setup(t)
	f.queue(t, 60)
	var published atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		r := relay.New(f.db.Pool, f.js, "IDEM_EVENTS", zerolog.Nop())
		r.Batch = 7
		r.Published = func(n int) { published.Add(int64(n)) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := r.Flush(context.Background())
				if err != nil || n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	// JetStream would hide a double publish by its duplicate window, so count
	// what the relays sent, not what the stream kept.
	require.EqualValues(t, 60, published.Load())
	require.EqualValues(t, 60, f.streamMsgs(t))
	require.EqualValues(t, 0, f.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL"))
}

func TestPublishedButNotMarkedIsDeduplicated(t *testing.T) {
	f := setup(t)
	f.queue(t, 3)
	// A relay that published and died before marking the rows sent.
	ctx := context.Background()
	tx, err := f.db.Pool.Begin(ctx)
	require.NoError(t, err)
	rows, err := audit.ClaimPending(ctx, tx, 10)
	require.NoError(t, err)
	for _, row := range rows {
		msg := &nats.Msg{Subject: row.Subject, Data: row.Body, Header: nats.Header{jetstream.MsgIDHeader: []string{row.MsgID}}}
		_, err := f.js.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Rollback(ctx))

	r := relay.New(f.db.Pool, f.js, "IDEM_EVENTS", zerolog.Nop())
	n, err := r.Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.EqualValues(t, 3, f.streamMsgs(t), "the re-publish was stored twice")
}

func TestPublishFailureKeepsRowsPending(t *testing.T) {
	f := setup(t)
	f.queue(t, 2)
	require.NoError(t, f.js.DeleteStream(context.Background(), "IDEM_EVENTS"))
	r := relay.New(f.db.Pool, f.js, "IDEM_EVENTS", zerolog.Nop())
	n, err := r.Flush(context.Background())
	require.Error(t, err)
	require.Zero(t, n)
	require.EqualValues(t, 2, f.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL AND attempts = 1 AND last_error IS NOT NULL"))
}
