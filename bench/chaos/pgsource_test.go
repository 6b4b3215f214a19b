package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/sources/pgsource"
)

// sourceShortSeed is TestChaosSourceFailoverShort's seed, one whose
// schedule opens with both restarts of the standby and then promotions
// (TestSourceShortScheduleHasEveryVariant); CHAOS_SEED overrides it.
const sourceShortSeed = 20261201

var sourceShortOptions = Options{Seed: sourceShortSeed, PGSource: true, Kinds: []string{FaultSourceFailover}, LongRounds: -1,
	Duration: 50 * time.Second, Events: 300}

// TestChaosSourceFailoverShort is the focused campaign of
// replica_source_failover: the main datasets and two datasets reading a
// PostgreSQL source through its standby, whose rows are corrected during
// the phase, while the standby is restarted (fast or as a crash) or
// promoted under copies in flight. Every load of the source must be one
// whole snapshot of its partition, fresh within max_replica_lag, and the
// final tables must equal the source.
func TestChaosSourceFailoverShort(t *testing.T) {
	focused(t)
	r := runCampaign(t, sourceShortOptions)
	if r == nil {
		return
	}
	requireFaults(t, r, FaultSourceFailover)
	if r.Source == nil {
		t.Fatal("the report has no source figures")
	}
	if r.Source.Promotions == 0 || r.Source.Restarts == 0 {
		t.Errorf("%d promotions and %d standby restarts: the campaign proves nothing about one of them", r.Source.Promotions, r.Source.Restarts)
	}
	if r.Source.CopiesInFlight == 0 {
		t.Errorf("no fault found a copy in flight: none landed mid-COPY")
	}
	if n := r.Check.ValidEventsDeadLettered; n > 0 {
		t.Errorf("%d valid events dead-lettered: a cut copy is retried, a lagging standby waited for", n)
	}
	if r.Source.LagWaits == 0 {
		t.Errorf("no load waited for the lagging standby: max_replica_lag was never tested")
	}
	if r.Source.Corrections == 0 || r.Source.LoadsChecked == 0 {
		t.Errorf("%d corrections, %d loads checked: the source workload did not run", r.Source.Corrections, r.Source.LoadsChecked)
	}
}

// The focused campaign's seed draws each variant early in the phase.
func TestSourceShortScheduleHasEveryVariant(t *testing.T) {
	o := sourceShortOptions.WithDefaults()
	seen := map[string]int{}
	for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
		require.Equal(t, FaultSourceFailover, f.Kind)
		if f.At < o.Duration/2 {
			seen[f.Variant]++
		}
	}
	for _, v := range []string{sourceRestartFast, sourceRestartImmediate, sourcePromote} {
		require.Positive(t, seen[v], "no %s in the first half of the schedule: %v", v, seen)
	}
}

// The kind needs the source; the source's plan is the seed's.
func TestSourceFailoverNeedsPGSource(t *testing.T) {
	o := Options{Kinds: []string{FaultSourceFailover}}.WithDefaults()
	require.ErrorContains(t, o.Validate(), "needs PGSource")
	o.PGSource = true
	require.NotContains(t, o.Validate().Error(), "PGSource")
}

