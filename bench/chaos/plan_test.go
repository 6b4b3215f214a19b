package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/localpg"
)

// A seed names one workload and one fault schedule: the same seed gives the
// same intentions, another seed others.
func TestSeedDecidesWorkloadAndSchedule(t *testing.T) {
	o := Options{Seed: 42, Events: 500, Duration: time.Minute, LongRounds: -1}.WithDefaults()
	summary := func(seed int64) string {
		o := o
		o.Seed = seed
		pl := makePlan(o, rand.New(rand.NewPCG(uint64(seed), 1)))
		s := ""
		for _, it := range pl.items {
			if it.cp != nil {
				s += fmt.Sprintf("%s|%s|%s|%v|%v;", it.at, it.cp.ev.subject, it.cp.ev.body, it.cp.msgID, it.cp.late)
			} else {
				s += fmt.Sprintf("%s|mut %s %d %v;", it.at, it.mut.ds.name, it.mut.p, it.mut.insert)
			}
		}
		for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(seed), 2))) {
			s += fmt.Sprintf("%s %s %d %s %d;", f.At, f.Kind, f.Replica, f.Hold, f.Param)
		}
		return s
	}
	require.Equal(t, summary(42), summary(42))
	require.NotEqual(t, summary(42), summary(43))

	pl := makePlan(o, rand.New(rand.NewPCG(42, 1)))
	kinds := map[string]bool{}
	for _, ev := range pl.events {
		kinds[ev.fatal] = true
		require.LessOrEqual(t, len(ev.copies), 3)
		for _, cp := range ev.copies {
			require.LessOrEqual(t, cp.at, o.Duration, "a copy planned after the fault phase")
		}
	}
	require.True(t, kinds[""] && kinds["empty_partition"], "valid events and empty partitions in 500 events: %v", kinds)
	faults := map[string]int{}
	for _, f := range schedule(o, rand.New(rand.NewPCG(42, 2))) {
		faults[f.Kind]++
		if f.Kind == FaultPause {
			require.Greater(t, f.Hold, o.AckWait, "a pause must outlast the ack wait")
		}
	}
	require.GreaterOrEqual(t, len(faults), 5, "a minute of short faults draws most kinds: %v", faults)
}

// The schedule places every long fault LongRounds times, each inside the
// phase and none overlapping another fault, with a warehouse outage that
// outlasts the whole retry schedule and failovers whose standby misses a
// few seconds of commits; short faults fill the rest.
func TestScheduleHasLongFaultsThatFit(t *testing.T) {
	short := Options{}.WithDefaults()
	long := Options{Events: 30000, Duration: 25 * time.Minute, Partitions: 100, LongRounds: 4,
		WarehouseDownMin: 30 * time.Second, WarehouseDownMax: 3 * time.Minute}.WithDefaults()
	sched := retrySchedule(Retries, RetryDelay, MaxRetryDelay)
	// Four long faults take up to 112 s of the short phase's 150 s: five
	// short faults at the least among them, ten with TestChaosShort's seed.
	minShort := map[string]int{"short": 5, "long": 100}
	for name, o := range map[string]Options{"short": short, "long": long} {
		o.Bin, o.PG, o.Dir = "idem", &localpg.Server{}, t.TempDir()
		require.NoError(t, o.Validate(), name)
		for seed := range uint64(50) {
			fs := schedule(o, rand.New(rand.NewPCG(seed, 2)))
			byKind := map[string]int{}
			var longest, prevEnd time.Duration
			for i, f := range fs {
				byKind[f.Kind]++
				if i > 0 {
					require.GreaterOrEqual(t, f.At, prevEnd+o.FaultGapMin, "%s seed %d: fault %d (%s) overlaps the one before", name, seed, i, f.Kind)
				}
				prevEnd = f.At + planned(f)
				if slices.Contains(longKinds, f.Kind) {
					require.LessOrEqual(t, f.At+planned(f), o.Duration, "%s seed %d: %s ends after the phase", name, seed, f.Kind)
				}
				if f.Kind == FaultWarehouseDown {
					require.GreaterOrEqual(t, f.Hold, o.WarehouseDownMin)
					require.LessOrEqual(t, f.Hold, o.WarehouseDownMax)
					require.Greater(t, f.Hold, 2*sched, "a warehouse outage must outlast the retry schedule twice over")
					longest = max(longest, f.Hold)
				}
				if f.Kind == FaultFailover {
					require.GreaterOrEqual(t, f.Hold, failoverLagMin)
					require.LessOrEqual(t, f.Hold, failoverLagMax)
					require.Equal(t, f.Hold+failoverPlan, planned(f))
				}
			}
			for _, k := range longKinds {
				require.Equal(t, o.LongRounds, byKind[k], "%s seed %d: %s", name, seed, k)
			}
			require.GreaterOrEqual(t, len(fs)-len(longKinds)*o.LongRounds, minShort[name], "%s seed %d: short faults %v", name, seed, byKind)
			require.Positive(t, longest)
		}
	}
	if testing.Verbose() {
		o := short
		for _, f := range schedule(o, rand.New(rand.NewPCG(shortSeed, 2))) {
			t.Logf("seed %d: %7s %-15s hold %s", shortSeed, f.At.Round(time.Millisecond), f.Kind, f.Hold.Round(time.Millisecond))
		}
	}
}

