package consumer

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/consumer/consumertest"
)

func TestReadFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := consumertest.JetStream(t, consumertest.RunServer(t))

	_, err := ReadFleet(ctx, js, "idem_fleet_idem")
	require.ErrorIs(t, err, jetstream.ErrBucketNotFound)

	cfg := FleetConfig{
		Bucket: "idem_fleet_idem", Replica: "host-a 1", Version: "v2",
		Definitions: map[string]json.RawMessage{"orders": json.RawMessage(`{"source":"SELECT 2"}`)},
	}
	_, err = openFleet(ctx, js, cfg, []string{"orders"}, zerolog.Nop())
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	require.NoError(t, err)
	put := func(key string, m Member) {
		b, err := json.Marshal(m)
		require.NoError(t, err)
		_, err = kv.Put(ctx, key, b)
		require.NoError(t, err)
	}
	put("host-b", Member{Replica: "host-b", Version: "v1", Datasets: []string{"orders", "customers"}, Updated: time.Now().UTC()})
	// A replica that stopped refreshing: the bucket's TTL has not removed
	// it yet, its age already says it is gone.
	put("host-c", Member{Replica: "host-c", Version: "v0", Datasets: []string{"orders"}, Updated: time.Now().Add(-3 * DefaultFleetRefresh)})

	members, err := ReadFleet(ctx, js, cfg.Bucket)
	require.NoError(t, err)
	require.Len(t, members, 2)
	require.Equal(t, "host-a 1", members[0].Replica)
	require.Equal(t, "v2", members[0].Version)
	require.JSONEq(t, `{"source":"SELECT 2"}`, string(members[0].Definitions["orders"]))
	require.Equal(t, "host-b", members[1].Replica)
	require.Equal(t, []string{"customers", "orders"}, members[1].Datasets)
	require.Empty(t, members[1].Definitions)
}
