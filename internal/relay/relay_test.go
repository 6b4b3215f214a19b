package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/internal/relay"
	"github.com/idem-data/idem/internal/results"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/natstest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const stream = "IDEM_EVENTS"

type fixture struct {
	db  *pgtest.DB
	srv *server.Server
	js  jetstream.JetStream
	s   jetstream.Stream
}

// setup starts NATS with the events stream capturing subjects (every
// dataset when none are given) and a migrated database. The tests do not
// run in parallel, so each can check that what it started has stopped.
func setup(t *testing.T, subjects ...string) *fixture {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	ctx := context.Background()
	if len(subjects) == 0 {
		subjects = []string{"idem.ready.>"}
	}
	srv := natstest.RunServer(t)
	js := natstest.JetStream(t, srv)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: subjects})
	require.NoError(t, err)
	db := audittest.NewDB(t)
	_, err = audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	return &fixture{db: db, srv: srv, js: js, s: s}
}

// config is a relay's config for the fixture's stream, with short delays.
func config() relay.Config {
	return relay.Config{Stream: stream, SubjectPrefix: "idem.ready", Interval: 20 * time.Millisecond}
}

func (f *fixture) relay(t *testing.T, js jetstream.JetStream, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(f.db.Pool, js, cfg, zerolog.Nop())
	require.NoError(t, err)
	return r
}

// queue writes one outbox row per partition for dataset, as a committed
// upstream load of "orders" would, and returns their upstream audit ids.
func (f *fixture) queue(t *testing.T, dataset string, partitions ...string) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	for _, p := range partitions {
		id, err := audittest.Start(ctx, f.db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "p", Dataset: "orders", Partition: p, RunID: "r1"}})
		require.NoError(t, err)
		b := &pgx.Batch{}
		require.NoError(t, audit.QueueEnqueueEvent(b, event(dataset, p, id)))
		require.NoError(t, f.db.Pool.SendBatch(ctx, b).Close())
		ids = append(ids, id)
	}
	return ids
}

func event(dataset, partition string, auditID int64) audit.OutboxEvent {
	return audit.OutboxEvent{AuditID: auditID, Event: schemas.PartitionReady{
		Dataset: dataset, Partition: partition, RunID: "r1", Force: true,
		Attributes: map[string]string{"triggered_by": "orders:" + partition + ":r1"},
	}}
}

// token is the token of the one outbox row of upstream attempt auditID.
func token(t *testing.T, f *fixture, auditID int64) string {
	t.Helper()
	var tok string
	require.NoError(t, f.db.Pool.QueryRow(context.Background(), "SELECT token::text FROM idem.outbox WHERE audit_id = $1", auditID).Scan(&tok))
	return tok
}

