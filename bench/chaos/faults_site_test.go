package chaos

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// siteCrashShortSeed is TestChaosSiteCrashShort's seed: its schedule holds
// at least two site crashes early in the phase (TestSiteCrashShortSchedule).
const siteCrashShortSeed = 20261206

var siteCrashShortOptions = Options{Seed: siteCrashShortSeed, Cluster: true, Kinds: []string{FaultSiteCrash}, LongRounds: -1,
	Duration: 45 * time.Second, Events: 300, SlowLoad: 2 * time.Second}

// TestChaosSiteCrashShort is a focused campaign of whole-site crashes:
// PostgreSQL, the three nats-server processes and the three idem replicas
// SIGKILLed at once, then brought back one by one in an order the seed
// draws. Nothing may be lost, loaded twice or dead-lettered; above all no
// valid event may be dead-lettered as crashed, which would mean idem
// counted the attempts the crashes cut short toward its crash budget.
func TestChaosSiteCrashShort(t *testing.T) {
	focused(t)
	r := runCampaign(t, siteCrashShortOptions)
	requireFaults(t, r, FaultSiteCrash)
	if r != nil && r.Faults.ByKind[FaultSiteCrash] < 2 {
		t.Errorf("%d site crashes: the campaign needs two at least, so that a message can be cut by more than one", r.Faults.ByKind[FaultSiteCrash])
	}
}

// TestSiteCrashShortSchedule: the seed of TestChaosSiteCrashShort draws
// site crashes only, at least two of them within the first half of the
// phase, each with an order that brings back PostgreSQL, every server and
// every replica once.
func TestSiteCrashShortSchedule(t *testing.T) {
	o := siteCrashShortOptions.WithDefaults()
	sched := schedule(o, rand.New(rand.NewPCG(uint64(o.Seed), 2)))
	early := 0
	for _, f := range sched {
		require.Equal(t, FaultSiteCrash, f.Kind)
		if f.At < o.Duration/2 {
			early++
		}
	}
	require.GreaterOrEqual(t, early, 2, "site crashes in the first half of the phase")
	steps := siteRestartOrder(int64(sched[0].Param), o.Replicas, []string{"n0", "n1", "n2"}, false)
	var names []string
	for _, s := range steps {
		names = append(names, s.name)
		require.LessOrEqual(t, s.delay, siteDownMax)
	}
	require.GreaterOrEqual(t, steps[0].delay, siteDownMin)
	slices.Sort(names)
	require.Equal(t, []string{"idem0", "idem1", "idem2", "n0", "n1", "n2", "postgres"}, names)
	require.Equal(t, steps, siteRestartOrder(int64(sched[0].Param), o.Replicas, []string{"n0", "n1", "n2"}, false), "the same seed, the same order")
	require.NotEqual(t, steps, siteRestartOrder(int64(sched[1].Param), o.Replicas, []string{"n0", "n1", "n2"}, false))
}

// TestCrashedDeadLetterInASiteCrashIsNeverExcused: a crashed dead letter
// of a valid event whose life overlapped a site crash is a violation, even
// when a kill of a replica overlapped it too: idem must not count the
// attempts a crash of the warehouse cut short.
func TestCrashedDeadLetterInASiteCrashIsNeverExcused(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	h := history{faults: []*fault{
		{Kind: FaultKill, Start: at(10), End: at(10)},
		{Kind: FaultSiteCrash, Start: at(20), End: at(35)},
	}}
	ws := faultWindows(h, 2*time.Second)

	// Long after the site crash's window: the outage rule alone would not
	// see it; the kill would excuse it.
	v, by := judgeTransient(ws, at(5), deadLetter{kind: "crashed", failedAt: at(120)})
	require.Equal(t, inOutage, v)
	require.Equal(t, FaultSiteCrash, by)
	// An exhausted one with the same life is judged as before: the kill
	// excuses it.
	v, by = judgeTransient(ws, at(5), deadLetter{kind: "exhausted", failedAt: at(120)})
	require.Equal(t, excused, v)
	require.Equal(t, FaultKill, by)
	// A crashed one whose life did not meet the site crash is excused by the kill.
	v, _ = judgeTransient(ws, at(5), deadLetter{kind: "crashed", failedAt: at(15)})
	require.Equal(t, excused, v)
	// Inside the site crash's window any dead letter is an outage's.
	v, by = judgeTransient(ws, at(30), deadLetter{kind: "exhausted", failedAt: at(40)})
	require.Equal(t, inOutage, v)
	require.Equal(t, FaultSiteCrash, by)
}

// TestSiteKindsNeedTheirTopology: site_crash is refused without the
// cluster topology.
func TestSiteKindsNeedTheirTopology(t *testing.T) {
	o := Options{Kinds: []string{FaultSiteCrash}, Bin: "x", Dir: "x"}.WithDefaults()
	require.ErrorContains(t, o.Validate(), "site_crash needs Cluster")
	o.Cluster, o.NATSBin = true, "x"
	require.NotContains(t, o.Validate().Error(), "site_crash")
}