// judgeLoads flags a load that is not one whole snapshot of its partition
// (a cut copy's first chunk, a doubled copy, two generations) or that
// missed a correction committed longer than max_replica_lag before it
// started, and passes the others.
func TestJudgeLoadsSeesPartialTornAndStaleLoads(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	want := []int{1000, 900}
	acked := map[int][]srcFix{0: {{p: 0, gen: 1, ackAt: t0}, {p: 0, gen: 2, ackAt: t0.Add(10 * time.Second)}}}
	load := func(p, rows, ids, lo, hi int, started time.Time) srcLoad {
		return srcLoad{dataset: "src_append", runID: "r", p: p, started: started, rows: rows, ids: ids, minGen: lo, maxGen: hi}
	}
	cases := []struct {
		name string
		l    srcLoad
		bad  string
	}{
		{"whole and fresh", load(0, 1000, 1000, 1, 1, t0.Add(5*time.Second)), ""},
		{"before the correction was due", load(0, 1000, 1000, 0, 0, t0.Add(srcMaxLag)), ""},
		{"stale", load(0, 1000, 1000, 0, 0, t0.Add(srcMaxLag+srcLagSlack+time.Millisecond)), "stale"},
		{"stale after the second", load(0, 1000, 1000, 1, 1, t0.Add(20*time.Second)), "stale"},
		{"partial", load(0, 640, 640, 1, 1, t0.Add(5*time.Second)), "partial"},
		{"doubled", load(1, 1800, 900, 0, 0, t0), "partial"},
		{"torn", load(0, 1000, 1000, 1, 2, t0.Add(12*time.Second)), "torn"},
		{"overlapping delete_insert", srcLoad{dataset: "src_replace", p: 1, rows: 900, ids: 900, noGens: true, deleted: 1800, prev: 900}, "torn"},
		{"delete_insert", srcLoad{dataset: "src_replace", p: 1, rows: 900, ids: 900, noGens: true, deleted: 900, prev: 900}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f SourceFigures
			v := judgeLoads([]srcLoad{c.l}, want, acked, &f)
			got := map[string]int{"partial": f.Partial, "torn": f.Torn, "stale": f.Stale}
			if c.bad == "" {
				require.Empty(t, v)
				return
			}
			require.Len(t, v, 1)
			require.Equal(t, 1, got[c.bad], "%v: %s", got, v[0])
		})
	}
}

