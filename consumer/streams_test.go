package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/testkit/natstest"
)

func streamsTestConfig() Config {
	return Config{
		Stream: "IDEM_EVENTS", DLQStream: "IDEM_DLQ", Consumer: "idem",
		SubjectPrefix: "idem.ready", DLQSubjectPrefix: "idem.dlq",
		AckWait: 30 * time.Second, MaxInFlight: 2000,
		Datasets: map[string]Dataset{
			"orders":    {Retry: Retry{MaxAttempts: 3}},
			"customers": {Retry: Retry{MaxAttempts: 7}},
			"events":    {},
		},
	}
}

func TestEnsureStreamsCreates(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t, natstest.RunServer(t))
	ctx := context.Background()
	sc := streamsTestConfig().Streams()
	require.Equal(t, DefaultMaxDeliver, sc.MaxDeliver, "a backstop far above every budget: the budget counts attempts, not deliveries")
	require.Equal(t, 2000, sc.MaxAckPending, "at least max_in_flight")
	require.NoError(t, EnsureStreams(ctx, js, sc))
	require.NoError(t, EnsureStreams(ctx, js, sc), "idempotent")

	for name, want := range map[string]struct {
		subjects  []string
		retention jetstream.RetentionPolicy
	}{
		"IDEM_EVENTS": {[]string{"idem.ready.>", "idem.backfill.>"}, jetstream.LimitsPolicy},
		"IDEM_DLQ":    {[]string{"idem.dlq.>"}, jetstream.LimitsPolicy},
		"IDEM_EVENTS_ADVISORIES": {[]string{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.IDEM_EVENTS.idem",
			"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.IDEM_EVENTS.idem_backfill"}, jetstream.WorkQueuePolicy},
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
	d, err := js.Stream(ctx, "IDEM_DLQ")
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, d.CachedInfo().Config.Duplicates, "a dead letter sent again a day later is still dropped")

	c, err := js.Consumer(ctx, "IDEM_EVENTS", "idem")
	require.NoError(t, err)
	cc := c.CachedInfo().Config
	require.Equal(t, "idem", cc.Durable)
	require.Equal(t, jetstream.AckExplicitPolicy, cc.AckPolicy)
	require.Equal(t, 30*time.Second, cc.AckWait)
	require.Equal(t, DefaultMaxDeliver, cc.MaxDeliver)
	require.Equal(t, 2000, cc.MaxAckPending)
	require.Equal(t, "idem.ready.>", cc.FilterSubject)
	bc := consumerConfig(t, js, "IDEM_EVENTS", "idem_backfill")
	require.Equal(t, "idem.backfill.>", bc.FilterSubject, "the backfill lane's durable")
	require.Equal(t, cc.AckWait, bc.AckWait)
	require.Equal(t, cc.MaxDeliver, bc.MaxDeliver)
	require.Equal(t, cc.MaxAckPending, bc.MaxAckPending)
	_, err = js.Consumer(ctx, "IDEM_EVENTS_ADVISORIES", "idem_reconciler")
	require.NoError(t, err)

	drifts, err := ConsumerDrift(ctx, js, sc)
	require.NoError(t, err)
	require.Empty(t, drifts, "what EnsureStreams creates is what the config wants")
}

func TestEnsureStreamsNeverChangesRetentionOrStorage(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t, natstest.RunServer(t))
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
	js := natstest.JetStream(t, natstest.RunServer(t))
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_EVENTS", Subjects: []string{"legacy.>"}, MaxAge: time.Hour, Duplicates: 10 * time.Minute})
	require.NoError(t, err)
	require.NoError(t, EnsureStreams(ctx, js, streamsTestConfig().Streams()))

	s, err := js.Stream(ctx, "IDEM_EVENTS")
	require.NoError(t, err)
	require.Equal(t, []string{"legacy.>", "idem.ready.>", "idem.backfill.>"}, s.CachedInfo().Config.Subjects)
	require.Equal(t, time.Hour, s.CachedInfo().Config.MaxAge, "the operator's limits stay")
	require.Equal(t, 10*time.Minute, s.CachedInfo().Config.Duplicates, "the operator's window stays")
}

