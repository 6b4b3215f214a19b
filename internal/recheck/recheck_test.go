package recheck

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/natstest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }

// rig is one rechecked dataset, orders, with everything real around it: a
// database loaded by the handlers, a JetStream events stream, and a
// Rechecker that counts the fingerprints it takes.
type rig struct {
	t     *testing.T
	db    *pgtest.DB
	h     *handlers.Handler
	js    jetstream.JetStream
	r     *Rechecker
	ds    *Dataset
	asked atomic.Int64
}

const fingerprintSQL = "SELECT count(*) AS count, sum(amount) AS amount FROM staging.orders WHERE event_date = @partition"

func newRig(t *testing.T, typ schemas.PartitionType, window time.Duration) *rig {
	t.Helper()
	ctx := context.Background()
	db := audittest.NewDB(t)
	_, err := audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	col := "date"
	if typ == schemas.PartitionHour {
		col = "timestamptz"
	}
	db.Exec(t, fmt.Sprintf(`CREATE SCHEMA staging; CREATE SCHEMA analytics;
CREATE TABLE staging.orders (id bigint, event_date %[1]s NOT NULL, amount numeric(12,2));
CREATE INDEX ON staging.orders (event_date);
CREATE TABLE analytics.t (id bigint, event_date %[1]s NOT NULL, amount numeric(12,2));`, col))
	st, err := strategies.New("delete_insert", strategies.Spec{Dataset: "orders",
		Source: "SELECT id, event_date, amount FROM staging.orders WHERE event_date = @partition",
		Target: strategies.Table{Schema: "analytics", Name: "t"}, PartitionColumn: "event_date"})
	require.NoError(t, err)
	h := &handlers.Handler{DB: db.Pool, Pipeline: "shop", Log: zerolog.Nop(),
		Datasets: map[string]*handlers.Dataset{"orders": {Name: "orders", PartitionType: typ, Strategy: st, Target: "analytics.t",
			Fingerprint: &handlers.Fingerprint{SQL: fingerprintSQL}}}}
	require.Empty(t, h.Prepare(ctx))
	js := natstest.JetStream(t, natstest.RunServer(t))
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "IDEM_EVENTS", Subjects: []string{"idem.ready.>"}, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	rg := &rig{t: t, db: db, h: h, js: js, ds: &Dataset{Name: "orders", Type: typ, Window: window, Every: time.Hour}}
	rg.r = rg.rechecker()
	return rg
}

// rechecker is one replica's.
func (rg *rig) rechecker() *Rechecker {
	return &Rechecker{Pipeline: "shop", DB: rg.db.Pool, JS: rg.js, Stream: "IDEM_EVENTS", SubjectPrefix: "idem.ready",
		Lookup: rg.h.Lookup, Log: zerolog.Nop(),
		Fingerprint: func(ctx context.Context, dataset string, key schemas.Partition, now time.Time) (audit.SourceFingerprint, bool, error) {
			rg.asked.Add(1)
			return rg.h.Fingerprint(ctx, dataset, key, now)
		}}
}

// load loads partition under run through the handler, as a delivery would.
func (rg *rig) load(partition, run string, force bool) {
	rg.t.Helper()
	ev, err := schemas.Decode("idem.ready.orders", mustJSON(rg.t, schemas.PartitionReady{Dataset: "orders", Partition: partition, RunID: run, Force: force}), rg.h.Lookup)
	require.NoError(rg.t, err)
	out, err := rg.h.Handle(context.Background(), ev, handlers.Meta{})
	require.NoError(rg.t, err)
	require.Equal(rg.t, audit.StatusSuccess, out.Status)
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// published are the events on the stream, in order.
func (rg *rig) published() []schemas.PartitionReady {
	rg.t.Helper()
	ctx := context.Background()
	s, err := rg.js.Stream(ctx, "IDEM_EVENTS")
	require.NoError(rg.t, err)
	info, err := s.Info(ctx)
	require.NoError(rg.t, err)
	var out []schemas.PartitionReady
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(rg.t, err)
		var ev schemas.PartitionReady
		require.NoError(rg.t, json.Unmarshal(m.Data, &ev))
		out = append(out, ev)
	}
	return out
}

func day(now time.Time, back int) string { return now.AddDate(0, 0, -back).Format(time.DateOnly) }

