package reverify_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/reverify"
	"github.com/idem-data/idem/internal/service"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/natstest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }

// A warehouse that lost loads the consumer acknowledged is what a failover
// to a lagging standby leaves: events the durable consumer delivered and
// acked, and no verdict for them in the audit. These tests make exactly
// that state on a real PostgreSQL and a real JetStream (the events are
// fetched and acked by hand, never loaded), then run a pass.

const cfgYAML = `pipeline: rv
nats:
  url: %s
datasets:
  events:
    strategy: append_dedupe
    target: raw.events
    key: [event_id]
    view: raw.latest_events
    partition_column: event_date
    source: SELECT event_id, event_date, amount FROM staging.events WHERE event_date = @partition
  customers:
    strategy: merge
    target: analytics.customers
    key: [customer_id]
    version_column: updated_at
    source: SELECT customer_id, tier, updated_at FROM staging.customers WHERE updated_at::date = @partition
`

const tablesSQL = `
CREATE SCHEMA staging; CREATE SCHEMA raw; CREATE SCHEMA analytics;
CREATE TABLE staging.events (event_id int, event_date date, amount int);
CREATE TABLE raw.events (event_id int, event_date date NOT NULL, amount int, run_id text, load_seq bigint);
CREATE TABLE staging.customers (customer_id int, tier text, updated_at timestamptz);
CREATE TABLE analytics.customers (customer_id int PRIMARY KEY, tier text, updated_at timestamptz);
INSERT INTO staging.events VALUES (1, '2026-11-01', 10), (2, '2026-11-01', 20);
INSERT INTO staging.customers VALUES (7, 'gold', '2026-11-01 10:00+00');
`

type rig struct {
	t   *testing.T
	js  jetstream.JetStream
	db  *pgtest.DB
	h   *handlers.Handler
	cfg *config.Config
	rv  *reverify.Reverifier
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := context.Background()
	ns := natstest.RunServer(t)
	nc := natstest.Connect(t, ns)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	db := audittest.NewDB(t)
	_, err = audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	db.Exec(t, tablesSQL)
	cfg, err := config.Parse([]byte(fmt.Sprintf(cfgYAML, ns.ClientURL())), nil)
	require.NoError(t, err)
	require.NoError(t, consumer.EnsureStreams(ctx, js, service.StreamsConfig(cfg)))
	dss, err := service.Datasets(cfg)
	require.NoError(t, err)
	h := &handlers.Handler{DB: db.Pool, Pipeline: cfg.Pipeline, Datasets: dss, Log: zerolog.Nop()}
	for name, err := range h.Prepare(ctx) {
		require.NoError(t, err, name)
	}
	rv := reverify.New(reverify.Config{JS: js, Stream: cfg.NATS.Stream, Consumer: cfg.NATS.Consumer, SubjectPrefix: cfg.NATS.SubjectPrefix,
		DLQStream: cfg.NATS.DLQStream, DLQSubjectPrefix: cfg.NATS.DLQSubjectPrefix, DB: db.Pool, Pipeline: cfg.Pipeline,
		Loader: h, Log: zerolog.Nop(), BackfillConsumer: service.StreamsConfig(cfg).BackfillName()})
	return &rig{t: t, js: js, db: db, h: h, cfg: cfg, rv: rv}
}

// publish stores an event and returns its stream sequence.
func (r *rig) publish(dataset, partition, runID string) uint64 {
	r.t.Helper()
	ack, err := r.js.Publish(context.Background(), "idem.ready."+dataset,
		[]byte(fmt.Sprintf(`{"dataset":%q,"partition":%q,"run_id":%q}`, dataset, partition, runID)))
	require.NoError(r.t, err)
	return ack.Sequence
}

// ackAll has the durable consumer deliver and acknowledge every event,
// loading none: what the new primary knows of them is nothing.
func (r *rig) ackAll(n int) { r.ackAllOf(r.cfg.NATS.Consumer, n) }

func (r *rig) ackAllOf(durable string, n int) {
	r.t.Helper()
	ctx := context.Background()
	c, err := r.js.Consumer(ctx, r.cfg.NATS.Stream, durable)
	require.NoError(r.t, err)
	got := 0
	for got < n {
		batch, err := c.Fetch(n-got, jetstream.FetchMaxWait(2*time.Second))
		require.NoError(r.t, err)
		for m := range batch.Messages() {
			require.NoError(r.t, m.DoubleAck(ctx))
			got++
		}
	}
}