// driftStreams is a StreamsConfig with every value written out, so the
// tests below do not depend on how Config.Streams derives it.
func driftStreams() StreamsConfig {
	return StreamsConfig{
		Stream: "IDEM_EVENTS", SubjectPrefix: "idem.ready", DLQStream: "IDEM_DLQ", DLQSubjectPrefix: "idem.dlq",
		Consumer: "idem", AckWait: 30 * time.Second, MaxDeliver: 4, MaxAckPending: 1000,
	}
}

func consumerConfig(t *testing.T, js jetstream.JetStream, stream, name string) jetstream.ConsumerConfig {
	t.Helper()
	c, err := js.Consumer(context.Background(), stream, name)
	require.NoError(t, err, "%s on %s", name, stream)
	return c.CachedInfo().Config
}

// TestEnsureStreamsLeavesConsumersAlone: a replica of a newer version
// starting next to an older one reports the difference and changes nothing.
func TestEnsureStreamsLeavesConsumersAlone(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t, natstest.RunServer(t))
	ctx := context.Background()
	require.NoError(t, EnsureStreams(ctx, js, driftStreams()))

	newer := driftStreams()
	newer.AckWait, newer.MaxDeliver = 45*time.Second, 20
	require.NoError(t, EnsureStreams(ctx, js, newer))
	cc := consumerConfig(t, js, "IDEM_EVENTS", "idem")
	require.Equal(t, 30*time.Second, cc.AckWait, "the server's value stays")
	require.Equal(t, 4, cc.MaxDeliver, "the server's value stays")

	drifts, err := ConsumerDrift(ctx, js, newer)
	require.NoError(t, err)
	require.Equal(t, []Drift{
		{Stream: "IDEM_EVENTS", Consumer: "idem", Field: "ack_wait", Server: "30s", Config: "45s"},
		{Stream: "IDEM_EVENTS", Consumer: "idem", Field: "max_deliver", Server: "4", Config: "20"},
		{Stream: "IDEM_EVENTS", Consumer: "idem_backfill", Field: "ack_wait", Server: "30s", Config: "45s"},
		{Stream: "IDEM_EVENTS", Consumer: "idem_backfill", Field: "max_deliver", Server: "4", Config: "20"},
	}, drifts)
	require.Equal(t, "consumer idem: max_deliver 4 -> 20", drifts[1].String())
	require.Equal(t, cc, consumerConfig(t, js, "IDEM_EVENTS", "idem"), "ConsumerDrift changes nothing")

	drifts, err = ConsumerDrift(ctx, js, driftStreams())
	require.NoError(t, err)
	require.Empty(t, drifts, "the older replica sees no difference")
}

