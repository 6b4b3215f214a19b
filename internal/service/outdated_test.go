package service

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/backfill"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/natstest"
)

// on_definition_change: reload never starts while the fleet runs two
// definitions of the dataset; once every live replica runs the new one,
// one backfill of the outdated partitions is published, once, however
// many replicas pass.
func TestMixedFleetNeverReloadsOutdated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := natstest.RunServer(t)
	js := natstest.JetStream(t, ns)
	db := audittest.NewDB(t)
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	parse := func(source string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(fmt.Sprintf(`pipeline: shop
nats: {url: %q}
datasets:
  orders:
    strategy: delete_insert
    target: analytics.t
    partition_column: event_date
    source: %s
    on_definition_change: reload
`, ns.ClientURL(), source)), nil)
		require.NoError(t, err)
		require.NoError(t, cfg.Validate())
		return cfg
	}
	old := parse("SELECT * FROM staging.src WHERE event_date = @partition")
	cur := parse("SELECT * FROM staging.src WHERE event_date = @partition AND id > 0")
	oldHash, curHash := old.Datasets["orders"].DefinitionHash(), cur.Datasets["orders"].DefinitionHash()
	require.NotEqual(t, oldHash, curHash)
	require.NoError(t, audit.RecordDefinition(ctx, db.Pool, "shop", "orders", oldHash, old.Datasets["orders"].Definition()))
	// Three partitions loaded under the old definition, one under the new,
	// one before definitions were recorded.
	load := func(part, hash string) {
		d, _ := time.Parse(time.DateOnly, part)
		_, err := audittest.Load(ctx, db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "shop", Dataset: "orders", Partition: part, RunID: "r1"},
			LogicalDate: &d, DefinitionHash: hash}, audit.Rows{Inserted: 1})
		require.NoError(t, err)
	}
	for _, p := range []string{"2026-05-01", "2026-05-02", "2026-05-03"} {
		load(p, oldHash)
	}
	load("2026-05-04", curHash)
	load("2026-04-30", "")

	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: cur.NATS.Stream, Duplicates: time.Minute,
		Subjects: []string{cur.NATS.SubjectPrefix + ".>", schemas.BackfillPrefix(cur.NATS.SubjectPrefix) + ".>"}})
	require.NoError(t, err)
	kv, err := consumer.EnsureFleet(ctx, js, consumer.FleetConfig{Bucket: cur.NATS.FleetBucketName()})
	require.NoError(t, err)
	report := func(replica string, cfg *config.Config) {
		t.Helper()
		b, err := json.Marshal(consumer.Member{Replica: replica, Version: ConfigVersion(cfg), Datasets: cfg.DatasetNames(),
			Updated: time.Now().UTC(), Definitions: Definitions(cfg)})
		require.NoError(t, err)
		_, err = kv.Put(ctx, replica, b)
		require.NoError(t, err)
	}
	fleet := func(ctx context.Context) ([]consumer.Member, error) {
		return consumer.ReadFleet(ctx, js, cur.NATS.FleetBucketName())
	}
	msgs := func() uint64 {
		s, err := js.Stream(ctx, cur.NATS.Stream)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}

	// A rolling change: the new replica and an old one.
	report("new-1", cur)
	report("old-1", old)
	for range 3 {
		reloadOutdated(ctx, db.Pool, js, fleet, cur, zerolog.Nop())
	}
	require.Zero(t, msgs(), "a mixed fleet never reloads")
	r, err := backfill.ReloadOutdated(ctx, db.Pool, js, cur, "orders", mustFleet(t, fleet))
	require.NoError(t, err)
	require.False(t, r.Agreed)
	require.Zero(t, r.Published)

	// The old replica is replaced: every live member runs the new one.
	report("old-1", cur)
	reloadOutdated(ctx, db.Pool, js, fleet, cur, zerolog.Nop())
	require.EqualValues(t, 3, msgs(), "one backfill of the three partitions of the old definition")
	// Another replica's pass, and this one's again, publish nothing more.
	reloadOutdated(ctx, db.Pool, js, fleet, cur, zerolog.Nop())
	r, err = backfill.ReloadOutdated(ctx, db.Pool, js, cur, "orders", mustFleet(t, fleet))
	require.NoError(t, err)
	require.True(t, r.Agreed)
	require.True(t, r.Recent)
	require.Equal(t, 1, r.Unknown, "a load of unknown definition is left to an operator")
	require.EqualValues(t, 3, msgs())

	s, err := js.Stream(ctx, cur.NATS.Stream)
	require.NoError(t, err)
	var parts []string
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		var ev schemas.PartitionReady
		require.NoError(t, json.Unmarshal(m.Data, &ev))
		require.Equal(t, backfill.OutdatedRunID(curHash), ev.RunID)
		require.False(t, ev.Force)
		require.Equal(t, "idem.backfill.orders", m.Subject, "the backfill lane")
		require.Equal(t, ev.MsgID(), m.Header.Get(jetstream.MsgIDHeader), "replicas publishing it are deduplicated")
		parts = append(parts, ev.Partition)
	}
	require.Equal(t, []string{"2026-05-01", "2026-05-02", "2026-05-03"}, parts)
}

func mustFleet(t *testing.T, fleet func(context.Context) ([]consumer.Member, error)) []consumer.Member {
	t.Helper()
	m, err := fleet(context.Background())
	require.NoError(t, err)
	return m
}