// load runs an event through the handler as the consumer would have.
func (r *rig) load(dataset, partition, runID string, seq uint64) {
	r.t.Helper()
	ev, err := decode(r.h, dataset, partition, runID)
	require.NoError(r.t, err)
	_, err = r.h.Handle(context.Background(), ev, handlers.Meta{StreamSeq: seq})
	require.NoError(r.t, err, "%s %s %s", dataset, partition, runID)
}

// TestPassReloadsLostLoadsInStreamOrder: two runs of one append_dedupe
// partition, both lost: the pass loads both, in stream order, so the view
// ends on the later run; a second pass finds nothing.
func TestPassReloadsLostLoadsInStreamOrder(t *testing.T) {
	r := newRig(t)
	r.publish("events", "2026-11-01", "r1")
	r.db.Exec(t, "UPDATE staging.events SET amount = amount + 1") // r2 reads newer staging rows
	r.publish("events", "2026-11-01", "r2")
	r.ackAll(2)

	res := r.rv.Pass(context.Background(), "test")
	require.NoError(t, res.Err)
	require.Equal(t, 2, res.Checked)
	require.Equal(t, 2, res.Missing)
	require.Equal(t, 2, res.Reloaded)
	require.EqualValues(t, 2, r.db.Int(t, "SELECT count(*) FROM idem.run_ledger"))
	require.EqualValues(t, 32, r.db.Int(t, "SELECT sum(amount) FROM raw.latest_events"), "the staging rows as of now")
	require.Equal(t, "r1,r2", r.str("SELECT string_agg(DISTINCT run_id, ',' ORDER BY run_id) FROM raw.events"), "both runs appended")
	require.Equal(t, "r2", r.str("SELECT run_id FROM raw.events ORDER BY load_seq DESC LIMIT 1"), "the view's latest run is r2")

	again := r.rv.Pass(context.Background(), "test again")
	require.NoError(t, again.Err)
	require.Zero(t, again.Missing+again.Reloaded, "a second pass finds nothing")
}

// TestPassReadsTheWholeWindow: a window of more events than one fetch
// brings, after events older than it: the pass reads every one of the
// window, and none before it.
func TestPassReadsTheWholeWindow(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for i := range 3 {
		r.publish("customers", "2026-11-01", fmt.Sprintf("old%d", i))
	}
	time.Sleep(1100 * time.Millisecond)
	mark := time.Now()
	const n = 520
	for i := range n {
		r.publish("events", "2026-11-01", fmt.Sprintf("r%03d", i))
	}
	r.ackAll(n + 3)
	rv := reverify.New(reverify.Config{JS: r.js, Stream: r.cfg.NATS.Stream, Consumer: r.cfg.NATS.Consumer, SubjectPrefix: r.cfg.NATS.SubjectPrefix,
		DLQStream: r.cfg.NATS.DLQStream, DLQSubjectPrefix: r.cfg.NATS.DLQSubjectPrefix, DB: r.db.Pool, Pipeline: r.cfg.Pipeline,
		Loader: r.h, Log: zerolog.Nop(), Window: time.Hour, Now: func() time.Time { return mark.Add(time.Hour) }})
	res := rv.Pass(ctx, "test")
	require.NoError(t, res.Err)
	require.Equal(t, n, res.Checked, "every event of the window, none older")
	require.Equal(t, n, res.Reloaded)
	require.Zero(t, r.db.Int(t, "SELECT count(*) FROM idem.run_ledger WHERE run_id LIKE 'old%'"))
}