// The fault's mechanism on a real source and a real destination: copies
// stream from the standby (the multi-host URL idem is given) while the
// nemesis restarts it and then promotes it. A copy the fault cuts fails
// and leaves nothing in the destination's table (pgsource.Copy's
// savepoint); a copy that succeeds holds the whole partition; after the
// promotion the old primary's place is the new primary's streaming
// standby, and copies read from it again.
func TestSourceFailoverCutsCopiesCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three PostgreSQL clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	wh := pg(t)
	o := Options{Seed: 7, Events: 20, Partitions: 2, Dir: t.TempDir(), Logf: t.Logf}.WithDefaults()
	s, err := startSource(ctx, o)
	require.NoError(t, err)
	defer s.close()
	url, err := os.ReadFile(s.urlFile)
	require.NoError(t, err)
	// Slower than the campaign's query (2 s a copy rather than 300 ms), so
	// that the fault, which starts once it sees a copy active, finds it
	// still streaming.
	_, err = s.pool.Exec(ctx, `CREATE FUNCTION src.crawl(id bigint) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF id % 10 = 0 THEN PERFORM pg_sleep(0.02); END IF;
  RETURN true;
END $$`)
	require.NoError(t, err)
	require.NoError(t, s.caughtUp(ctx, 30*time.Second))
	spec := pgsource.Spec{URL: string(url[:len(url)-1]), MaxReplicaLag: srcMaxLag,
		SQL: "SELECT " + srcColumns + " FROM src.rows WHERE event_date = @partition AND src.crawl(id)"}
	dst, err := pgx.Connect(ctx, wh.URL(""))
	require.NoError(t, err)
	defer dst.Close(context.WithoutCancel(ctx))

	// copies runs one copy of partition 0 after another until stop, each in
	// a transaction of its own, and records how they ended.
	type outcome struct {
		rows, left int64
		err        error // the copy's
		dstErr     error // the destination's, outside the copy

	}
	var fromStandby atomic.Int32 // copies that read the standby whole
	copies := func(stop <-chan struct{}) <-chan []outcome {
		out := make(chan []outcome, 1)
		go func() {
			var got []outcome
			defer func() { out <- got }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				tx, err := dst.Begin(ctx)
				if err != nil {
					got = append(got, outcome{dstErr: err})
					return
				}
				if _, err := tx.Exec(ctx, `CREATE TEMPORARY TABLE stage (id bigint, event_date date, amount numeric(12,2), note text, gen int)
					ON COMMIT DROP`); err != nil {
					got = append(got, outcome{dstErr: err})
					return
				}
				res, err := pgsource.Copy(ctx, spec, pgsource.Params{Partition: partitionKey(0), RunID: "r"}, tx,
					pgsource.Target{Table: pgx.Identifier{"pg_temp", "stage"}})
				var left int64
				if cerr := tx.QueryRow(ctx, "SELECT count(*) FROM stage").Scan(&left); cerr != nil {
					// The load's transaction is unusable after the copy.
					got = append(got, outcome{dstErr: cerr})
					return
				}
				got = append(got, outcome{rows: res.Rows, left: left, err: err})
				if err == nil && res.Source.InRecovery {
					fromStandby.Add(1)
				}
				if err := tx.Rollback(ctx); err != nil {
					got = append(got, outcome{dstErr: err})
					return
				}
			}
		}()
		return out
	}
	n := &nemesis{src: s, logf: t.Logf}
	for _, variant := range []string{sourceRestartFast, sourceRestartImmediate, sourcePromote} {
		stop := make(chan struct{})
		done := copies(stop)
		f := &fault{Kind: FaultSourceFailover, Variant: variant, Hold: 500 * time.Millisecond}
		require.NoError(t, n.inject(ctx, f), variant)
		// Copies go on until one has read the standby again, whose primary
		// is idle: the restarted standby (or the promotion's new one) must
		// pass the lag gate without a write on the primary.
		fromStandby.Store(0)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) && fromStandby.Load() == 0 {
			time.Sleep(100 * time.Millisecond)
		}
		close(stop)
		got := <-done
		require.Positive(t, fromStandby.Load(), "%s: no copy read the standby again within 30 s", variant)
		require.Positive(t, f.Param, "%s: no copy was in flight when the fault struck", variant)
		var cut int
		for _, g := range got {
			require.NoError(t, g.dstErr, "%s: the destination failed outside the copy", variant)
			if g.err != nil {
				cut++
				require.Zero(t, g.left, "%s: a failed copy left %d rows in the load's transaction: %v", variant, g.left, g.err)
				var fatal interface{ Fatal() bool }
				require.False(t, errors.As(g.err, &fatal) && fatal.Fatal(), "%s: a cut copy is fatal: %v", variant, g.err)
				continue
			}
			require.EqualValues(t, s.rows[0], g.rows, "%s: a copy that succeeded", variant)
			require.EqualValues(t, s.rows[0], g.left)
		}
		t.Logf("%s: %d copies, %d cut, %d in flight at the fault", variant, len(got), cut, f.Param)
		if variant != sourcePromote {
			require.Positive(t, cut, "%s: the restart cut no copy", variant)
		}
	}
	// The roles swapped, and the old primary's place streams from the new one.
	require.NoError(t, s.caughtUp(ctx, 30*time.Second))

	// A standby whose replay is held while a correction arrives lags: a
	// copy made past max_replica_lag waits (NotReady) and reads nothing.
	held := make(chan error, 1)
	go func() { held <- holdReplay(ctx, ctx, s.standby(), srcMaxLag+2*time.Second) }()
	time.Sleep(200 * time.Millisecond)
	fix := &srcFix{p: 0, gen: 1}
	s.correct(ctx, fix)
	require.True(t, fix.done, fix.err)
	time.Sleep(srcMaxLag + 500*time.Millisecond)
	tx, err := dst.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `CREATE TEMPORARY TABLE stage (id bigint, event_date date, amount numeric(12,2), note text, gen int) ON COMMIT DROP`)
	require.NoError(t, err)
	_, err = pgsource.Copy(ctx, spec, pgsource.Params{Partition: partitionKey(0), RunID: "r"}, tx, pgsource.Target{Table: pgx.Identifier{"pg_temp", "stage"}})
	var notReady interface{ NotReady() bool }
	require.True(t, errors.As(err, &notReady) && notReady.NotReady(), "a copy from a standby held %s behind: %v", srcMaxLag, err)
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-held)
	require.NoError(t, s.caughtUp(ctx, 30*time.Second))
	var inRecovery bool
	require.NoError(t, s.pool.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery))
	require.False(t, inRecovery)
	require.Equal(t, 1, s.promotes)
	require.Equal(t, 2, s.restarts)
}
