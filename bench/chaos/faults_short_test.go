package chaos

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// shortCampaign skips a short campaign in -short and under CHAOS_LONG=1,
// which runs the long ones.
func shortCampaign(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos campaign: not in -short")
	}
	if os.Getenv("CHAOS_LONG") == "1" {
		t.Skip("CHAOS_LONG=1 runs the long campaigns instead")
	}
}

// focused skips a focused campaign of one fault kind unless CHAOS_FAULTS
// is set (make chaos-faults): make test runs TestChaosFaultsShort, every
// such kind in one campaign, instead.
func focused(t *testing.T) {
	t.Helper()
	shortCampaign(t)
	if os.Getenv("CHAOS_FAULTS") == "" {
		t.Skip("the focused campaigns run with CHAOS_FAULTS=1 (make chaos-faults); make test runs TestChaosFaultsShort")
	}
}

// faultsShortKinds are the faults of the sources, the disks, the streams'
// limits, whole-site crashes and clock steps: the kinds the default
// campaign does not draw.
var faultsShortKinds = append([]string{FaultSiteCrash, FaultPGDiskFull, FaultJSStorageFull, FaultClockStep, FaultSourceFailover}, objstoreKinds...)

// faultsShortSeed is TestChaosFaultsShort's seed, one whose schedule draws
// every kind of faultsShortKinds in the first three fifths of the phase
// (TestFaultsShortScheduleHasEveryKind); CHAOS_SEED overrides it.
const faultsShortSeed = 20267609

var faultsShortOptions = Options{Seed: faultsShortSeed, Cluster: true, PGSource: true, Files: true, Downstream: true, Timely: true, LeastPrivilege: true,
	Kinds: faultsShortKinds, LongRounds: -1, Duration: 100 * time.Second, Events: 600}

// TestChaosFaultsShort is the campaign `make test` runs for the faults
// beyond the default campaign's, all in one: three nats-server processes
// with R3 streams, the warehouse on a sized tmpfs, a PostgreSQL source
// with its standby, watched file datasets in a real versitygw, a
// downstream dataset, the replicas as the loader role of grants.sql; and
// site crashes, full disks, full streams, clock steps, source failovers
// and the object store down, slow or failing, among 100 s of faults. Each kind also has a focused
// campaign of its own (make chaos-faults).
func TestChaosFaultsShort(t *testing.T) {
	shortCampaign(t)
	o := faultsShortOptions
	o.PG = pgOnTmpfs(t, 640)
	// A CI run beside the race build ran 5 of its 8 kinds in 100 s (a
	// full stream took 33 s to heal, a source promotion 35 s).
	o.EveryKind = true
	r := runCampaign(t, o)
	if os.Getenv("CHAOS_SEED") == "" {
		requireFaults(t, r, faultsShortKinds...)
	}
}

// TestFaultsShortScheduleHasEveryKind: TestChaosFaultsShort's seed draws
// every kind in the first three fifths of its phase, so slow heals (a site
// crash takes some 15 s) cannot push one out of it.
func TestFaultsShortScheduleHasEveryKind(t *testing.T) {
	o := faultsShortOptions.WithDefaults()
	first := map[string]time.Duration{}
	for _, f := range schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2))) {
		if _, ok := first[f.Kind]; !ok {
			first[f.Kind] = f.At
		}
	}
	for _, k := range faultsShortKinds {
		if at, ok := first[k]; !ok || at > o.Duration*3/5 {
			t.Errorf("%s first drawn at %s (drawn: %v), want within %s", k, at, ok, o.Duration*3/5)
		}
	}
}

// timelyShortSeed is TestChaosTimelyShort's seed; CHAOS_SEED overrides it.
const timelyShortSeed = 20261207

