package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/consumer"
)

// storageFullShortOptions is TestChaosStorageFullShort's campaign: only
// js_storage_full, whose seed fills each of the four streams at least once
// in the first faults (TestStorageFullShortScheduleFillsEveryStream), and a
// fatal share high enough that a dead-letter stream held full for a few
// seconds refuses dead letters. Loads last up to a second (SlowLoad), so
// that loads are in flight when the events stream fills, and their
// downstream events are refused: idem keeps up with the publisher, and
// with 80 ms loads nothing is left to commit once the publisher's events
// are refused.
var storageFullShortOptions = Options{
	Seed: 20261213, Kinds: []string{FaultJSStorageFull}, LongRounds: -1,
	Duration: 50 * time.Second, Events: 400, Replicas: 2, FatalShare: 0.1, SlowLoad: time.Second,
}

// TestStorageFullShortScheduleFillsEveryStream: the focused campaign's
// seed fills the events, dead-letter and results streams and the events
// stream while downstream events go out, each within its first five
// faults, so that a nemesis slowed by the waits after each still reaches
// them.
func TestStorageFullShortScheduleFillsEveryStream(t *testing.T) {
	o := storageFullShortOptions.WithDefaults()
	seen := map[string]int{}
	for i, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
		require.Equal(t, FaultJSStorageFull, f.Kind)
		require.GreaterOrEqual(t, f.Hold, storageFullHoldMin)
		require.LessOrEqual(t, f.Hold, storageFullHoldMax)
		if i < 5 {
			seen[storageFullTargets[f.Param].name]++
		}
	}
	for _, tg := range storageFullTargets {
		require.NotZero(t, seen[tg.name], "seed %d fills %s in none of its first five faults: %v", o.Seed, tg.name, seen)
	}
}