func (f *fixture) streamMsgs(t *testing.T) uint64 {
	t.Helper()
	info, err := f.s.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

// flush makes one pass and fails t on a database error.
func flush(t *testing.T, r *relay.Relay) relay.Pass {
	t.Helper()
	p, err := r.Flush(context.Background())
	require.NoError(t, err)
	return p
}

// run runs r until the test ends.
func run(t *testing.T, r *relay.Relay) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// gatedJS holds every publish until release is closed (or its context ends),
// after saying it started; the publish then goes through, or returns fail.
// The first holdFirst publishes are held until their context ends.
type gatedJS struct {
	jetstream.JetStream
	started   chan struct{}
	release   chan struct{}
	fail      error
	holdFirst int64
	calls     atomic.Int64
}

func gate(js jetstream.JetStream) *gatedJS {
	return &gatedJS{JetStream: js, started: make(chan struct{}, 1000), release: make(chan struct{})}
}

func (g *gatedJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	n := g.calls.Add(1)
	g.started <- struct{}{}
	if n <= g.holdFirst {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ack, err := g.JetStream.PublishMsg(ctx, m, opts...)
	if err == nil && g.fail != nil {
		return nil, g.fail
	}
	return ack, err
}

func TestFlushPublishesTheEventSchemasDerive(t *testing.T) {
	f := setup(t)
	ids := f.queue(t, "daily", "2026-11-01", "2026-11-02", "2026-11-03")
	// The same upstream attempt queueing the same event again is the same message.
	b := &pgx.Batch{}
	require.NoError(t, audit.QueueEnqueueEvent(b, event("daily", "2026-11-01", ids[0])))
	require.NoError(t, f.db.Pool.SendBatch(context.Background(), b).Close())
	require.EqualValues(t, 3, f.db.Int(t, "SELECT count(*) FROM idem.outbox"))

	r := f.relay(t, f.js, config())
	require.Equal(t, relay.Pass{Claimed: 3, Sent: 3}, flush(t, r))
	require.EqualValues(t, 3, f.streamMsgs(t))
	require.EqualValues(t, 3, f.db.Int(t, `SELECT count(*) FROM idem.outbox
		WHERE sent_at IS NOT NULL AND stream_seq IS NOT NULL AND attempts = 1 AND claimed_until IS NULL AND last_error IS NULL`))

	got := map[string]*jetstream.RawStreamMsg{}
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := f.s.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		got[m.Header.Get(jetstream.MsgIDHeader)] = m
	}
	m := got[fmt.Sprintf("daily:2026-11-02:r1:%d:%s", ids[1], token(t, f, ids[1]))]
	require.NotNil(t, m, "message ids: %v", got)
	require.Equal(t, "idem.ready.daily", m.Subject)
	require.JSONEq(t, `{"dataset":"daily","partition":"2026-11-02","run_id":"r1","force":true,
		"attributes":{"triggered_by":"orders:2026-11-02:r1"}}`, string(m.Data))
	require.EqualValues(t, m.Sequence, f.db.Int(t, "SELECT stream_seq FROM idem.outbox WHERE audit_id = $1", ids[1]))

	require.Equal(t, relay.Pass{}, flush(t, r), "sent rows are not sent again")

	// An event without attributes has none in its body.
	id, err := audittest.Start(context.Background(), f.db.Pool, audit.Attempt{RunKey: audit.RunKey{Pipeline: "p", Dataset: "orders", Partition: "x", RunID: "r2"}})
	require.NoError(t, err)
	b = &pgx.Batch{}
	require.NoError(t, audit.QueueEnqueueEvent(b, audit.OutboxEvent{AuditID: id, Event: schemas.PartitionReady{Dataset: "daily", Partition: "2026-11-04", RunID: "r2"}}))
	require.NoError(t, f.db.Pool.SendBatch(context.Background(), b).Close())
	require.Equal(t, relay.Pass{Claimed: 1, Sent: 1}, flush(t, r))
	m, err = f.s.GetMsg(context.Background(), 4)
	require.NoError(t, err)
	require.Equal(t, `{"dataset":"daily","partition":"2026-11-04","run_id":"r2"}`, string(m.Data))
}

func TestEnqueueRefusesAnEventThatCouldNeverBePublished(t *testing.T) {
	err := audit.QueueEnqueueEvent(&pgx.Batch{}, event("Not-A-Dataset", "2026-11-01", 1))
	require.ErrorContains(t, err, "dataset")
}

func TestFailingRowBacksOffAndDoesNotBlockNewerRows(t *testing.T) {
	// No stream listens on idem.ready.weekly: its publish fails at once.
	f := setup(t, "idem.ready.daily")
	f.queue(t, "weekly", "2026-11-01")
	f.queue(t, "daily", "2026-11-01", "2026-11-02")
	cfg := config()
	cfg.Batch = 1
	r := f.relay(t, f.js, cfg)

	require.Equal(t, relay.Pass{Claimed: 1, Failed: 1}, flush(t, r), "the oldest row goes first")
	const row = "FROM idem.outbox WHERE dataset = 'weekly'"
	require.EqualValues(t, 1, f.db.Int(t, "SELECT count(*) "+row+
		" AND sent_at IS NULL AND attempts = 1 AND last_error IS NOT NULL AND claimed_until IS NULL"))
	retryIn := func() float64 {
		var s float64
		require.NoError(t, f.db.Pool.QueryRow(context.Background(),
			"SELECT extract(epoch FROM next_attempt_at - clock_timestamp())::float8 "+row).Scan(&s))
		return s
	}
	require.InDelta(t, 1.5, retryIn(), 0.6, "first delay: RetryDelay with jitter, 1-2 s")

	// The failed row went behind: the newer rows go out, one per pass.
	require.Equal(t, relay.Pass{Claimed: 1, Sent: 1}, flush(t, r))
	require.Equal(t, relay.Pass{Claimed: 1, Sent: 1}, flush(t, r))
	require.Equal(t, relay.Pass{}, flush(t, r), "the failed row is not due yet")
	require.EqualValues(t, 2, f.streamMsgs(t))

	// Due again, it fails again and waits twice as long.
	f.db.Exec(t, "UPDATE idem.outbox SET next_attempt_at = now() WHERE dataset = 'weekly'")
	require.Equal(t, relay.Pass{Claimed: 1, Failed: 1}, flush(t, r))
	require.EqualValues(t, 2, f.db.Int(t, "SELECT attempts "+row))
	require.InDelta(t, 3, retryIn(), 1.1, "second delay: 2-4 s")
}

func TestNoTransactionIsHeldWhilePublishing(t *testing.T) {
	f := setup(t)
	f.queue(t, "daily", "2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04")
	// The slow relay has a pool of its own, named, so its sessions can be watched.
	pcfg, err := pgxpool.ParseConfig(f.db.URL)
	require.NoError(t, err)
	pcfg.ConnConfig.RuntimeParams["application_name"] = "slow-relay"
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	defer pool.Close()
	slowJS := gate(f.js)
	cfg := config()
	cfg.Batch = 2
	slow, err := relay.New(pool, slowJS, cfg, zerolog.Nop())
	require.NoError(t, err)

	var wg sync.WaitGroup
	var slowPass relay.Pass
	var slowErr error
	wg.Go(func() { slowPass, slowErr = slow.Flush(context.Background()) })
	<-slowJS.started
	<-slowJS.started // both claimed rows are being published

	require.EqualValues(t, 0, f.db.Int(t, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = 'slow-relay' AND (xact_start IS NOT NULL OR state LIKE 'idle in transaction%')`),
		"a relay session is inside a transaction while it publishes")
	require.EqualValues(t, 0, f.db.Int(t, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		WHERE c.relname = 'outbox' AND l.pid <> pg_backend_pid()`), "locks on idem.outbox are held while publishing")

	// Another relay takes the other rows meanwhile, and only those.
	require.Equal(t, relay.Pass{Claimed: 2, Sent: 2}, flush(t, f.relay(t, f.js, cfg)))
	close(slowJS.release)
	wg.Wait()
	require.NoError(t, slowErr)
	require.Equal(t, relay.Pass{Claimed: 2, Sent: 2}, slowPass)
	require.EqualValues(t, 4, f.streamMsgs(t))
}

func TestRelaysShareRowsWithoutSendingOneTwice(t *testing.T) {
	f := setup(t)
	var parts []string
	for i := range 60 {
		parts = append(parts, fmt.Sprintf("p%02d", i))
	}
	f.queue(t, "daily", parts...)
	// Count what the relays send, not what the stream kept: JetStream's
	// duplicate window would hide a double publish.
	counting := gate(f.js)
	close(counting.release)
	var published atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		cfg := config()
		cfg.Batch = 7
		r := f.relay(t, counting, cfg)
		r.Published = func(n int) { published.Add(int64(n)) }
		wg.Go(func() {
			for {
				if p, err := r.Flush(context.Background()); err != nil || p.Claimed == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 60, counting.calls.Load(), "publishes")
	require.EqualValues(t, 60, published.Load())
	require.EqualValues(t, 60, f.streamMsgs(t))
	require.EqualValues(t, 0, f.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL"))
}

func TestPublishedButNotMarkedIsDeduplicated(t *testing.T) {
	f := setup(t)
	f.queue(t, "daily", "2026-11-01", "2026-11-02", "2026-11-03")
	// The PubAck is lost: the relay believes the publish failed.
	lost := gate(f.js)
	lost.fail = errors.New("connection lost before the PubAck")
	close(lost.release)
	require.Equal(t, relay.Pass{Claimed: 3, Failed: 3}, flush(t, f.relay(t, lost, config())))
	require.EqualValues(t, 3, f.streamMsgs(t))

	f.db.Exec(t, "UPDATE idem.outbox SET next_attempt_at = now()")
	require.Equal(t, relay.Pass{Claimed: 3, Sent: 3}, flush(t, f.relay(t, f.js, config())))
	require.EqualValues(t, 3, f.streamMsgs(t), "the re-publish was stored twice")
}

// TestAReusedAuditIDIsPublishedAgain: a failover to a standby that lacks
// the last commits loses the audit sequence's last values with them, and
// the next attempt can be given the audit id of one that was lost after
// its downstream event and its result were published. The new attempt's
// event and result are new messages: with the audit id alone in their
// message ids, JetStream dropped them as duplicates of the lost attempt's.
func TestAReusedAuditIDIsPublishedAgain(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	rs, err := f.js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_RESULTS", Subjects: []string{"idem.result.>"}})
	require.NoError(t, err)
	cfg := config()
	cfg.ResultsStream, cfg.ResultsSubjectPrefix = "IDEM_RESULTS", "idem.result"
	r := f.relay(t, f.js, cfg)
	k := audit.RunKey{Pipeline: "p", Dataset: "orders", Partition: "2026-11-01", RunID: "r1"}
	attempt := func(id int64, status string) {
		t.Helper()
		b := &pgx.Batch{}
		require.NoError(t, audit.QueueEnqueueEvent(b, event("daily", "2026-11-01", id)))
		require.NoError(t, f.db.Pool.SendBatch(ctx, b).Close())
		body, err := json.Marshal(results.Result{Pipeline: "p", Dataset: "orders", Partition: "2026-11-01", RunID: "r1",
			Status: status, Stream: stream, StreamSeq: 7, AuditID: id})
		require.NoError(t, err)
		require.NoError(t, audit.EnqueueResult(ctx, f.db.Pool, k, id, body, status == results.StatusSkipped))
		require.Equal(t, relay.Pass{Claimed: 2, Sent: 2}, flush(t, r))
	}
	id, err := audittest.Start(ctx, f.db.Pool, audit.Attempt{RunKey: k})
	require.NoError(t, err)
	attempt(id, results.StatusSkipped)
	// The failover: the attempt's rows are gone, its messages are not; the
	// next attempt is given the same audit id.
	f.db.Exec(t, "DELETE FROM idem.outbox WHERE audit_id = $1", id)
	attempt(id, results.StatusLoaded)

	require.EqualValues(t, 2, f.streamMsgs(t), "the second attempt's downstream event was dropped as a duplicate")
	info, err := rs.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs, "the second attempt's result was dropped as a duplicate")
	m, err := rs.GetMsg(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, results.StatusLoaded, m.Header.Get(results.HeaderStatus))
}

func TestLapsedClaimIsTakenOver(t *testing.T) {
	f := setup(t)
	f.queue(t, "daily", "2026-11-01", "2026-11-02")
	r := f.relay(t, f.js, config())
	// A relay claimed the first row and died.
	f.db.Exec(t, "UPDATE idem.outbox SET claimed_until = now() + interval '1 hour' WHERE partition_key = '2026-11-01'")
	require.Equal(t, relay.Pass{Claimed: 1, Sent: 1}, flush(t, r))
	require.Equal(t, relay.Pass{}, flush(t, r))
	f.db.Exec(t, "UPDATE idem.outbox SET claimed_until = now() - interval '1 second' WHERE partition_key = '2026-11-01'")
	require.Equal(t, relay.Pass{Claimed: 1, Sent: 1}, flush(t, r))
}

func TestStoppedServerBacksOffEveryRowWithinOneTimeout(t *testing.T) {
	f := setup(t)
	var parts []string
	for i := range 10 {
		parts = append(parts, fmt.Sprintf("p%02d", i))
	}
	f.queue(t, "daily", parts...)
	cfg := config()
	cfg.PublishTimeout = time.Second
	cfg.Lease = 3 * time.Second
	r := f.relay(t, f.js, cfg)
	port, dir := f.srv.Addr().(*net.TCPAddr).Port, filepath.Dir(f.srv.StoreDir())
	f.srv.Shutdown()
	f.srv.WaitForShutdown()

	start := time.Now()
	require.Equal(t, relay.Pass{Claimed: 10, Failed: 10}, flush(t, r))
	// Together they take one timeout; one after the other, ten would take
	// 10 s. The bound leaves a loaded machine four timeouts of slack.
	require.Less(t, time.Since(start), 5*time.Second, "publishes wait one after the other")
	require.EqualValues(t, 10, f.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL AND attempts = 1 AND next_attempt_at > now()"))

	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second))
	f.db.Exec(t, "UPDATE idem.outbox SET next_attempt_at = now()")
	require.Eventually(t, func() bool {
		_, err := r.Flush(context.Background())
		return err == nil && f.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL") == 0
	}, 20*time.Second, 100*time.Millisecond)
	require.EqualValues(t, 10, f.streamMsgs(t))
}

func TestStoppingReleasesRowsUntriedAndMakesALastPass(t *testing.T) {
	f := setup(t)
	f.queue(t, "daily", "2026-11-01", "2026-11-02")
	// This pass's publishes hang until the relay stops; the last pass's go through.
	held := gate(f.js)
	held.holdFirst = 2
	close(held.release)
	r := f.relay(t, held, config())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	<-held.started
	<-held.started
	cancel()
	<-done
	require.EqualValues(t, 4, held.calls.Load())
	require.EqualValues(t, 2, f.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NOT NULL AND attempts = 1"),
		"the interrupted pass spent an attempt, or the last pass did not send")
	require.EqualValues(t, 2, f.streamMsgs(t))
}

func TestSentRowsPastTheRetentionAreDeleted(t *testing.T) {
	f := setup(t, "idem.ready.daily")
	f.queue(t, "daily", "2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05")
	f.queue(t, "weekly", "2026-11-01") // never published: no stream listens
	require.Equal(t, relay.Pass{Claimed: 6, Sent: 5, Failed: 1}, flush(t, f.relay(t, f.js, config())))
	// Past the retention, and past idem.retention_floor (7 days), under
	// which nothing is deleted.
	f.db.Exec(t, "UPDATE idem.outbox SET sent_at = now() - interval '8 days' WHERE dataset = 'daily' AND partition_key IN ('2026-11-01', '2026-11-02', '2026-11-03')")
	f.db.Exec(t, "UPDATE idem.outbox SET created_at = now() - interval '30 days' WHERE dataset = 'weekly'")

	cfg := config()
	cfg.Retention = 7 * 24 * time.Hour
	cfg.PurgeInterval = 20 * time.Millisecond
	cfg.PurgeBatch = 2
	run(t, f.relay(t, f.js, cfg))
	require.Eventually(t, func() bool {
		return f.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NOT NULL") == 2
	}, 10*time.Second, 20*time.Millisecond)
	require.EqualValues(t, 0, f.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at < now() - interval '7 days'"))
	require.EqualValues(t, 1, f.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL"), "a pending row was deleted")
}

func TestBacklogGaugeFollowsPendingRows(t *testing.T) {
	f := setup(t, "idem.ready.daily")
	f.queue(t, "weekly", "2026-11-01", "2026-11-02") // no stream listens yet
	f.db.Exec(t, "UPDATE idem.outbox SET created_at = now() - interval '90 seconds' WHERE partition_key = '2026-11-01'")
	m := metrics.New("test")
	cfg := config()
	cfg.BacklogInterval = 20 * time.Millisecond
	r := f.relay(t, f.js, cfg)
	r.Backlog = func(b audit.OutboxBacklog) { m.OutboxBacklogSet(b.Pending, b.Oldest) }
	run(t, r)

	gauge := func(name string) float64 {
		mfs, err := m.Registry.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	require.Eventually(t, func() bool {
		return gauge("idem_outbox_backlog") == 2 && gauge("idem_outbox_oldest_pending_seconds") >= 90
	}, 10*time.Second, 20*time.Millisecond)

	_, err := f.js.UpdateStream(context.Background(), jetstream.StreamConfig{Name: stream, Subjects: []string{"idem.ready.>"}})
	require.NoError(t, err)
	f.db.Exec(t, "UPDATE idem.outbox SET next_attempt_at = now()")
	require.Eventually(t, func() bool {
		return gauge("idem_outbox_backlog") == 0 && gauge("idem_outbox_oldest_pending_seconds") == 0
	}, 10*time.Second, 20*time.Millisecond)
}

func TestLegacyRowsArePublishedAfterTheUpgrade(t *testing.T) {
	srv := natstest.RunServer(t)
	js := natstest.JetStream(t, srv)
	s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: stream, Subjects: []string{"idem.ready.>"}})
	require.NoError(t, err)
	db := pgtest.NewDB(t)
	ctx := context.Background()
	// A database an idem with schema v3 left a pending row in.
	all, err := audit.Migrations()
	require.NoError(t, err)
	db.Exec(t, "CREATE SCHEMA idem; CREATE TABLE idem.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())")
	for _, m := range all[:3] {
		db.Exec(t, m.SQL)
		db.Exec(t, "INSERT INTO idem.schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name)
	}
	// Its `started` row, as that idem wrote it: today's statements name
	// columns v3 did not have.
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt)
		VALUES ('p', 'orders', '2026-11-01', '2026-11-01', 'r1', 'started', 1) RETURNING id`).Scan(&id))
	body, err := json.Marshal(event("daily", "2026-11-01", id).Event)
	require.NoError(t, err)
	db.Exec(t, "INSERT INTO idem.outbox (subject, msg_id, body, audit_id) VALUES ('idem.ready.daily', $1, $2, $3)",
		fmt.Sprintf("daily:2026-11-01:r1:%d", id), body, id)

	applied, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, applied, len(all)-3)
	r, err := relay.New(db.Pool, js, config(), zerolog.Nop())
	require.NoError(t, err)
	p, err := r.Flush(ctx)
	require.NoError(t, err)
	require.Equal(t, relay.Pass{Claimed: 1, Sent: 1}, p)
	m, err := s.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "idem.ready.daily", m.Subject)
	require.Equal(t, fmt.Sprintf("daily:2026-11-01:r1:%d", id), m.Header.Get(jetstream.MsgIDHeader))
	require.JSONEq(t, string(body), string(m.Data))
}

func TestConfigNamesWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		cfg  relay.Config
		want string
	}{
		{relay.Config{SubjectPrefix: "idem.ready"}, "Stream is empty"},
		{relay.Config{Stream: stream}, "SubjectPrefix is empty"},
		{relay.Config{Stream: stream, SubjectPrefix: "x", Lease: time.Second, PublishTimeout: 2 * time.Second}, "Lease 1s must outlast PublishTimeout 2s"},
		{relay.Config{Stream: stream, SubjectPrefix: "x", Retention: -time.Hour}, "Retention is -1h0m0s"},
		{relay.Config{Stream: stream, SubjectPrefix: "x", RetryDelay: time.Minute, MaxRetryDelay: time.Second}, "MaxRetryDelay 1s is under RetryDelay 1m0s"},
	} {
		_, err := relay.New(nil, nil, tc.cfg, zerolog.Nop())
		require.ErrorContains(t, err, tc.want)
	}
	r, err := relay.New(nil, nil, relay.Config{Stream: stream, SubjectPrefix: "x"}, zerolog.Nop())
	require.NoError(t, err)
	require.NotNil(t, r)
}

// TestResultRowsArePublishedWithTheirHeaders: a result row goes to the
// results stream with its status, its event's stream and sequence as
// headers and a message id naming them and the attempt, all read by the
// claim from the body; a result whose event names no stream (a load the
// re-verification ran) is published too, never held back.
func TestResultRowsArePublishedWithTheirHeaders(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	rs, err := f.js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_RESULTS", Subjects: []string{"idem.result.>"}})
	require.NoError(t, err)
	k := audit.RunKey{Pipeline: "p", Dataset: "orders", Partition: "2026-11-01", RunID: "r1"}
	id, err := audittest.Start(ctx, f.db.Pool, audit.Attempt{RunKey: k})
	require.NoError(t, err)
	body, err := json.Marshal(results.Result{Pipeline: "p", Dataset: "orders", Partition: "2026-11-01", RunID: "r1",
		Status: results.StatusLoaded, Stream: stream, StreamSeq: 41, AuditID: id})
	require.NoError(t, err)
	require.NoError(t, audit.EnqueueResult(ctx, f.db.Pool, k, id, body, false))
	k2 := k
	k2.Partition = "2026-11-02"
	id2, err := audittest.Start(ctx, f.db.Pool, audit.Attempt{RunKey: k2})
	require.NoError(t, err)
	body2, err := json.Marshal(results.Result{Pipeline: "p", Dataset: "orders", Partition: "2026-11-02", RunID: "r1",
		Status: results.StatusSkipped, StreamSeq: 42, AuditID: id2})
	require.NoError(t, err)
	require.NoError(t, audit.EnqueueResult(ctx, f.db.Pool, k2, id2, body2, false))

	cfg := config()
	cfg.ResultsStream, cfg.ResultsSubjectPrefix = "IDEM_RESULTS", "idem.result"
	r := f.relay(t, f.js, cfg)
	require.Equal(t, relay.Pass{Claimed: 2, Sent: 2}, flush(t, r))
	// The relay publishes a claim's rows at once: find each by its event.
	bySeq := map[string]*jetstream.RawStreamMsg{}
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := rs.GetMsg(ctx, seq)
		require.NoError(t, err)
		bySeq[m.Header.Get(results.HeaderEventSeq)] = m
	}
	m := bySeq["41"]
	require.NotNil(t, m)
	require.Equal(t, "idem.result.orders", m.Subject)
	require.Equal(t, results.MsgID(stream, 41, id, token(t, f, id)), m.Header.Get(jetstream.MsgIDHeader))
	require.Equal(t, stream, m.Header.Get(results.HeaderEventStream))
	require.Equal(t, "41", m.Header.Get(results.HeaderEventSeq))
	require.Equal(t, results.StatusLoaded, m.Header.Get(results.HeaderStatus))
	require.JSONEq(t, string(body), string(m.Data), "the body as written")
	m = bySeq["42"]
	require.NotNil(t, m)
	require.Equal(t, results.StatusSkipped, m.Header.Get(results.HeaderStatus))
	require.Equal(t, "42", m.Header.Get(results.HeaderEventSeq))
	require.Equal(t, results.MsgID("", 42, id2, token(t, f, id2)), m.Header.Get(jetstream.MsgIDHeader))
}