// TestApplyStreamsUpdatesConsumers: `idem streams` applies the config to
// both consumers and keeps what an operator set beyond idem's settings.
func TestApplyStreamsUpdatesConsumers(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t, natstest.RunServer(t))
	ctx := context.Background()
	sc := driftStreams().WithDefaults()
	require.NoError(t, EnsureStreams(ctx, js, sc))
	// An operator's consumers: other settings, a filter written as a list.
	require.NoError(t, js.DeleteConsumer(ctx, "IDEM_EVENTS", "idem"))
	require.NoError(t, js.DeleteConsumer(ctx, "IDEM_EVENTS_ADVISORIES", "idem_reconciler"))
	_, err := js.CreateConsumer(ctx, "IDEM_EVENTS", jetstream.ConsumerConfig{
		Durable: "idem", Description: "operator's", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 10 * time.Second, MaxDeliver: 9, MaxAckPending: 50, MaxWaiting: 64,
		FilterSubjects: []string{"idem.ready.orders", "idem.ready.customers"},
	})
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "IDEM_EVENTS_ADVISORIES", jetstream.ConsumerConfig{
		Durable: "idem_reconciler", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 2 * time.Minute, MaxDeliver: 5, MaxAckPending: 7, FilterSubject: MaxDeliveriesSubject("IDEM_EVENTS", "idem"),
	})
	require.NoError(t, err)

	want := []Drift{
		{Stream: "IDEM_EVENTS", Consumer: "idem", Field: "ack_wait", Server: "10s", Config: "30s"},
		{Stream: "IDEM_EVENTS", Consumer: "idem", Field: "max_deliver", Server: "9", Config: "4"},
		{Stream: "IDEM_EVENTS", Consumer: "idem", Field: "max_ack_pending", Server: "50", Config: "1000"},
		{Stream: "IDEM_EVENTS", Consumer: "idem", Field: "filter_subject", Server: "idem.ready.orders,idem.ready.customers", Config: "idem.ready.>"},
		{Stream: "IDEM_EVENTS_ADVISORIES", Consumer: "idem_reconciler", Field: "ack_wait", Server: "2m0s", Config: "30s"},
		{Stream: "IDEM_EVENTS_ADVISORIES", Consumer: "idem_reconciler", Field: "max_deliver", Server: "5", Config: "-1"},
		{Stream: "IDEM_EVENTS_ADVISORIES", Consumer: "idem_reconciler", Field: "filter_subject",
			Server: MaxDeliveriesSubject("IDEM_EVENTS", "idem"), Config: MaxDeliveriesSubject("IDEM_EVENTS", "idem") + "," + MaxDeliveriesSubject("IDEM_EVENTS", "idem_backfill")},
	}
	drifts, err := ConsumerDrift(ctx, js, sc)
	require.NoError(t, err)
	require.Equal(t, want, drifts, "the reconciler's max_ack_pending is not idem's to set")

	changed, err := ApplyStreams(ctx, js, sc)
	require.NoError(t, err)
	require.Equal(t, want[:len(want)-1], changed, "the reconciler's narrower filter was widened as EnsureStreams does")
	cc := consumerConfig(t, js, "IDEM_EVENTS", "idem")
	require.Equal(t, 30*time.Second, cc.AckWait)
	require.Equal(t, 4, cc.MaxDeliver)
	require.Equal(t, 1000, cc.MaxAckPending)
	require.Equal(t, "idem.ready.>", cc.FilterSubject)
	require.Empty(t, cc.FilterSubjects)
	require.Equal(t, "operator's", cc.Description, "the operator's settings stay")
	require.Equal(t, 64, cc.MaxWaiting, "the operator's settings stay")
	rc := consumerConfig(t, js, "IDEM_EVENTS_ADVISORIES", "idem_reconciler")
	require.Equal(t, 30*time.Second, rc.AckWait)
	require.Equal(t, -1, rc.MaxDeliver)
	require.Equal(t, 7, rc.MaxAckPending, "the operator's settings stay")

	changed, err = ApplyStreams(ctx, js, sc)
	require.NoError(t, err)
	require.Empty(t, changed, "nothing left to change")
}

// TestEnsureStreamsCreatesMissingConsumers: streams that exist without
// consumers get both, with the config's settings.
func TestEnsureStreamsCreatesMissingConsumers(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t, natstest.RunServer(t))
	ctx := context.Background()
	require.NoError(t, EnsureStreams(ctx, js, driftStreams()))
	require.NoError(t, js.DeleteConsumer(ctx, "IDEM_EVENTS", "idem"))
	require.NoError(t, js.DeleteConsumer(ctx, "IDEM_EVENTS_ADVISORIES", "idem_reconciler"))
	drifts, err := ConsumerDrift(ctx, js, driftStreams())
	require.NoError(t, err)
	require.Empty(t, drifts, "a missing consumer has no drift")

	sc := driftStreams()
	sc.AckWait, sc.MaxDeliver = 45*time.Second, 20
	require.NoError(t, EnsureStreams(ctx, js, sc))
	cc := consumerConfig(t, js, "IDEM_EVENTS", "idem")
	require.Equal(t, 45*time.Second, cc.AckWait)
	require.Equal(t, 20, cc.MaxDeliver)
	rc := consumerConfig(t, js, "IDEM_EVENTS_ADVISORIES", "idem_reconciler")
	require.Equal(t, 30*time.Second, rc.AckWait)
	require.Equal(t, -1, rc.MaxDeliver)
	require.Equal(t, []string{MaxDeliveriesSubject("IDEM_EVENTS", "idem"), MaxDeliveriesSubject("IDEM_EVENTS", "idem_backfill")}, rc.FilterSubjects)
}

