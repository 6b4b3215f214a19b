package watch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/natstest"
	"github.com/idem-data/idem/testkit/pgtest"
	"github.com/idem-data/idem/testkit/s3test"
)

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }

// rig is one watched dataset, orders, with everything real around it: its
// files, a database loaded by the handlers, a JetStream events stream, and
// two replicas' watchers.
type rig struct {
	t     *testing.T
	db    *pgtest.DB
	h     *handlers.Handler
	ns    *server.Server
	js    jetstream.JetStream
	ds    *Dataset
	a, b  *Watcher
	seen  uint64 // the last stream sequence delivered
	stamp time.Time
	// published are what the replicas' Published hooks heard.
	mu        sync.Mutex
	published []string
}

const ordersDDL = `CREATE SCHEMA analytics;
CREATE TABLE analytics.t (id bigint, event_date date NOT NULL, amount numeric(12,2), note text);`

func newRig(t *testing.T, spec files.Spec, store files.Store, ns *server.Server) *rig {
	t.Helper()
	ctx := context.Background()
	spec = spec.WithDefaults()
	require.NoError(t, spec.Validate())
	db := audittest.NewDB(t)
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	db.Exec(t, ordersDDL)
	st, err := strategies.New("delete_insert", strategies.Spec{Dataset: "orders", Source: handlers.StageSQL,
		Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"})
	require.NoError(t, err)
	stage := &handlers.Staged{Files: &handlers.FileSource{Spec: spec, Store: store}, WaitUpTo: time.Hour, PartitionColumn: "event_date"}
	h := &handlers.Handler{DB: db.Pool, Pipeline: "shop", Log: zerolog.Nop(),
		Datasets: map[string]*handlers.Dataset{"orders": {Name: "orders", Strategy: st, Target: "analytics.t", Stage: stage}}}
	require.Empty(t, h.Prepare(ctx))

	if ns == nil {
		ns = natstest.RunServer(t)
	}
	js := natstest.JetStream(t, ns)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_EVENTS", Subjects: []string{"idem.ready.>"}, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	r := &rig{t: t, db: db, h: h, ns: ns, js: js,
		ds: &Dataset{Name: "orders", Type: schemas.PartitionDate, Spec: spec, Store: store, Every: time.Hour, Last: 3,
			Retries: 3, RetryAfter: 5 * time.Minute, Attempts: 2}}
	r.a, r.b = r.watcher(), r.watcher()
	return r
}

// watcher is one replica's.
func (r *rig) watcher() *Watcher {
	return &Watcher{Pipeline: "shop", DB: r.db.Pool, JS: r.js, Stream: "IDEM_EVENTS", SubjectPrefix: "idem.ready",
		Lookup: func(string) (schemas.PartitionType, bool) { return schemas.PartitionDate, true },
		Window: 2 * time.Minute, Log: zerolog.Nop(),
		Published: func(dataset, reason string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.published = append(r.published, dataset+":"+reason)
		}}
}

// publishedSoFar are the publications the replicas' hooks heard of.
func (r *rig) publishedSoFar() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.published)
}

// decide is replica a's decision on one partition.
func (r *rig) decide(partition string) Decision {
	r.t.Helper()
	return r.decideAt(partition, time.Now())
}

// decideAt is replica a's decision on one partition at now.
func (r *rig) decideAt(partition string, now time.Time) Decision {
	r.t.Helper()
	ds, err := r.a.Decide(context.Background(), r.ds, []string{partition}, now)
	require.NoError(r.t, err)
	require.NoError(r.t, ds[0].Err)
	return ds[0]
}

// check is a pass of both replicas over partition.
func (r *rig) check(partition string) Decision {
	r.t.Helper()
	return r.checkAt(partition, time.Now())
}

// checkAt is a pass of both replicas over partition, their clocks at now.
func (r *rig) checkAt(partition string, now time.Time) Decision {
	r.t.Helper()
	var first Decision
	for _, w := range []*Watcher{r.a, r.b, r.a} {
		ds, err := w.Check(context.Background(), r.ds, []string{partition}, now)
		require.NoError(r.t, err)
		if first.Partition == "" {
			first = ds[0]
		}
	}
	return first
}