// TestTheWindowIsFoundInTheStreamItself: the start of a window is the
// first message stored at or after its time, found from the messages
// (deleted ones skipped), and the next event after a sequence is asked of
// the stream for the window's subjects only.
func TestTheWindowIsFoundInTheStreamItself(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	s, err := r.js.Stream(ctx, r.cfg.NATS.Stream)
	require.NoError(t, err)
	first, err := reverify.FirstSince(ctx, s, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, first, "an empty stream: from its first sequence on")

	a := r.publish("events", "2026-11-01", "a")
	b := r.publish("events", "2026-11-01", "b")
	time.Sleep(50 * time.Millisecond)
	mark := time.Now()
	time.Sleep(50 * time.Millisecond)
	c := r.publish("events", "2026-11-01", "c")
	d := r.publish("customers", "2026-11-01", "d")
	_, err = r.js.Publish(ctx, "idem.backfill.events", []byte(`{"dataset":"events","partition":"2026-11-02","run_id":"backfill__e"}`))
	require.NoError(t, err)
	e := d + 1

	for _, c := range []struct {
		since time.Time
		want  uint64
	}{{mark.Add(-time.Hour), a}, {mark, c}, {time.Now().Add(time.Hour), e + 1}} {
		got, err := reverify.FirstSince(ctx, s, c.since)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "since %s", c.since)
	}
	require.NoError(t, s.DeleteMsg(ctx, c))
	live := []string{"idem.ready.>"}
	both := []string{"idem.ready.>", "idem.backfill.>"}
	got, err := reverify.FirstSince(ctx, s, mark)
	require.NoError(t, err)
	require.Greater(t, got, b, "nothing older than the window")
	next, err := reverify.NextOf(ctx, s, got, both)
	require.NoError(t, err)
	require.Equal(t, d, next, "a deleted message is skipped")
	for _, c := range []struct {
		from     uint64
		subjects []string
		want     uint64
	}{{a, live, a}, {b + 1, live, d}, {d + 1, live, 0}, {d + 1, both, e}, {e + 1, both, 0}} {
		got, err := reverify.NextOf(ctx, s, c.from, c.subjects)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "from %d on %v", c.from, c.subjects)
	}
}

// TestPassReloadsLostBackfillLoads: each lane's durable has its own
// position; a backfill event its durable acked is reloaded like a live
// one, and one it has not delivered yet is left to it.
func TestPassReloadsLostBackfillLoads(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	body := func(partition, run string) []byte {
		return []byte(fmt.Sprintf(`{"dataset":"events","partition":%q,"run_id":%q}`, partition, run))
	}
	_, err := r.js.Publish(ctx, "idem.backfill.events", body("2026-11-01", "backfill__1"))
	require.NoError(t, err)
	r.publish("customers", "2026-11-01", "live_1")
	r.ackAllOf(service.StreamsConfig(r.cfg).BackfillName(), 1)
	r.ackAll(1)
	_, err = r.js.Publish(ctx, "idem.backfill.events", body("2026-11-02", "backfill__1")) // not delivered yet
	require.NoError(t, err)

	res := r.rv.Pass(ctx, "test")
	require.NoError(t, res.Err)
	require.Equal(t, 2, res.Checked, "the backfill event its durable acked, and the live one")
	require.Equal(t, 2, res.Reloaded)
	require.EqualValues(t, 1, r.db.Int(t, "SELECT count(*) FROM idem.run_ledger WHERE run_id = 'backfill__1'"))
}

// TestPassRestoresTheAcknowledgedState: the later run's load survived, the
// earlier one's did not. On the old primary the lost load committed after
// every load the standby kept (its WAL is a prefix), as a redelivered event
// does: loading it again last restores what was acknowledged. A merge's
// version column still keeps the newest version.
func TestPassRestoresTheAcknowledgedState(t *testing.T) {
	r := newRig(t)
	r.publish("events", "2026-11-01", "r1")
	r.publish("customers", "2026-11-01", "c1")
	r.db.Exec(t, "UPDATE staging.events SET amount = amount + 1; UPDATE staging.customers SET tier = 'platinum', updated_at = updated_at + interval '1 hour'")
	s2 := r.publish("events", "2026-11-01", "r2")
	c2 := r.publish("customers", "2026-11-01", "c2")
	r.ackAll(4)
	r.load("events", "2026-11-01", "r2", s2)
	r.load("customers", "2026-11-01", "c2", c2)
	r.db.Exec(t, "UPDATE staging.customers SET tier = 'gold', updated_at = updated_at - interval '1 hour'")

	res := r.rv.Pass(context.Background(), "test")
	require.NoError(t, res.Err)
	require.Equal(t, 2, res.Missing)
	require.Equal(t, 2, res.Reloaded)
	require.Equal(t, "r1", r.str("SELECT run_id FROM raw.events ORDER BY load_seq DESC LIMIT 1"), "the lost load is the latest again")
	require.Equal(t, "platinum", r.str("SELECT tier FROM analytics.customers WHERE customer_id = 7"), "merge keeps the newest version")
}