// TestEnsureStreamsUpgradesToLanes: what a version before the lanes
// created (one subject, a durable without a filter, a reconciler of the
// live durable alone) is updated in place, and the backfill durable is
// created; the messages already stored stay where they are.
func TestEnsureStreamsUpgradesToLanes(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t, natstest.RunServer(t))
	ctx := context.Background()
	sc := driftStreams().WithDefaults()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_EVENTS", Subjects: []string{"idem.ready.>"}, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_EVENTS_ADVISORIES", Retention: jetstream.WorkQueuePolicy,
		Subjects: []string{MaxDeliveriesSubject("IDEM_EVENTS", "idem")}})
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "IDEM_EVENTS", jetstream.ConsumerConfig{
		Durable: "idem", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 4, MaxAckPending: 1000,
	})
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "IDEM_EVENTS_ADVISORIES", jetstream.ConsumerConfig{
		Durable: "idem_reconciler", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: -1,
		FilterSubject: MaxDeliveriesSubject("IDEM_EVENTS", "idem"),
	})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "idem.ready.orders", event("orders", "2026-11-28", "backfill__old"))
	require.NoError(t, err)

	require.NoError(t, EnsureStreams(ctx, js, sc))
	s, err := js.Stream(ctx, "IDEM_EVENTS")
	require.NoError(t, err)
	require.Equal(t, []string{"idem.ready.>", "idem.backfill.>"}, s.CachedInfo().Config.Subjects, "the stream gains the backfill subjects in place")
	require.Equal(t, uint64(1), s.CachedInfo().State.Msgs, "what it held stays")
	cc := consumerConfig(t, js, "IDEM_EVENTS", "idem")
	require.Equal(t, "idem.ready.>", cc.FilterSubject, "the live durable no longer reads the backfill subjects")
	c, err := js.Consumer(ctx, "IDEM_EVENTS", "idem")
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.CachedInfo().NumPending, "a backfill event published before the upgrade loads on the live lane")
	bc := consumerConfig(t, js, "IDEM_EVENTS", "idem_backfill")
	require.Equal(t, "idem.backfill.>", bc.FilterSubject)
	rc := consumerConfig(t, js, "IDEM_EVENTS_ADVISORIES", "idem_reconciler")
	require.Equal(t, sc.advisorySubjects(), rc.FilterSubjects)
	a, err := js.Stream(ctx, "IDEM_EVENTS_ADVISORIES")
	require.NoError(t, err)
	require.Equal(t, sc.advisorySubjects(), a.CachedInfo().Config.Subjects)

	drifts, err := ConsumerDrift(ctx, js, sc)
	require.NoError(t, err)
	require.Empty(t, drifts)
}