// TestChaosTimelyShort is the focused campaign of a world that moves:
// events before their rows, rows corrected with no event, an operator's
// pauses, among replicas killed, PostgreSQL stopped and clocks stepped.
func TestChaosTimelyShort(t *testing.T) {
	focused(t)
	r := runCampaign(t, Options{Seed: timelyShortSeed, Timely: true, LeastPrivilege: true, LongRounds: -1,
		Kinds: []string{FaultKill, FaultPGFast, FaultClockStep}, Duration: 60 * time.Second, Events: 300})
	if r == nil || r.Timely == nil {
		t.Fatal("no timely figures")
	}
	if r.Timely.EarlyWaited == 0 || r.Timely.RecheckReloads == 0 || r.Timely.Pauses < 2 {
		t.Errorf("the moving world did not move: %+v", *r.Timely)
	}
}

// TestChaosFullCampaign is the long campaign of every fault and every
// kind of dataset (`make chaos-full`): the cluster's faults and long
// faults, and each kind beyond them, on the site of TestChaosFaultsShort
// (the warehouse on a tmpfs of about 6 GiB: at 4 GiB, 90 min of
// the PostgreSQL source's append target filled it). Its seed is drawn unless CHAOS_SEED
// is set; CHAOS_EVENTS and CHAOS_DURATION size it.
func TestChaosFullCampaign(t *testing.T) {
	if os.Getenv("CHAOS_LONG") != "1" || os.Getenv("CHAOS_FULL") == "" {
		t.Skip("the full campaign runs with CHAOS_LONG=1 CHAOS_FULL=1 (make chaos-full)")
	}
	o := faultsShortOptions
	o.Seed = 0
	o.Kinds = append(clusterKindsAll(), faultsShortKinds...)
	// At weight 4 over 60 min each kind beyond the cluster campaign's ran
	// 8 to 17 times: the nemesis runs about half the faults it plans, the
	// new kinds' heals being slow (a site crash some 15 s). 24 over 100
	// min plans 52 or more of each.
	o.ExtraWeight = 24
	// One schedule runs one fault at a time: about 650 in 100 min, the
	// new kinds' heals being slow. A second nemesis, at the same time,
	// draws the replicas' own faults, the object store's and clock steps,
	// mostly quick ones (weight 5 for its new kinds).
	o.Second = []string{FaultKill, FaultPause, FaultPGTerminate, FaultNATSLatency, FaultClockStep, FaultObjectStoreDown, FaultObjectStoreSlow, FaultObjectStore5xx}
	o.SecondWeight = 5
	// The backlog built during 90 min of faults drains after them: the
	// bound is generous, and the report gives the time it took.
	o.Events, o.Duration, o.Partitions, o.DrainBound = 100000, 90*time.Minute, 100, 20*time.Minute
	o.LongRounds, o.WarehouseDownMin, o.WarehouseDownMax = 4, 30*time.Second, 2*time.Minute
	o.FaultGapMin, o.FaultGapMax = 300*time.Millisecond, 1500*time.Millisecond
	o.PG = pgOnTmpfs(t, 6000)
	// The servers' stores on a tmpfs of their own, whatever /dev/shm
	// holds: three servers' R3 streams over 90 min take some 1.5 GB.
	o.NATSStore = sizedTmpfs(t, 4000)
	r := runCampaign(t, o)
	requireLongFaults(t, r)
	if r != nil {
		for _, k := range faultsShortKinds {
			if n := r.Faults.ByKind[k]; n < 20 {
				t.Errorf("%d %s: fewer than 20", n, k)
			}
		}
		// The target the campaign is run for: skipped faults do not count.
		if r.Faults.Total < 2000 {
			t.Errorf("%d faults: fewer than 2,000", r.Faults.Total)
		}
		if r.Events.Total < 100000 {
			t.Errorf("%d events: fewer than 100,000", r.Events.Total)
		}
	}
}

// clusterKindsAll are the kinds the cluster campaign draws.
func clusterKindsAll() []string {
	var out []string
	for _, w := range clusterFaultWeights {
		out = append(out, w.kind)
	}
	return out
}
