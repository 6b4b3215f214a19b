package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/service"
	"github.com/idem-data/idem/testkit/natstest"
)

// TestValidateFleet runs `idem validate --fleet` against a real NATS whose
// fleet bucket holds a replica of goodConfig and one of an older idem.
func TestValidateFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns := natstest.RunServer(t)
	js := natstest.JetStream(t, ns)
	env := map[string]string{"IDEM_NATS_URL": ns.ClientURL()}

	r := runCLI(t, env, "validate", "--offline", "--fleet", "--config", writeConfig(t, goodConfig))
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "fleet idem_fleet_idem: no live replica")

	old, err := config.Parse([]byte(goodConfig), nil)
	require.NoError(t, err)
	kv, err := consumer.EnsureFleet(ctx, js, consumer.FleetConfig{Bucket: old.NATS.FleetBucketName()})
	require.NoError(t, err)
	for _, m := range []consumer.Member{
		{Replica: "host-a-1", Version: service.ConfigVersion(old), Datasets: old.DatasetNames(), Definitions: service.Definitions(old)},
		{Replica: "host-b-1", Version: "older", Datasets: []string{"orders"}},
	} {
		m.Updated = time.Now().UTC()
		b, err := json.Marshal(m)
		require.NoError(t, err)
		_, err = kv.Put(ctx, m.Replica, b)
		require.NoError(t, err)
	}

	r = runCLI(t, env, "validate", "--offline", "--fleet", "--config", writeConfig(t, goodConfig))
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "version "+service.ConfigVersion(old)+": 1 replica(s): host-a-1\n  same as the new config")

	next := strings.Replace(goodConfig, "SELECT * FROM staging.orders", "SELECT order_id, event_date, total FROM staging.orders", 1)
	next = strings.Replace(next, "  events:\n", "  clicks:\n", 1)
	next = strings.Replace(next, "  orders:\n", "  orders:\n    retries: 7\n", 1)
	r = runCLI(t, env, "validate", "--offline", "--fleet", "--config", writeConfig(t, next))
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "version "+service.ConfigVersion(old)+": 1 replica(s): host-a-1\n"+
		"  added: clicks\n  removed: events\n  orders: retries, source changed\n")
	require.Contains(t, r.out, "version older: 1 replica(s): host-b-1\n  added: clicks, customers\n")
	require.Contains(t, r.out, "compared by name only")
}