// TestEnsureStreamsRaisesTheDeadLetterWindow: the streams of a version
// whose dead-letter stream kept ids 2 minutes. A message whose Term was
// lost with its process came back, waited out an outage and was
// dead-lettered again past those 2 minutes, stored twice. The upgrade
// raises that stream's window, keeps what it holds and what it has seen,
// and leaves the events stream's and any longer window alone.
func TestEnsureStreamsRaisesTheDeadLetterWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc := streamsTestConfig().Streams()

	js := natstest.JetStream(t, natstest.RunServer(t))
	for _, name := range []string{"IDEM_EVENTS", "IDEM_DLQ"} {
		subject := map[string]string{"IDEM_EVENTS": "idem.ready.>", "IDEM_DLQ": "idem.dlq.>"}[name]
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute})
		require.NoError(t, err)
	}
	id := deadletter.MsgID("IDEM_EVENTS", 7)
	_, err := js.PublishMsg(ctx, &nats.Msg{Subject: "idem.dlq.orders", Data: []byte("{}"), Header: nats.Header{nats.MsgIdHdr: []string{id}}})
	require.NoError(t, err)

	require.NoError(t, EnsureStreams(ctx, js, sc))
	d, err := js.Stream(ctx, "IDEM_DLQ")
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, d.CachedInfo().Config.Duplicates, "the dead-letter stream's window is raised in place")
	require.Equal(t, uint64(1), d.CachedInfo().State.Msgs, "what it held stays")
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: "idem.dlq.orders", Data: []byte("{}"), Header: nats.Header{nats.MsgIdHdr: []string{id}}})
	require.NoError(t, err)
	require.True(t, ack.Duplicate, "the dead letter seen before the upgrade is still known")
	e, err := js.Stream(ctx, "IDEM_EVENTS")
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, e.CachedInfo().Config.Duplicates, "the events stream keeps its own window")
	require.NoError(t, EnsureStreams(ctx, js, sc), "idempotent")

	for _, c := range []struct {
		name          string
		maxAge, dupes time.Duration
		want          time.Duration
	}{
		{"longer window stays", 0, 48 * time.Hour, 48 * time.Hour},
		{"raised no further than the max age", time.Hour, 2 * time.Minute, time.Hour},
	} {
		js := natstest.JetStream(t, natstest.RunServer(t))
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_DLQ", Subjects: []string{"idem.dlq.>"}, Storage: jetstream.FileStorage,
			MaxAge: c.maxAge, Duplicates: c.dupes})
		require.NoError(t, err, c.name)
		require.NoError(t, EnsureStreams(ctx, js, sc), c.name)
		d, err := js.Stream(ctx, "IDEM_DLQ")
		require.NoError(t, err)
		require.Equal(t, c.want, d.CachedInfo().Config.Duplicates, c.name)
	}
}

// TestApplyStreamsRefusesPolicyChange: JetStream cannot change an ack
// policy in place, so ApplyStreams says how to get there and changes
// nothing of that consumer.
func TestApplyStreamsRefusesPolicyChange(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t, natstest.RunServer(t))
	ctx := context.Background()
	sc := driftStreams()
	require.NoError(t, EnsureStreams(ctx, js, sc))
	require.NoError(t, js.DeleteConsumer(ctx, "IDEM_EVENTS", "idem"))
	_, err := js.CreateConsumer(ctx, "IDEM_EVENTS", jetstream.ConsumerConfig{
		Durable: "idem", AckPolicy: jetstream.AckAllPolicy, AckWait: 10 * time.Second, MaxDeliver: 4, FilterSubject: "idem.ready.>",
	})
	require.NoError(t, err)

	_, err = ApplyStreams(ctx, js, sc)
	require.ErrorContains(t, err, "consumer idem on stream IDEM_EVENTS has ack_policy all, idem needs explicit")
	require.ErrorContains(t, err, "nats consumer rm IDEM_EVENTS idem")
	cc := consumerConfig(t, js, "IDEM_EVENTS", "idem")
	require.Equal(t, 10*time.Second, cc.AckWait, "nothing of it changed")
}

func TestStreamsConfigDuplicatesOutlastAckWait(t *testing.T) {
	t.Parallel()
	require.NoError(t, driftStreams().WithDefaults().Validate())
	sc := driftStreams()
	sc.AckWait = 2 * time.Minute
	require.ErrorContains(t, sc.WithDefaults().Validate(), "Duplicates 2m0s must be longer than AckWait 2m0s and 30s")
	sc = driftStreams()
	sc.AckWait, sc.Duplicates = 10*time.Second, 30*time.Second
	require.ErrorContains(t, sc.WithDefaults().Validate(), "Duplicates 30s must be longer than AckWait 10s and 30s")
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
			"Orders": {Retry: Retry{MaxAttempts: -1, Delay: time.Minute, MaxDelay: time.Second}},
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
		"dataset Orders: Retry.MaxAttempts -1 must be at least 1",
		"dataset Orders: Retry.Delay 1m0s and Retry.MaxDelay 1s",
	} {
		require.ErrorContains(t, err, want)
	}
}