// TestLoadsWaitForANewServersPass: a server that is not the one last
// verified holds every load but the pass's own until the pass is done.
func TestLoadsWaitForANewServersPass(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	cur, err := audit.CurrentIdentity(ctx, r.db.Pool)
	require.NoError(t, err)
	old := audit.Identity{SystemIdentifier: cur.SystemIdentifier, Timeline: cur.Timeline - 1}
	require.NoError(t, audit.StoreIdentity(ctx, r.db.Pool, "rv", old)) // as a promoted standby carries it
	require.NoError(t, r.rv.Init(ctx))
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.rv.Verified(wctx), context.DeadlineExceeded, "loads are held")

	res := r.rv.Pass(ctx, "test")
	require.NoError(t, res.Err)
	require.NoError(t, r.rv.Verified(ctx), "released by the pass")
	stored, ok, err := audit.StoredIdentity(ctx, r.db.Pool, "rv")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, cur, stored)
}

func decode(h *handlers.Handler, dataset, partition, runID string) (schemas.Event, error) {
	return schemas.Decode("idem.ready."+dataset, []byte(fmt.Sprintf(`{"dataset":%q,"partition":%q,"run_id":%q}`, dataset, partition, runID)), h.Lookup)
}

func (r *rig) str(sql string) string {
	r.t.Helper()
	var s string
	require.NoError(r.t, r.db.Pool.QueryRow(context.Background(), sql).Scan(&s))
	return s
}

// advisoryLocks counts the advisory locks any backend holds or waits for
// in the rig's database, read from a connection of their own.
// takeLease takes the pipeline's re-verification lease, as another
// replica's pass would.
func (r *rig) takeLease(ttl time.Duration) *audit.Lease {
	r.t.Helper()
	l, ok, err := audit.TryLease(context.Background(), r.db.Pool, audit.ReverifyLease("rv"), ttl)
	require.NoError(r.t, err)
	require.True(r.t, ok)
	return l
}