// retrySchedule is the consumer's own backoff at its longest, summed over
// the retries; it is a fraction of the shortest warehouse outage, and
// Validate refuses an outage that would not outlast it twice.
func TestRetryScheduleIsTheConsumersAndShort(t *testing.T) {
	for _, c := range []struct{ delay, maxDelay time.Duration }{
		{RetryDelay, MaxRetryDelay}, {time.Second, time.Second}, {250 * time.Millisecond, 3 * time.Second}, {10 * time.Second, 30 * time.Minute},
	} {
		var want time.Duration
		for a := 1; a <= Retries; a++ {
			want += consumer.Retry{Delay: c.delay, MaxDelay: c.maxDelay}.Backoff(a, 1)
		}
		require.Equal(t, want, retrySchedule(Retries, c.delay, c.maxDelay), "%+v", c)
	}
	require.Equal(t, 3, Retries, "the campaign runs idem's default retries")
	require.Equal(t, consumer.DefaultMaxProbeDelay, resumeAllowance, "the schedule leaves idem its longest probe delay after an outage")
	sched := retrySchedule(Retries, RetryDelay, MaxRetryDelay)
	require.Equal(t, 10*time.Second, sched)
	require.GreaterOrEqual(t, DefaultWarehouseDownMin, 2*sched)

	o := Options{Bin: "idem", PG: &localpg.Server{}, Dir: t.TempDir(), WarehouseDownMin: sched}.WithDefaults()
	require.ErrorContains(t, o.Validate(), "WarehouseDownMin 10s: use at least 20s")
	o = Options{Bin: "idem", PG: &localpg.Server{}, Dir: t.TempDir(), Duration: time.Minute}.WithDefaults()
	require.ErrorContains(t, o.Validate(), "rounds of long faults")
	o.LongRounds = -1
	require.NoError(t, o.Validate(), "no long faults, no constraint")
}