// events are the stream's messages after the last delivered one.
func (r *rig) events() []*jetstream.RawStreamMsg {
	r.t.Helper()
	ctx := context.Background()
	s, err := r.js.Stream(ctx, "IDEM_EVENTS")
	require.NoError(r.t, err)
	info, err := s.Info(ctx)
	require.NoError(r.t, err)
	var out []*jetstream.RawStreamMsg
	for seq := r.seen + 1; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(r.t, err)
		out = append(out, m)
	}
	return out
}

// deliver hands each new event to the handlers, as the consumer would, and
// returns their outcomes' errors.
func (r *rig) deliver() []error {
	r.t.Helper()
	var errs []error
	for _, m := range r.events() {
		_, err := r.h.HandleMessage(context.Background(), m.Subject, m.Data, handlers.Meta{StreamSeq: m.Sequence, Published: m.Time})
		errs = append(errs, err)
		r.seen = m.Sequence
	}
	return errs
}

func (r *rig) rows() int64 { return r.db.Int(r.t, "SELECT count(*) FROM analytics.t") }

func write(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
}

// On local files: a partition is published once complete, once by two
// replicas, and not again once loaded; a file added publishes it again,
// under a run naming the new listing and the load it replaces; a listing
// whose load failed for good is not published again.
func TestWatchPublishesNewThenChangedPartitionsOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := files.Spec{URL: "file://" + dir + "/orders/dt={partition}/", Format: files.CSV, Ready: files.ReadyRule{Marker: "_SUCCESS"}}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "orders"), 0o755))
	store, err := files.NewStore(spec, files.S3Options{})
	require.NoError(t, err)
	r := newRig(t, spec, store, nil)
	part := filepath.Join(dir, "orders", "dt=2026-11-28")

	write(t, filepath.Join(part, "part-1.csv"), "id,amount,note\n1,1.50,a\n2,2.50,b\n")
	d := r.check("2026-11-28")
	require.False(t, d.Ready)
	require.Equal(t, "not ready: marker _SUCCESS not found", d.Why)
	require.Empty(t, r.events(), "nothing published before the marker")
	d = r.decide("2026-11-27")
	require.Equal(t, "not ready: marker _SUCCESS not found", d.Why, "an absent prefix is no error")

	write(t, filepath.Join(part, "_SUCCESS"), "")
	d = r.check("2026-11-28")
	require.Equal(t, ReasonNew, d.Reason)
	require.Equal(t, 1, d.Files)
	require.Equal(t, RunID(d.Fingerprint, 0), d.RunID)
	evs := r.events()
	require.Len(t, evs, 1, "two replicas, three passes, one event")
	require.Equal(t, []string{"orders:new"}, r.publishedSoFar(), "a duplicate another replica sent first is not counted")
	require.Equal(t, "orders:2026-11-28:"+d.RunID, evs[0].Header.Get("Nats-Msg-Id"))
	require.Equal(t, "idem.ready.orders", evs[0].Subject)
	require.NoError(t, r.deliver()[0])
	require.EqualValues(t, 2, r.rows())
	require.Equal(t, "unchanged since its last load", r.decide("2026-11-28").Why)
	r.check("2026-11-28")
	require.Empty(t, r.events(), "a loaded listing is not published again")

	write(t, filepath.Join(part, "part-2.csv"), "id,amount,note\n3,3.50,c\n")
	first := d
	d = r.check("2026-11-28")
	require.Equal(t, ReasonChanged, d.Reason)
	require.Equal(t, 2, d.Files)
	require.NotEqual(t, first.Fingerprint, d.Fingerprint)
	loaded := r.db.Int(t, "SELECT id FROM idem.pipeline_audit WHERE status = 'success'")
	require.Equal(t, RunID(d.Fingerprint, loaded), d.RunID)
	errs := r.deliver()
	require.Len(t, errs, 1, "one event for the change")
	require.Equal(t, []string{"orders:new", "orders:changed"}, r.publishedSoFar())
	require.NoError(t, errs[0])
	require.EqualValues(t, 3, r.rows(), "the whole partition, rebuilt once")
	require.EqualValues(t, 2, r.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'"))
	require.Equal(t, "unchanged since its last load", r.decide("2026-11-28").Why)

	// A file that cannot load: its listing is published once, fails for
	// good, and is left to its dead letter.
	write(t, filepath.Join(part, "part-3.csv"), "id,nope\n4,x\n")
	d = r.check("2026-11-28")
	require.Equal(t, ReasonChanged, d.Reason)
	errs = r.deliver()
	require.Len(t, errs, 1)
	require.True(t, handlers.IsFatal(errs[0]), "%v", errs[0])
	d = r.decide("2026-11-28")
	require.Empty(t, d.Reason)
	require.Equal(t, "run "+d.RunID+" already attempted (failed): failed for good (schema_mismatch): only new files publish it again", d.Why)
	r.check("2026-11-28")
	require.Empty(t, r.events())
	// Nor later: a verdict on the files is not retried, however long after.
	for _, later := range []time.Duration{5 * time.Minute, time.Hour, 1000 * time.Hour} {
		d = r.checkAt("2026-11-28", time.Now().Add(later))
		require.Empty(t, d.Reason)
		require.Zero(t, d.Retry)
		require.Empty(t, r.events(), "%s later", later)
	}
	require.EqualValues(t, 3, r.rows())
}

