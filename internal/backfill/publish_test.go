package backfill

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/testkit/natstest"
)

// A backfill goes to the backfill lane, idem.backfill.<dataset>, with the
// body and message id a live event of the same run would have.
func TestPublishUsesTheBackfillLane(t *testing.T) {
	cfg, err := config.Parse([]byte(`
pipeline: shop
datasets:
  orders:
    strategy: delete_insert
    target: analytics.orders
    partition_column: day
    source: SELECT * FROM staging.orders WHERE day = @partition
`), func(string) string { return "" })
	require.NoError(t, err)
	js := natstest.JetStream(t, natstest.RunServer(t))
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.NATS.Stream, Subjects: []string{"idem.ready.>", "idem.backfill.>"}, Duplicates: time.Minute})
	require.NoError(t, err)

	res := &Result{Dataset: "orders", RunID: "backfill__1", Partitions: []*Partition{
		{Partition: "2026-11-01", Action: ActionPublish}, {Partition: "2026-11-02", Action: ActionPublish},
	}}
	require.NoError(t, Publish(ctx, js, cfg, res, 0, func(int) {}))
	require.Equal(t, 2, res.Published)
	s, err := js.Stream(ctx, cfg.NATS.Stream)
	require.NoError(t, err)
	for seq, part := range map[uint64]string{1: "2026-11-01", 2: "2026-11-02"} {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		require.Equal(t, "idem.backfill.orders", m.Subject)
		require.Equal(t, "orders:"+part+":backfill__1", m.Header.Get(jetstream.MsgIDHeader))
	}
}