// checkRuns must see a lost event, a run loaded twice, a fatal input missing
// from the dead-letter stream and one dead-lettered for the wrong reason.
func TestCheckRunsSeesLostDoubledAndMisfiledEvents(t *testing.T) {
	ctx := context.Background()
	db := checkerDB(t)
	js := checkerNATS(t)
	var err error
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: dlqStream, Subjects: []string{"idem.dlq.>"}})
	require.NoError(t, err)

	now := time.Now()
	mk := func(idx int, runID, fatal string) *event {
		ev := &event{idx: idx, dataset: "replace", partition: "2026-01-01", runID: runID, fatal: fatal, want: "invalid event"}
		ev.copies = []*pubCopy{{ev: ev, acked: true, seq: uint64(idx + 1), sentAt: now}}
		return ev
	}
	fine, lost, twice := mk(0, "fine", ""), mk(1, "lost", ""), mk(2, "twice", "")
	outage := mk(6, "outage", "")
	missing, filed, misfiled := mk(3, "bad-missing", "wrong_type"), mk(4, "bad-filed", "wrong_type"), mk(5, "bad-misfiled", "wrong_type")
	_, err = db.Exec(ctx, `
WITH a AS (INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, finished_at)
           VALUES ('chaos', 'replace', '2026-01-01', 'fine', 'success', 1, now()),
                  ('chaos', 'replace', '2026-01-01', 'twice', 'success', 1, now()),
                  ('chaos', 'replace', '2026-01-01', 'twice', 'success', 2, now()),
                  ('chaos', 'replace', '2026-01-01', 'outage', 'failed', 1, now())
           RETURNING id, run_id, attempt)
INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id)
SELECT 'chaos', 'replace', '2026-01-01', run_id, id FROM a WHERE attempt = 1 AND run_id <> 'outage'`)
	require.NoError(t, err)
	for _, dl := range []struct {
		ev   *event
		kind string
	}{{filed, "fatal"}, {misfiled, "exhausted"}, {outage, "exhausted"}} {
		m := nats.NewMsg("idem.dlq.replace")
		m.Header.Set(chaosIDHeader, dl.ev.copies[0].chaosID())
		m.Header.Set("Idem-Error-Kind", dl.kind)
		m.Header.Set("Idem-Error", "invalid event: partition: want a string")
		m.Header.Set("Idem-Deliveries", "1")
		m.Header.Set("Idem-Failed-At", now.UTC().Format(time.RFC3339Nano))
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}

	r := &Report{}
	down := &fault{Kind: FaultWarehouseDown, Start: now.Add(-time.Second), End: now.Add(time.Second)}
	h := history{events: []*event{fine, lost, twice, missing, filed, misfiled, outage}, faults: []*fault{down}}
	require.NoError(t, checkRuns(ctx, db, js, h, time.Second, r))
	c := r.Check
	require.Equal(t, 4, c.ValidEvents)
	require.Equal(t, 1, c.ValidDeadLettered, "outage: never loaded")
	require.Equal(t, 1, c.ValidEventsDeadLettered)
	require.Equal(t, 1, c.ValidDeadLetteredInOutage)
	require.Zero(t, c.TransientExplained, "an outage excuses nothing")
	require.Equal(t, 1, c.SucceededOnce, "fine")
	require.Equal(t, 1, c.UnaccountedEvents, "lost")
	require.Equal(t, 1, c.SuccessNotOne, "twice")
	require.Equal(t, 3, c.FatalInputs)
	require.Equal(t, 1, c.FatalMissing)
	require.Equal(t, 2, c.FatalDeadLettered)
	require.Equal(t, 1, c.FatalWrongReason)
	require.False(t, c.DLQCorrect)
	// The append rows of checkerDB's hand load are in the ledger but were
	// never published here: unexpected.
	require.Positive(t, c.UnexpectedLedger)
	require.Len(t, r.Violations, 1+1+1+1+1+c.UnexpectedLedger)
	require.True(t, slices.ContainsFunc(r.Violations, func(v string) bool {
		return strings.Contains(v, "during warehouse_down") && strings.Contains(v, "audit rows: seq 0 attempt 1 failed")
	}), "the outage's dead letter is a violation that quotes the audit: %q", r.Violations)
}

// TestClusterShortScheduleHasEveryKind: the seed of TestChaosClusterShort
// draws every cluster fault inside its fault phase, so a change to the
// schedule that loses one fails here, not silently.
func TestClusterShortScheduleHasEveryKind(t *testing.T) {
	o := clusterShortOptions.WithDefaults()
	got := map[string]int{}
	for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
		if f.At < o.Duration {
			got[f.Kind]++
		}
	}
	for _, k := range clusterKinds() {
		if got[k] == 0 {
			t.Errorf("seed %d draws no %s in %s: %v", o.Seed, k, o.Duration, got)
		}
	}
}