func (r *rig) advisoryLocks() int64 {
	r.t.Helper()
	return r.db.Int(r.t, `SELECT count(*) FROM pg_locks
	                       WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
}

// another is a second replica of the rig's pipeline.
func (r *rig) another() *reverify.Reverifier { return r.anotherWith(r.h) }

func (r *rig) anotherWith(l reverify.Loader) *reverify.Reverifier {
	return reverify.New(reverify.Config{JS: r.js, Stream: r.cfg.NATS.Stream, Consumer: r.cfg.NATS.Consumer, SubjectPrefix: r.cfg.NATS.SubjectPrefix,
		DLQStream: r.cfg.NATS.DLQStream, DLQSubjectPrefix: r.cfg.NATS.DLQSubjectPrefix, DB: r.db.Pool, Pipeline: r.cfg.Pipeline,
		Loader: l, Log: zerolog.Nop()})
}

// TestPassWaitsForAnotherReplicasPass: while another replica's pass holds
// the pipeline's lease, a pass waits, holding no advisory lock (behind a
// transaction pooler a session lock would stay on a server connection
// other clients get); it runs once the lease is given back, and leaves no
// lock behind.
func TestPassWaitsForAnotherReplicasPass(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.publish("events", "2026-11-01", "r1")
	r.ackAll(1)
	other := r.takeLease(time.Minute)

	done := make(chan reverify.Result, 1)
	go func() { done <- r.rv.Pass(ctx, "test") }()
	var locks atomic.Int64
	require.Never(t, func() bool {
		locks.Add(r.advisoryLocks())
		return len(done) > 0
	}, 1500*time.Millisecond, 100*time.Millisecond, "the pass waits for the other replica's")
	require.Zero(t, locks.Load(), "no advisory lock while waiting")
	require.NoError(t, other.Release(ctx))
	select {
	case res := <-done:
		require.NoError(t, res.Err)
		require.Equal(t, 1, res.Reloaded)
	case <-time.After(30 * time.Second):
		t.Fatal("the pass did not run once the lease was given back")
	}
	require.Zero(t, r.advisoryLocks(), "no advisory lock after the pass")
	_, ok, err := audit.TryLease(ctx, r.db.Pool, audit.ReverifyLease("rv"), time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "the pass gave the lease back")
}

// TestPassTakesOverAKilledReplicasLease: a replica killed mid-pass never
// gives its lease back; the next pass runs once it expires.
func TestPassTakesOverAKilledReplicasLease(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.publish("events", "2026-11-01", "r1")
	r.ackAll(1)
	r.takeLease(time.Second) // never given back
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res := r.rv.Pass(pctx, "test")
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.Reloaded)
}

// TestTwoReplicasTakeTurns: two replicas' passes at once: one reloads what
// was lost, the other, whose turn comes after, finds nothing left to do.
func TestTwoReplicasTakeTurns(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.publish("events", "2026-11-01", "r1")
	r.publish("customers", "2026-11-01", "c1")
	r.ackAll(2)
	results := make(chan reverify.Result, 2)
	for _, rv := range []*reverify.Reverifier{r.rv, r.another()} {
		go func() { results <- rv.Pass(ctx, "test") }()
	}
	var missing []int
	for range 2 {
		res := <-results
		require.NoError(t, res.Err)
		missing = append(missing, res.Missing)
	}
	require.ElementsMatch(t, []int{2, 0}, missing)
	require.Zero(t, r.advisoryLocks())
}

// cutLoader is the handler with a fault: the load of one stream sequence
// finds the warehouse gone, once.
type cutLoader struct {
	*handlers.Handler
	at   uint64
	cut  bool
	seqs []uint64 // every load handed to the handler
}

func (c *cutLoader) Handle(ctx context.Context, ev schemas.Event, m handlers.Meta) (handlers.Outcome, error) {
	c.seqs = append(c.seqs, m.StreamSeq)
	if m.StreamSeq == c.at && !c.cut {
		c.cut = true
		return handlers.Outcome{}, &handlers.UnavailableError{Err: errors.New("the server closed the connection")}
	}
	return c.Handler.Handle(ctx, ev, m)
}

// lostAndCut publishes n runs of one partition, acknowledged and lost, and
// returns their sequences and a reverifier whose loader finds the
// warehouse gone at the one of index at, once.
func (r *rig) lostAndCut(n, at int) ([]uint64, *cutLoader, *reverify.Reverifier) {
	r.t.Helper()
	var seqs []uint64
	for i := range n {
		seqs = append(seqs, r.publish("events", "2026-11-01", fmt.Sprintf("r%d", i)))
	}
	r.ackAll(n)
	cut := &cutLoader{Handler: r.h, at: seqs[at]}
	return seqs, cut, r.anotherWith(cut)
}

// TestACutPassResumesOnTheSameServer: a pass cut by a fault after loading
// the first lost events leaves them settled on the server; the next pass
// on the same server reads the window after them, loads the rest, and
// nothing twice. Under a fault every few seconds a pass that started over
// each time never finished, and the loads it held waited.
func TestACutPassResumesOnTheSameServer(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	seqs, cut, rv := r.lostAndCut(6, 3)
	requireCut(t, rv.Pass(ctx, "test"))
	requireResumed(t, r, rv.Pass(ctx, "test again"), seqs)
	require.Equal(t, []uint64{seqs[0], seqs[1], seqs[2], seqs[3], seqs[3], seqs[4], seqs[5]}, cut.seqs,
		"each load handed once, but the one the fault cut")
}

// requireCut checks the pass lostAndCut(6, 3)'s reverifier ran first.
func requireCut(t *testing.T, first reverify.Result) {
	t.Helper()
	require.Error(t, first.Err, "cut at the fourth event")
	require.Equal(t, 3, first.Reloaded)
	require.Zero(t, first.Resumed)
}

// requireResumed checks a pass that resumed the cut one of
// lostAndCut(6, 3), whose events are seqs.
func requireResumed(t *testing.T, r *rig, res reverify.Result, seqs []uint64) {
	t.Helper()
	require.NoError(t, res.Err)
	require.Equal(t, seqs[2], res.Resumed, "resumed after the last event the cut pass settled")
	require.Equal(t, 3, res.Checked, "only the events after it are read")
	require.Equal(t, 3, res.Reloaded)
	require.EqualValues(t, 6, r.db.Int(t, "SELECT count(*) FROM idem.run_ledger"))
}

// TestAnotherReplicaResumesACutPass: the replica that takes the lease
// after a cut pass resumes it from what the warehouse says was settled,
// not from the window's beginning. In a campaign where replicas are
// killed every few seconds, a lease holder among them, passes that each
// started over held every load for 12 minutes after a failover.
func TestAnotherReplicaResumesACutPass(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	seqs, _, rv := r.lostAndCut(6, 3)
	requireCut(t, rv.Pass(ctx, "test"))
	p, ok, err := audit.ReverifyProgress(ctx, r.db.Pool, "rv")
	require.NoError(t, err)
	require.True(t, ok, "the cut pass stored how far it got")
	require.Equal(t, seqs[2], p.Through)

	requireResumed(t, r, r.another().Pass(ctx, "another replica"), seqs)

	// Two passes that overlapped: the one that settled less cannot move
	// the stored progress back.
	cur, err := audit.CurrentIdentity(ctx, r.db.Pool)
	require.NoError(t, err)
	require.NoError(t, audit.StoreReverifyProgress(ctx, r.db.Pool, "rv", audit.Progress{ID: cur, Stream: r.cfg.NATS.Stream, Through: seqs[1]}))
	p, _, err = audit.ReverifyProgress(ctx, r.db.Pool, "rv")
	require.NoError(t, err)
	require.Equal(t, seqs[2], p.Through, "progress on one server only moves forward")
	other2 := audit.Identity{SystemIdentifier: cur.SystemIdentifier, Timeline: cur.Timeline + 1}
	require.NoError(t, audit.StoreReverifyProgress(ctx, r.db.Pool, "rv", audit.Progress{ID: other2, Stream: r.cfg.NATS.Stream, Through: seqs[1]}))
	p, _, err = audit.ReverifyProgress(ctx, r.db.Pool, "rv")
	require.NoError(t, err)
	require.Equal(t, audit.Progress{ID: other2, Stream: r.cfg.NATS.Stream, Through: seqs[1]}, p, "another server's progress replaces it")
}

// TestACutPassStartsOverOnANewServer: what a cut pass settled on one server
// says nothing of another: after a new identity the pass reads the whole
// window again.
func TestACutPassStartsOverOnANewServer(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	_, _, rv := r.lostAndCut(4, 2)
	require.Error(t, rv.Pass(ctx, "test").Err)
	require.NoError(t, reverify.ForgetServer(ctx, rv))

	again := rv.Pass(ctx, "test again")
	require.NoError(t, again.Err)
	require.Zero(t, again.Resumed)
	require.Equal(t, 4, again.Checked, "the whole window")
	require.Equal(t, 2, again.Missing, "the two the cut pass settled are settled")
}

// TestTheSameServerBackHoldsNothing: the warehouse back after an outage
// (the circuit closed again) has its identity read at once; the server
// last verified holds no load and costs no pass, a new one holds them.
func TestTheSameServerBackHoldsNothing(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, r.rv.Init(ctx))
	go r.rv.Watch(ctx, time.Hour)
	go r.rv.Run(ctx)

	r.rv.Recheck()
	time.Sleep(300 * time.Millisecond)
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	require.NoError(t, r.rv.Verified(short), "the same server holds nothing")
	require.True(t, r.rv.Last().Started.IsZero(), "and runs no pass")

	cur, err := audit.CurrentIdentity(ctx, r.db.Pool)
	require.NoError(t, err)
	require.NoError(t, audit.StoreIdentity(ctx, r.db.Pool, "rv", audit.Identity{SystemIdentifier: cur.SystemIdentifier, Timeline: cur.Timeline - 1}))
	r.rv.Recheck()
	require.Eventually(t, func() bool { return !r.rv.Last().Started.IsZero() }, 10*time.Second, 20*time.Millisecond,
		"a server that is not the verified one is re-verified at once")
	require.NoError(t, r.rv.Verified(ctx))
}