// TestStorageFullRefusesAndRestores is the fault's mechanism on idem's own
// streams in a real NATS server: while a stream is full a publish is
// refused with "maximum bytes exceeded" (a message id too, which is not
// remembered), no message it held goes (the results stream discards old
// messages at its own limit), and once restored the stream has its config
// back and accepts the refused message as new.
func TestStorageFullRefusesAndRestores(t *testing.T) {
	box, err := startNATS(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(box.down)
	nc, err := nats.Connect(box.url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, consumer.EnsureStreams(ctx, js, consumer.StreamsConfig{
		Stream: eventsStream, SubjectPrefix: "idem.ready", DLQStream: dlqStream, DLQSubjectPrefix: "idem.dlq",
		Consumer: durableConsumer, AckWait: 2 * time.Second, MaxDeliver: 10,
		ResultsStream: resultsStream, ResultsSubjectPrefix: "idem.result", ResultsMaxAge: time.Hour, ResultsMaxBytes: 1 << 30,
	}))
	subjects := map[string]string{eventsStream: "idem.ready.replace", dlqStream: "idem.dlq.replace", resultsStream: "idem.result.replace.loaded"}
	for _, tg := range storageFullTargets {
		t.Run(tg.name, func(t *testing.T) {
			subj := subjects[tg.stream]
			id := func(s string) string { return fmt.Sprintf("%s-%s-%d", tg.name, s, time.Now().UnixNano()) }
			for range 3 {
				_, err := js.Publish(ctx, subj, []byte(`{"before":"full"}`), jetstream.WithMsgID(id("before")))
				require.NoError(t, err)
			}
			s, err := js.Stream(ctx, tg.stream)
			require.NoError(t, err)
			before, err := s.Info(ctx)
			require.NoError(t, err)

			orig, held, _, err := fillStream(ctx, js, tg.stream)
			require.NoError(t, err)
			require.Equal(t, before.Config, orig)
			require.Equal(t, before.State.LastSeq, held)
			refusedID := id("refused")
			_, err = js.Publish(ctx, subj, []byte(`{"while":"full"}`), jetstream.WithMsgID(refusedID))
			require.Error(t, err, "a publish to a full %s was stored", tg.stream)
			require.True(t, storageRefused(err), "not a storage refusal: %v", err)
			require.Contains(t, err.Error(), "maximum bytes exceeded")
			full, err := s.Info(ctx)
			require.NoError(t, err)
			require.Equal(t, before.State.Msgs, full.State.Msgs, "a message came or went while %s was full", tg.stream)
			require.Equal(t, before.State.FirstSeq, full.State.FirstSeq)

			gained, err := restoreStream(ctx, js, orig, held)
			require.NoError(t, err)
			require.Zero(t, gained)
			after, err := s.Info(ctx)
			require.NoError(t, err)
			require.Equal(t, before.Config, after.Config, "%s's config not restored", tg.stream)
			ack, err := js.Publish(ctx, subj, []byte(`{"while":"full"}`), jetstream.WithMsgID(refusedID))
			require.NoError(t, err, "%s still refuses after the restore", tg.stream)
			require.False(t, ack.Duplicate, "the refused message's id was remembered: its retry is dropped as a duplicate")
		})
	}
}

// TestChaosStorageFullShort is the focused campaign of js_storage_full:
// the events, dead-letter and results streams filled in turn, and the
// events stream while the relay publishes downstream events, each for 3-6
// s, with the relay, the dead letters and the campaign's publisher all
// writing. Nothing may be lost, doubled or wrongly dead-lettered, every
// fatal input is dead-lettered once, the outbox catches up after each
// limit is lifted, and each stream's writes were refused at least once.
func TestChaosStorageFullShort(t *testing.T) {
	focused(t)
	r := runCampaign(t, storageFullShortOptions)
	requireFaults(t, r, FaultJSStorageFull)
	if r == nil || r.StorageFull == nil {
		t.Fatal("no js_storage_full figures")
	}
	sf := r.StorageFull
	for _, tg := range storageFullTargets {
		if sf.ByTarget[tg.label()] == 0 {
			t.Errorf("%s never filled: by target %v", tg.label(), sf.ByTarget)
		}
	}
	for _, v := range []struct {
		n    int
		what string
	}{
		{sf.PublisherRefused, "scheduler publishes refused (events full)"},
		{sf.DeadLettersRefused, "dead letters refused (dead-letter stream full)"},
		{sf.ResultsRetried, "results sent after a refusal (results stream full)"},
		{sf.DownstreamRetried, "downstream events sent after a refusal (events stream full)"},
	} {
		if v.n == 0 {
			t.Errorf("no %s: the campaign did not exercise that stream's writes", v.what)
		}
	}
	if r.Downstream == nil || r.Downstream.LoadedOnce == 0 {
		t.Errorf("no downstream loads: %+v", r.Downstream)
	}
}

// checkDownstream sees each way a downstream event can go wrong: an
// upstream load without its outbox row, a row never published, a
// downstream run lost or loaded twice, a downstream load of a run the
// upstream never loaded, and a downstream table unlike its upstream's.
func TestCheckDownstreamSeesLostDoubledAndUnsent(t *testing.T) {
	ctx := context.Background()
	db := checkerDB(t)
	require.NoError(t, createDownstream(ctx, db))
	_, err := db.Exec(ctx, `INSERT INTO `+downstreamTarget+` SELECT `+columns+` FROM analytics.replace`)
	require.NoError(t, err)
	o := Options{Downstream: true}

	// Clean: two upstream loads, each with its row sent and its downstream
	// run loaded once.
	_, err = db.Exec(ctx, `
WITH up AS (
  INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, finished_at)
  VALUES ('chaos', 'replace', '2026-01-01', 'a', 'success', 1, now()), ('chaos', 'replace', '2026-01-02', 'b', 'success', 1, now())
  RETURNING id, partition_key, run_id)
INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, sent_at) SELECT 'replace_down', partition_key, run_id, id, now() FROM up;
INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, finished_at)
VALUES ('chaos', 'replace_down', '2026-01-01', 'a', 'success', 1, now()), ('chaos', 'replace_down', '2026-01-02', 'b', 'success', 1, now()),
       ('chaos', 'replace_down', '2026-01-02', 'b', 'skipped', 1, now())`)
	require.NoError(t, err)
	r := &Report{}
	require.NoError(t, checkDownstream(ctx, db, o, r))
	require.Empty(t, r.Violations)
	require.Equal(t, DownstreamFigures{UpstreamLoads: 2, Rows: 2, LoadedOnce: 2, TableEqualsUp: true}, *r.Downstream)

	// b loaded twice; c's row never sent and its run never loaded; d
	// without a row; x loaded downstream only; a row gone from the table.
	_, err = db.Exec(ctx, `
INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, finished_at)
VALUES ('chaos', 'replace_down', '2026-01-02', 'b', 'success', 2, now()), ('chaos', 'replace_down', '2026-01-03', 'x', 'success', 1, now()),
       ('chaos', 'replace', '2026-01-04', 'd', 'success', 1, now());
WITH up AS (
  INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, finished_at)
  VALUES ('chaos', 'replace', '2026-01-03', 'c', 'success', 1, now()) RETURNING id, partition_key, run_id)
INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id) SELECT 'replace_down', partition_key, run_id, id FROM up;
DELETE FROM `+downstreamTarget+` WHERE id = (SELECT min(id) FROM `+downstreamTarget+`)`)
	require.NoError(t, err)
	r = &Report{}
	require.NoError(t, checkDownstream(ctx, db, o, r))
	require.Equal(t, DownstreamFigures{UpstreamLoads: 4, Rows: 3, Unsent: 1, Missing: 1, LoadedOnce: 1, NotOnce: 3, Unexpected: 1}, *r.Downstream)
	require.Len(t, r.Violations, 5, "%q", r.Violations)
	require.Len(t, r.Notes, 3, "the evidence of each run not loaded once: %q", r.Notes)
	require.Contains(t, r.Notes[0], "run b")
	require.Contains(t, r.Notes[0], "2 successes")

	// e: the failover lost its upstream load after the relay had sent its
	// downstream event; the re-verification's reload sent another, and
	// the downstream run loaded twice. Explained, not a violation.
	_, err = db.Exec(ctx, `
WITH up AS (
  INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, finished_at, attributes)
  VALUES ('chaos', 'replace', '2026-01-05', 'e', 'success', 1, now(), '{"idem.reverify": "true"}') RETURNING id, partition_key, run_id)
INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, sent_at) SELECT 'replace_down', partition_key, run_id, id, now() FROM up;
INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, finished_at)
VALUES ('chaos', 'replace_down', '2026-01-05', 'e', 'success', 1, now()), ('chaos', 'replace_down', '2026-01-05', 'e', 'success', 1, now())`)
	require.NoError(t, err)
	r = &Report{}
	require.NoError(t, checkDownstream(ctx, db, o, r))
	require.Equal(t, 1, r.Downstream.TwiceLost)
	require.Equal(t, 3, r.Downstream.NotOnce, "e is not counted as loaded twice")
	require.Len(t, r.Violations, 5, "%q", r.Violations)

	// Without downstream events the check does nothing.
	r = &Report{}
	require.NoError(t, checkDownstream(ctx, db, Options{}, r))
	require.Nil(t, r.Downstream)
	require.Empty(t, r.Violations)
}
