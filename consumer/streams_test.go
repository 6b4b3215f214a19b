package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/consumer/consumertest"
)

func streamsTestConfig() Config {
	return Config{
		Stream: "IDEM_EVENTS", DLQStream: "IDEM_DLQ", Consumer: "idem",
		SubjectPrefix: "idem.ready", DLQSubjectPrefix: "idem.dlq",
		AckWait: 30 * time.Second, MaxInFlight: 2000,
		Datasets: map[string]Dataset{
			"orders":    {Retry: Retry{MaxDeliveries: 3}},
			"customers": {Retry: Retry{MaxDeliveries: 7}},
			"events":    {},
		},
	}
}

func TestEnsureStreamsCreates(t *testing.T) {
	t.Parallel()
	js := consumertest.JetStream(t, consumertest.RunServer(t))
	ctx := context.Background()
	sc := streamsTestConfig().Streams()
	require.Equal(t, 7, sc.MaxDeliver, "the largest budget, so JetStream never cuts a dataset short")
	require.Equal(t, 2000, sc.MaxAckPending, "at least max_in_flight")
	require.NoError(t, EnsureStreams(ctx, js, sc))
	require.NoError(t, EnsureStreams(ctx, js, sc), "idempotent")

	for name, want := range map[string]struct {
		subjects  []string
		retention jetstream.RetentionPolicy
	}{
		"IDEM_EVENTS":            {[]string{"idem.ready.>"}, jetstream.LimitsPolicy},
		"IDEM_DLQ":               {[]string{"idem.dlq.>"}, jetstream.LimitsPolicy},
		"IDEM_EVENTS_ADVISORIES": {[]string{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.IDEM_EVENTS.idem"}, jetstream.WorkQueuePolicy},
	} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err, name)
		cfg := s.CachedInfo().Config
		require.Equal(t, want.subjects, cfg.Subjects, name)
		require.Equal(t, want.retention, cfg.Retention, name)
		require.Equal(t, jetstream.FileStorage, cfg.Storage, name)
	}
	s, err := js.Stream(ctx, "IDEM_EVENTS")
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, s.CachedInfo().Config.Duplicates)

	c, err := js.Consumer(ctx, "IDEM_EVENTS", "idem")
	require.NoError(t, err)
	cc := c.CachedInfo().Config
	require.Equal(t, "idem", cc.Durable)
	require.Equal(t, jetstream.AckExplicitPolicy, cc.AckPolicy)
	require.Equal(t, 30*time.Second, cc.AckWait)
	require.Equal(t, 7, cc.MaxDeliver)
	require.Equal(t, 2000, cc.MaxAckPending)
	require.Equal(t, "idem.ready.>", cc.FilterSubject)
	_, err = js.Consumer(ctx, "IDEM_EVENTS_ADVISORIES", "idem_reconciler")
	require.NoError(t, err)

	// A changed config updates the consumer.
	sc.AckWait, sc.MaxDeliver = 45*time.Second, 9
	require.NoError(t, EnsureStreams(ctx, js, sc))
	c, err = js.Consumer(ctx, "IDEM_EVENTS", "idem")
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, c.CachedInfo().Config.AckWait)
	require.Equal(t, 9, c.CachedInfo().Config.MaxDeliver)
}

func TestEnsureStreamsNeverChangesRetentionOrStorage(t *testing.T) {
	t.Parallel()
	js := consumertest.JetStream(t, consumertest.RunServer(t))
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_EVENTS", Subjects: []string{"idem.ready.>"}, Retention: jetstream.InterestPolicy, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	err = EnsureStreams(ctx, js, streamsTestConfig().Streams())
	require.ErrorContains(t, err, "stream IDEM_EVENTS exists with retention Interest (idem needs Limits) and storage Memory (idem needs File)")
	s, err := js.Stream(ctx, "IDEM_EVENTS")
	require.NoError(t, err)
	require.Equal(t, jetstream.InterestPolicy, s.CachedInfo().Config.Retention, "untouched")
}

func TestEnsureStreamsAddsMissingSubjectsOnly(t *testing.T) {
	t.Parallel()
	js := consumertest.JetStream(t, consumertest.RunServer(t))
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_EVENTS", Subjects: []string{"legacy.>"}, MaxAge: time.Hour})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_DLQ", Subjects: []string{"idem.dlq.>"}, Duplicates: 10 * time.Minute})
	require.NoError(t, err)
	require.NoError(t, EnsureStreams(ctx, js, streamsTestConfig().Streams()))

	s, err := js.Stream(ctx, "IDEM_EVENTS")
	require.NoError(t, err)
	require.Equal(t, []string{"legacy.>", "idem.ready.>"}, s.CachedInfo().Config.Subjects)
	require.Equal(t, time.Hour, s.CachedInfo().Config.MaxAge, "the operator's limits stay")
	s, err = js.Stream(ctx, "IDEM_DLQ")
	require.NoError(t, err)
	require.Equal(t, 10*time.Minute, s.CachedInfo().Config.Duplicates, "the operator's window stays")
}

func TestSubjectCovers(t *testing.T) {
	for _, tt := range []struct {
		have, want string
		covers     bool
	}{
		{"idem.ready.>", "idem.ready.>", true},
		{"idem.>", "idem.ready.>", true},
		{">", "idem.ready.>", true},
		{"idem.*.>", "idem.ready.>", true},
		{"idem.ready.*", "idem.ready.>", false},
		{"idem.ready", "idem.ready.>", false},
		{"idem.ready.>", "idem.>", false},
		{"a.b", "a.b", true},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.b.c", "a.b", false},
	} {
		require.Equal(t, tt.covers, subjectCovers(tt.have, tt.want), "%s covers %s", tt.have, tt.want)
	}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, streamsTestConfig().WithDefaults().Validate())
	bad := Config{
		Stream: "IDEM.EVENTS", DLQStream: "", Consumer: "idem",
		SubjectPrefix: "idem.ready", DLQSubjectPrefix: "idem.ready.dlq",
		MaxInFlight: 0,
		Datasets: map[string]Dataset{
			"Orders": {Retry: Retry{MaxDeliveries: -1, Delay: time.Minute, MaxDelay: time.Second}},
		},
	}
	err := bad.WithDefaults().Validate()
	require.Error(t, err)
	for _, want := range []string{
		`Stream "IDEM.EVENTS" contains white space`,
		`DLQStream "" is required`,
		"SubjectPrefix \"idem.ready\" and DLQSubjectPrefix \"idem.ready.dlq\" overlap",
		"AckWait 0s must be positive",
		"MaxInFlight 0 must be at least 1",
		`dataset "Orders" is not a valid dataset name`,
		"dataset Orders: Retry.MaxDeliveries -1 must be at least 1",
		"dataset Orders: Retry.Delay 1m0s and Retry.MaxDelay 1s",
	} {
		require.ErrorContains(t, err, want)
	}
}