func TestRecheckReloadsOnlyThePartitionThatMoved(t *testing.T) {
	ctx := context.Background()
	rg := newRig(t, schemas.PartitionDate, 7*24*time.Hour)
	now := time.Now().UTC()
	// Three partitions inside the 7-day window, two outside it.
	parts := []string{day(now, 0), day(now, 1), day(now, 6), day(now, 7), day(now, 30)}
	for i, p := range parts {
		rg.db.Exec(t, fmt.Sprintf("INSERT INTO staging.orders SELECT %d * 10 + g, '%s', 10 FROM generate_series(1, 2) g", i, p))
		rg.load(p, "sched-"+p, false)
	}

	ds, err := rg.r.Pass(ctx, rg.ds, now, 0)
	require.NoError(t, err)
	require.Len(t, ds, 7, "one decision per partition of the window")
	require.EqualValues(t, 3, rg.asked.Load(), "one fingerprint per loaded partition inside the window")
	for _, d := range ds {
		require.NoError(t, d.Err)
		require.Empty(t, d.RunID, "%s: nothing moved", d.Partition)
	}
	require.Empty(t, rg.published(), "unchanged partitions publish nothing")

	// A correction inside the window, and one outside it.
	rg.db.Exec(t, fmt.Sprintf("INSERT INTO staging.orders VALUES (99, '%s', 25)", parts[1]))
	rg.db.Exec(t, fmt.Sprintf("UPDATE staging.orders SET amount = 99 WHERE event_date IN ('%s', '%s')", parts[3], parts[4]))
	rg.asked.Store(0)
	ds, err = rg.r.Pass(ctx, rg.ds, now, 0)
	require.NoError(t, err)
	require.EqualValues(t, 3, rg.asked.Load())
	var moved []Decision
	for _, d := range ds {
		require.NoError(t, d.Err)
		if d.RunID != "" {
			moved = append(moved, d)
		}
	}
	require.Len(t, moved, 1, "only the corrected partition inside the window")
	require.Equal(t, parts[1], moved[0].Partition)
	require.Equal(t, "count 2 → 3, amount 20.00 → 45.00", moved[0].Moved)
	evs := rg.published()
	require.Len(t, evs, 1)
	require.Equal(t, schemas.PartitionReady{Dataset: "orders", Partition: parts[1], RunID: moved[0].RunID, Force: true}, evs[0])

	// Another replica's pass before the reload ran publishes nothing more.
	other := rg.rechecker()
	ds, err = other.Pass(ctx, rg.ds, now, 0)
	require.NoError(t, err)
	require.Len(t, rg.published(), 1, "a move already published is not published again")

	// The reload loads the corrected rows; from then on nothing moved.
	rg.load(parts[1], evs[0].RunID, true)
	var n int
	require.NoError(t, rg.db.Pool.QueryRow(ctx, "SELECT count(*) FROM analytics.t WHERE event_date = $1", parts[1]).Scan(&n))
	require.Equal(t, 3, n)
	ds, err = rg.r.Pass(ctx, rg.ds, now, 0)
	require.NoError(t, err)
	for _, d := range ds {
		require.Empty(t, d.RunID)
	}
	require.Len(t, rg.published(), 1)

	rc, err := audit.RecheckOf(ctx, rg.db.Pool, "shop", "orders", parts[1])
	require.NoError(t, err)
	require.NotNil(t, rc.Move)
	require.Equal(t, evs[0].RunID, rc.Move.RunID)
	require.Equal(t, "count 2 → 3, amount 20.00 → 45.00", rc.Move.What())
	require.Equal(t, "count 3, amount 45.00", rc.Fingerprint.String(), "the reload's success stored the new fingerprint")

	// Outside the window: never asked, whatever changed.
	for _, p := range parts[3:] {
		rc, err := audit.RecheckOf(ctx, rg.db.Pool, "shop", "orders", p)
		require.NoError(t, err)
		require.Zero(t, rc.Checks, "%s is outside the window", p)
		require.Nil(t, rc.CheckedAt)
	}
}

func TestOneReplicaRunsAPassAPeriod(t *testing.T) {
	ctx := context.Background()
	rg := newRig(t, schemas.PartitionDate, 2*24*time.Hour)
	p := day(time.Now().UTC(), 0)
	rg.db.Exec(t, fmt.Sprintf("INSERT INTO staging.orders VALUES (1, '%s', 10)", p))
	rg.load(p, "sched", false)
	rg.db.Exec(t, fmt.Sprintf("UPDATE staging.orders SET amount = 11 WHERE event_date = '%s'", p))

	var (
		wg  sync.WaitGroup
		ran atomic.Int64
	)
	for range 4 {
		r := rg.rechecker()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := r.Once(ctx, rg.ds)
			require.NoError(t, err)
			if ok {
				ran.Add(1)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 1, ran.Load(), "four replicas, one pass")
	require.EqualValues(t, 1, rg.asked.Load())
	require.Len(t, rg.published(), 1, "one reload")
	ok, err := rg.rechecker().Once(ctx, rg.ds)
	require.NoError(t, err)
	require.False(t, ok, "the period is not over: no second pass")
}

func TestAThousandPartitionsCostOneFingerprintEach(t *testing.T) {
	ctx := context.Background()
	rg := newRig(t, schemas.PartitionHour, 1000*time.Hour)
	now := time.Now().UTC().Truncate(time.Hour)
	rg.db.Exec(t, `INSERT INTO staging.orders SELECT g, date_trunc('hour', now()) - g * interval '1 hour', g FROM generate_series(0, 999) g`)
	for i := range 1000 {
		rg.load(now.Add(-time.Duration(i)*time.Hour).Format(time.RFC3339), "sched", false)
	}
	rg.asked.Store(0)
	var before int64
	require.NoError(t, rg.db.Pool.QueryRow(ctx, "SELECT count(*) FROM idem.source_fingerprints WHERE checks > 0").Scan(&before))
	require.Zero(t, before)
	ds, err := rg.r.Pass(ctx, rg.ds, time.Now(), 0)
	require.NoError(t, err)
	require.Len(t, ds, 1000)
	require.EqualValues(t, 1000, rg.asked.Load(), "one fingerprint per partition of the window")
	for _, d := range ds {
		require.NoError(t, d.Err)
		require.True(t, d.Asked)
		require.Empty(t, d.RunID)
	}
	require.Empty(t, rg.published(), "1,000 unchanged partitions publish nothing")
	var checked int64
	require.NoError(t, rg.db.Pool.QueryRow(ctx, "SELECT count(*) FROM idem.source_fingerprints WHERE checks = 1").Scan(&checked))
	require.EqualValues(t, 1000, checked, "each partition's check recorded once")
}