// On S3, with notifications: a partition far older than the listed ones
// is published within seconds of its marker's notification, with a listing
// every hour only; and files put back as they were load again, since
// their run names the load they replace.
func TestWatchOnS3FollowsNotifications(t *testing.T) {
	ns := natstest.RunServer(t)
	s3 := s3test.Start(t, s3test.NATSEvents(ns.ClientURL(), "s3.events"))
	s3.Env(t)
	s3.CreateBucket(t, "lake")
	spec := files.Spec{URL: "s3://lake/orders/dt={partition}/", Format: files.CSV, Ready: files.ReadyRule{Marker: "_SUCCESS"}}
	store, err := files.NewStore(spec, files.S3Options{Endpoint: s3.Endpoint, PathStyle: true})
	require.NoError(t, err)
	r := newRig(t, spec, store, ns)
	r.ds.Subject = "s3.events"
	nc := natstest.Connect(t, ns)
	var wg sync.WaitGroup
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(func() { stop(); wg.Wait() })
	for _, w := range []*Watcher{r.a, r.b} {
		w.Conn, w.Queue = nc, "idem_watch_"
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx, r.ds); err != nil {
				t.Error(err)
			}
		}()
	}
	require.Eventually(t, func() bool { return nc.NumSubscriptions() == 2 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, nc.Flush())

	const p = "2020-02-20" // never among the newest three
	key := "orders/dt=" + p + "/"
	published := func(n int) []*jetstream.RawStreamMsg {
		t.Helper()
		var evs []*jetstream.RawStreamMsg
		require.Eventually(t, func() bool { evs = r.events(); return len(evs) >= n }, 10*time.Second, 20*time.Millisecond,
			"want %d events", n)
		time.Sleep(100 * time.Millisecond) // a second publish would be here by now
		require.Len(t, r.events(), n)
		return evs
	}
	load := func() {
		t.Helper()
		for _, err := range r.deliver() {
			require.NoError(t, err)
		}
	}

	s3.Put(t, "lake", key+"part-1.csv", []byte("id,amount,note\n1,1.50,a\n"))
	s3.Put(t, "lake", key+"_SUCCESS", nil)
	evs := published(1)
	require.Contains(t, string(evs[0].Data), `"partition":"2020-02-20"`)
	first := evs[0].Header.Get("Nats-Msg-Id")
	load()
	require.EqualValues(t, 1, r.rows())

	s3.Put(t, "lake", key+"part-1.csv", []byte("id,amount,note\n1,1.50,a\n2,2.50,b\n"))
	published(1)
	load()
	require.EqualValues(t, 2, r.rows())

	// The first content again: the same ETag, the same fingerprint as the
	// first load's, and yet another run.
	s3.Put(t, "lake", key+"part-1.csv", []byte("id,amount,note\n1,1.50,a\n"))
	evs = published(1)
	third := evs[0].Header.Get("Nats-Msg-Id")
	require.NotEqual(t, first, third)
	require.True(t, strings.HasPrefix(third, first+"-"), "%s names the listing %s names, and the load it replaces", third, first)
	load()
	require.EqualValues(t, 1, r.rows())
	require.EqualValues(t, 3, r.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'"))
}
