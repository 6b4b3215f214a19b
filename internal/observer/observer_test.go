package observer_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/internal/observer"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/natstest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }

func TestRefreshSetsEveryFigure(t *testing.T) {
	ctx := context.Background()
	db := audittest.NewDB(t)
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	for _, p := range []string{"2026-11-01", "2026-11-03"} {
		_, err := audittest.Load(ctx, db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: p, RunID: "r1"}}, audit.Rows{Inserted: 1})
		require.NoError(t, err)
	}

	ns := natstest.RunServer(t)
	js := natstest.JetStream(t, ns)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"idem.ready.>", "idem.backfill.>"}})
	require.NoError(t, err)
	_, err = js.CreateOrUpdateConsumer(ctx, "EV", jetstream.ConsumerConfig{Durable: "idem", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "idem.ready.>"})
	require.NoError(t, err)
	_, err = js.CreateOrUpdateConsumer(ctx, "EV", jetstream.ConsumerConfig{Durable: "idem_backfill", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "idem.backfill.>"})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"idem.dlq.>"}})
	require.NoError(t, err)
	for _, subj := range []string{"idem.ready.orders", "idem.ready.orders", "idem.ready.users", "idem.backfill.orders", "idem.dlq.orders", "idem.dlq.orders", "idem.dlq.users"} {
		_, err := js.Publish(ctx, subj, []byte("{}"))
		require.NoError(t, err)
	}

	m := metrics.New("test")
	now := time.Date(2026, 11, 5, 0, 30, 0, 0, time.UTC)
	datasets := []string{"clicks", "orders", "users"}
	o := observer.New(observer.Config{
		JS: js, Stream: "EV", Consumer: "idem", BackfillConsumer: "idem_backfill", DLQStream: "DLQ", DLQSubjectPrefix: "idem.dlq", DB: db.Pool, Pipeline: "shop",
		Calendars: func() []observer.Calendar {
			return []observer.Calendar{{Dataset: "orders", Expect: calendar.Expect{Every: calendar.Day, From: "2026-11-01", Deadline: time.Hour}}}
		},
		Replicas: func(context.Context) ([]observer.Replica, error) {
			return []observer.Replica{{Name: "a", Version: "v1"}}, nil
		},
		Datasets: func() []string { return datasets },
		Ready:    func(context.Context) bool { return true },
		Metrics:  m, Now: func() time.Time { return now }, Log: zerolog.Nop(),
	})
	o.Refresh(ctx)

	require.Equal(t, 1.0, testutil.ToFloat64(m.Ready))
	require.Equal(t, 3.0, testutil.ToFloat64(m.ConsumerPending))
	require.Equal(t, 1.0, testutil.ToFloat64(m.BackfillPending), "the backfill lane's backlog")
	require.Equal(t, 2.0, testutil.ToFloat64(m.DeadLettersPending.WithLabelValues("orders")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.DeadLettersPending.WithLabelValues("users")))
	// A dataset without dead letters, and the invalid ones, show 0.
	require.Equal(t, 4, testutil.CollectAndCount(m.DeadLettersPending))
	require.Equal(t, 0.0, testutil.ToFloat64(m.DeadLettersPending.WithLabelValues("clicks")))
	require.Equal(t, 0.0, testutil.ToFloat64(m.DeadLettersPending.WithLabelValues("_invalid")))
	// 11-02 is past its deadline (11-03 01:00); 11-04 is due at 01:00.
	require.Equal(t, 1.0, testutil.ToFloat64(m.PartitionsLate.WithLabelValues("orders")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.PartitionsMissing.WithLabelValues("orders")))
	require.Equal(t, (24*time.Hour + 30*time.Minute).Seconds(), testutil.ToFloat64(m.NewestPartitionAge.WithLabelValues("orders")))
	r := o.Last()
	require.Equal(t, uint64(3), r.Pending)
	require.Equal(t, []observer.Replica{{Name: "a", Version: "v1"}}, r.Replicas)

	// An hour later 11-04 is late too: the same partitions, a later clock.
	// clicks was removed by a reload: its series goes.
	now = now.Add(time.Hour)
	datasets = []string{"orders", "users"}
	o.Refresh(ctx)
	require.Equal(t, 3, testutil.CollectAndCount(m.DeadLettersPending))
	require.Equal(t, 2.0, testutil.ToFloat64(m.PartitionsLate.WithLabelValues("orders")))
	require.Equal(t, 0.0, testutil.ToFloat64(m.PartitionsMissing.WithLabelValues("orders")))
}