// TestChaosShort's seed places one failover, with 30 s to spare before
// the end of the phase: slow heals of the faults before it (a rolling
// restart, a NATS outage take what they take) cannot push it out.
func TestShortScheduleHasOneFailover(t *testing.T) {
	o := Options{Seed: shortSeed}.WithDefaults()
	got := map[string]int{}
	for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
		if f.Kind == FaultFailover {
			require.Less(t, f.At+planned(f), o.Duration-30*time.Second, "seed %d: failover at %s", o.Seed, f.At)
		}
		if slices.Contains(longKinds, f.Kind) {
			got[f.Kind]++
		}
	}
	require.Equal(t, map[string]int{FaultWarehouseDown: 1, FaultNATSDown: 1, FaultRollingRestart: 1, FaultFailover: 1}, got)
	o = clusterShortOptions.WithDefaults()
	for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
		require.NotEqual(t, FaultFailover, f.Kind, "the short cluster campaign has no long faults")
	}
}

// checkResults must see a committed load without its result, one with two,
// a result announcing a load the warehouse does not hold (excused only
// after a failover) and a dead letter with two results.
func TestCheckResultsSeesMissingDoubledAndOrphanResults(t *testing.T) {
	ctx := context.Background()
	db := checkerDB(t)
	js := checkerNATS(t)
	var err error
	for name, subj := range map[string]string{resultsStream: "idem.result.>", dlqStream: "idem.dlq.>"} {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}})
		require.NoError(t, err)
	}
	var ids []int64
	rows, err := db.Query(ctx, `INSERT INTO idem.pipeline_audit (dag_id, task_id, partition_key, run_id, status, attempt, stream_seq, finished_at)
		VALUES ('chaos', 'replace', '2026-01-01', 'ok', 'success', 1, 1, now()),
		       ('chaos', 'replace', '2026-01-02', 'none', 'success', 1, 2, now()),
		       ('chaos', 'replace', '2026-01-03', 'twice', 'success', 1, 3, now())
		RETURNING id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	pub := func(subject string, hdr map[string]string, body string) {
		m := nats.NewMsg(subject)
		for k, v := range hdr {
			m.Header.Set(k, v)
		}
		m.Data = []byte(body)
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	res := func(part, run, status string, seq, id int64) {
		pub("idem.result.replace", map[string]string{"Idem-Status": status, "Idem-Event-Seq": fmt.Sprint(seq), "Idem-Event-Stream": eventsStream},
			fmt.Sprintf(`{"dataset":"replace","partition":%q,"run_id":%q,"status":%q,"stream":%q,"stream_seq":%d,"audit_id":%d}`, part, run, status, eventsStream, seq, id))
	}
	res("2026-01-01", "ok", "loaded", 1, ids[0])
	res("2026-01-03", "twice", "loaded", 3, ids[2])
	res("2026-01-03", "twice", "loaded", 3, ids[2])
	res("2026-01-04", "rolled-back", "loaded", 4, 999)
	pub("idem.dlq.replace", map[string]string{"Idem-Original-Seq": "5", "Idem-Error-Kind": "fatal"}, "")
	res("2026-01-05", "bad", "dead_lettered", 5, 0)
	res("2026-01-05", "bad", "dead_lettered", 5, 0)

	r := &Report{}
	require.NoError(t, checkResults(ctx, db, js, history{}, r))
	f := r.Check.Results
	require.Equal(t, 4, f.Loaded)
	require.Equal(t, 1, f.Missing, "none")
	require.Equal(t, 1, f.Doubled, "twice")
	require.Equal(t, 1, f.Orphans, "rolled-back")
	require.Zero(t, f.OrphansLost)
	require.Equal(t, 1, f.DLQDoubled)
	require.Len(t, r.Violations, 4, "%q", r.Violations)

	// After a failover the orphan is excused, noted.
	r = &Report{}
	require.NoError(t, checkResults(ctx, db, js, history{faults: []*fault{{Kind: FaultFailover}}}, r))
	require.Equal(t, 1, r.Check.Results.OrphansLost)
	require.Equal(t, 1, r.Check.Results.DoubledLost, "a lost load and its reload under one audit id")
	require.Len(t, r.Violations, 2, "%q", r.Violations)
}

// checkerNATS is a NATS server of the test's own, and JetStream on it.
func checkerNATS(t *testing.T) jetstream.JetStream {
	t.Helper()
	nb, err := startNATS(filepath.Join(t.TempDir(), "js"))
	require.NoError(t, err)
	t.Cleanup(nb.down)
	nc, err := nats.Connect(nb.url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// pooler_restart is drawn only behind a pooler, and TestChaosPoolerShort's
// seed draws some in the first half of the phase, where slow heals cannot
// push them out, with every long fault and the failover 30 s before the end.
func TestPoolerShortScheduleHasPoolerRestarts(t *testing.T) {
	for _, o := range []Options{{Seed: shortSeed}, clusterShortOptions} {
		o = o.WithDefaults()
		for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
			require.NotEqual(t, FaultPoolerRestart, f.Kind, "seed %d: a pooler_restart without a pooler", o.Seed)
		}
	}
	o := poolerShortOptions.WithDefaults()
	early := 0
	long := map[string]int{}
	for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
		if f.Kind == FaultPoolerRestart {
			require.LessOrEqual(t, f.Hold, poolerRestartMaxDown)
			if f.At < o.Duration/2 {
				early++
			}
		}
		if f.Kind == FaultFailover {
			require.Less(t, f.At+planned(f), o.Duration-30*time.Second, "seed %d: failover at %s", o.Seed, f.At)
		}
		if slices.Contains(longKinds, f.Kind) {
			long[f.Kind]++
		}
	}
	require.GreaterOrEqual(t, early, 2, "seed %d: pooler restarts in the first half of the phase", o.Seed)
	require.Equal(t, map[string]int{FaultWarehouseDown: 1, FaultNATSDown: 1, FaultRollingRestart: 1, FaultFailover: 1}, long)
}

// TestKindsRestrictTheDraw: a focused campaign draws only the kinds it
// names, and Validate refuses a kind the schedule does not know.
func TestKindsRestrictTheDraw(t *testing.T) {
	o := Options{Seed: 7, Kinds: []string{FaultPGTerminate, FaultNATSReset}, LongRounds: -1}.WithDefaults()
	seen := map[string]int{}
	for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 0))) {
		seen[f.Kind]++
	}
	if len(seen) != 2 || seen[FaultPGTerminate] == 0 || seen[FaultNATSReset] == 0 {
		t.Fatalf("drawn %v, want only and both of %v", seen, o.Kinds)
	}
	o.Kinds = []string{"disk_on_fire"}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), `"disk_on_fire"`) {
		t.Fatalf("Validate with an unknown kind: %v", err)
	}
}

// TestEveryKindCatchesUp: a nemesis behind its schedule passes over the
// kinds it already injected while another is still to come, and past the
// phase injects only the kinds not yet injected, until its extension.
func TestEveryKindCatchesUp(t *testing.T) {
	start := time.Now()
	end, extend := start.Add(100*time.Second), start.Add(200*time.Second)
	faults := []*fault{{Kind: "a", At: 0}, {Kind: "a", At: 10 * time.Second}, {Kind: "b", At: 20 * time.Second}, {Kind: "a", At: 30 * time.Second}, {Kind: "c", At: 90 * time.Second}}
	injected := map[string]bool{"a": true}
	at := func(d time.Duration) time.Time { return start.Add(d) }

	plain := &nemesis{}
	require.Equal(t, nemesisInject, plain.next(at(50*time.Second), start, end, faults, 1, injected), "without everyKind every fault runs")
	require.Equal(t, nemesisStop, plain.next(at(101*time.Second), start, end, faults, 4, injected))

	n := &nemesis{everyKind: true, extend: extend}
	require.Equal(t, nemesisInject, n.next(at(10*time.Second), start, end, faults, 1, injected), "on time: a repeat runs")
	require.Equal(t, nemesisPass, n.next(at(50*time.Second), start, end, faults, 1, injected), "behind: b and c first")
	require.Equal(t, nemesisInject, n.next(at(50*time.Second), start, end, faults, 2, injected))
	injected["b"] = true
	require.Equal(t, nemesisPass, n.next(at(150*time.Second), start, end, faults, 3, injected), "past the phase: only c")
	require.Equal(t, nemesisInject, n.next(at(150*time.Second), start, end, faults, 4, injected))
	require.Equal(t, nemesisStop, n.next(at(201*time.Second), start, end, faults, 4, injected), "the extension is over")
	injected["c"] = true
	require.Equal(t, nemesisInject, n.next(at(95*time.Second), start, end, faults, 4, injected), "within the phase, the last one runs")
	require.Equal(t, nemesisStop, n.next(at(150*time.Second), start, end, faults, 4, injected), "every kind injected: the phase ends")
}

// TestSecondNemesisDrawsItsOwnKinds: with Second, the first schedule
// draws none of its kinds and keeps the long faults; the second draws only
// its kinds, no long fault, at its own weight; a kind that stops every
// process stays with the first.
func TestSecondNemesisDrawsItsOwnKinds(t *testing.T) {
	o := Options{Seed: 11, Cluster: true, Files: true, PGSource: true, Kinds: append(clusterKindsAll(), faultsShortKinds...), ExtraWeight: 24,
		Second: []string{FaultKill, FaultPause, FaultClockStep, FaultObjectStore5xx}, SecondWeight: 5, LongRounds: 1,
		Duration: 30 * time.Minute, Events: 1000}.WithDefaults()
	first, second := o.split()
	long := 0
	for _, f := range schedule(first, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
		if slices.Contains(o.Second, f.Kind) {
			t.Errorf("the first schedule drew %s, one of Second", f.Kind)
		}
		if slices.Contains(longKinds, f.Kind) {
			long++
		}
	}
	if long != len(longKinds) {
		t.Errorf("the first schedule has %d long faults, want %d", long, len(longKinds))
	}
	seen := map[string]int{}
	for _, f := range schedule(second, rand.New(rand.NewPCG(uint64(o.Seed), 3))) {
		seen[f.Kind]++
	}
	for k := range seen {
		if !slices.Contains(o.Second, k) {
			t.Errorf("the second schedule drew %s, not one of Second", k)
		}
	}
	if len(seen) != len(o.Second) {
		t.Errorf("the second schedule drew %v, want each of %v", seen, o.Second)
	}
	if second.ExtraWeight != 5 || first.ExtraWeight != 24 {
		t.Errorf("weights: first %d, second %d", first.ExtraWeight, second.ExtraWeight)
	}
	bad := o
	bad.Second = []string{FaultKill, FaultSiteCrash}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), FaultSiteCrash) {
		t.Errorf("Validate with a site crash in Second: %v", err)
	}
}

// TestSiteCrashRunsAlone: a site crash or a rolling restart waits for the
// other nemesis's fault, and a fault of the other waits for them.
func TestSiteCrashRunsAlone(t *testing.T) {
	n := &nemesis{}
	unlock := n.exclusive(FaultKill)
	require.False(t, n.site.TryLock(), "a site crash started during a kill")
	other := n.exclusive(FaultObjectStoreDown)
	other()
	unlock()
	unlock = n.exclusive(FaultSiteCrash)
	require.False(t, n.site.TryRLock(), "a fault started during a site crash")
	unlock()
	unlock = n.exclusive(FaultRollingRestart)
	require.False(t, n.site.TryRLock(), "a fault started during a rolling restart")
	unlock()
}

// TestThePublisherLastsAsLongAsThePhase: a phase that EveryKind extends
// (up to twice its length) gives the publisher as long, plus the minute
// it has to catch up; cut at the unextended phase, a publisher held back
// by the faults left the workload's last events unpublished.
func TestThePublisherLastsAsLongAsThePhase(t *testing.T) {
	o := Options{Duration: 100 * time.Second}
	require.Equal(t, 160*time.Second, publishFor(o))
	o.EveryKind = true
	require.Equal(t, 260*time.Second, publishFor(o))
}
