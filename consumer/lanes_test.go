package consumer

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// laneLoads counts a handler's loads per lane: running now, the most at
// once, and started.
type laneLoads struct {
	mu               sync.Mutex
	running, most    [2]int
	started, stopped [2]int
}

func laneOf(m *Message) lane {
	if strings.HasPrefix(m.Subject, "idem.backfill.") {
		return laneBackfill
	}
	return laneLive
}

func (l *laneLoads) start(m *Message) (ln lane, started int) {
	ln = laneOf(m)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[ln]++
	l.started[ln]++
	l.most[ln] = max(l.most[ln], l.running[ln])
	return ln, l.started[ln]
}

func (l *laneLoads) end(ln lane) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[ln]--
	l.stopped[ln]++
}

func (l *laneLoads) get() (running, most, started, stopped [2]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running, l.most, l.started, l.stopped
}

func (e *env) publishBackfill(n int) {
	e.t.Helper()
	day := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		e.publish("idem.backfill.orders", event("orders", day.AddDate(0, 0, i).Format(time.DateOnly), "backfill__1"), nil)
	}
}

// A live event published while a backfill of 500 events runs on the
// backfill lane starts long before the backfill drains: within one load
// and one pull, not behind the backlog.
func TestLiveEventStartsBeforeTheBackfillDrains(t *testing.T) {
	const backlog = 500
	e := newEnv(t, nil)
	e.publishBackfill(backlog)
	var (
		loads    laneLoads
		liveSeen = make(chan int, 1) // backfill loads started when the live one did
	)
	e.start(func(ctx context.Context, m *Message) error {
		ln, _ := loads.start(m)
		defer loads.end(ln)
		if ln == laneLive {
			_, _, started, _ := loads.get()
			liveSeen <- started[laneBackfill]
			return nil
		}
		// Some work, so that the backlog takes a while to drain.
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	require.Eventually(t, func() bool { _, _, s, _ := loads.get(); return s[laneBackfill] >= 20 }, waitFor, tick)
	e.publish("idem.ready.orders", event("orders", "2026-11-28", "live_1"), nil)
	var startedBefore int
	select {
	case startedBefore = <-liveSeen:
	case <-time.After(waitFor):
		t.Fatal("the live event never started")
	}
	require.LessOrEqual(t, startedBefore, backlog-400, "the live event started after %d of %d backfill loads; it must not wait for the backlog", startedBefore, backlog)
	require.Eventually(t, func() bool { _, _, _, s := loads.get(); return s[laneBackfill] == backlog }, waitFor, tick, "the backfill drains")
}

// Without live work the backfill lane runs max_in_flight loads at once.
func TestBackfillUsesEveryLoadWithoutLiveWork(t *testing.T) {
	e := newEnv(t, nil)
	e.publishBackfill(20)
	var loads laneLoads
	release := make(chan struct{})
	e.start(func(ctx context.Context, m *Message) error {
		ln, _ := loads.start(m)
		defer loads.end(ln)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	require.Eventually(t, func() bool { r, _, _, _ := loads.get(); return r[laneBackfill] == e.cfg.MaxInFlight }, waitFor, tick,
		"the backfill reaches max_in_flight %d loads", e.cfg.MaxInFlight)
	close(release)
	require.Eventually(t, func() bool { _, _, _, s := loads.get(); return s[laneBackfill] == 20 }, waitFor, tick)
	_, most, _, _ := loads.get()
	require.Equal(t, e.cfg.MaxInFlight, most[laneBackfill])
	e.hook.mu.Lock()
	defer e.hook.mu.Unlock()
	require.Equal(t, e.cfg.MaxInFlight, e.hook.laneMax[LaneBackfill], "the lane's gauge saw every load")
	require.Zero(t, e.hook.laneMax[LaneLive])
}

// While a live load runs, the backfill runs at most its share of
// max_in_flight (50% of 4) at once, however many of its events wait; the
// rest stays free for live work.
func TestBackfillKeepsToItsShareWhileLiveWorkRuns(t *testing.T) {
	e := newEnv(t, nil)
	var loads laneLoads
	liveGo := make(chan struct{})
	e.start(func(ctx context.Context, m *Message) error {
		ln, _ := loads.start(m)
		defer loads.end(ln)
		if ln == laneLive {
			select {
			case <-liveGo:
			case <-ctx.Done():
			}
			return nil
		}
		time.Sleep(5 * time.Millisecond) // loads that overlap, so a third would show
		return nil
	})
	e.publish("idem.ready.orders", event("orders", "2026-11-28", "live_1"), nil)
	require.Eventually(t, func() bool { r, _, _, _ := loads.get(); return r[laneLive] == 1 }, waitFor, tick)
	e.publishBackfill(60)
	require.Eventually(t, func() bool { _, _, _, s := loads.get(); return s[laneBackfill] >= 40 }, waitFor, tick)
	_, most, _, _ := loads.get()
	require.Equal(t, 2, most[laneBackfill], "the backfill's share of 4 loads while live work runs")
	close(liveGo)
	require.Eventually(t, func() bool { _, _, _, s := loads.get(); return s[laneBackfill] == 60 && s[laneLive] == 1 }, waitFor, tick)
}

func TestLanesLimits(t *testing.T) {
	l := newLanes(8, 4, 50)
	require.Equal(t, 1, l.limit(laneLive), "a lane without messages probes with one")
	require.Equal(t, 1, l.limit(laneBackfill))
	l.busy[laneBackfill] = 3
	require.Equal(t, 7, l.limit(laneBackfill), "all but the live probe's slot")
	l.busy[laneLive] = 1
	require.Equal(t, 4, l.limit(laneBackfill), "its share while live work is held")
	require.Equal(t, 4, l.limit(laneLive), "the rest while the backfill has work")
	l.busy[laneBackfill] = 0
	require.Equal(t, 8, l.limit(laneLive), "every slot without backfill work")
	l = newLanes(4, 4, 1)
	require.Equal(t, 1, l.shareLoads, "a share rounds up to one load")
	l.busy[laneBackfill] = 1
	require.Equal(t, 4, l.limit(laneBackfill), "nothing fetched ahead: the backfill takes every slot")
}

// Group loads form on both lanes, never across them: a live load does not
// carry a backfill's partitions.
func TestGroupsFormWithinALane(t *testing.T) {
	var (
		mu     sync.Mutex
		groups [][]lane
		loaded = map[string]int{}
	)
	record := func(ms []*Message) {
		mu.Lock()
		defer mu.Unlock()
		g := make([]lane, len(ms))
		for i, m := range ms {
			g[i] = laneOf(m)
			loaded[m.Subject+" "+m.Event.Key.Key]++
		}
		groups = append(groups, g)
	}
	e := newEnv(t, func(c *Config) {
		c.MaxInFlight, c.MaxGroup = 1, 4
		c.GroupSize = func(*Message) int { return 4 }
		c.GroupHandler = func(ctx context.Context, ms []*Message) []error {
			record(ms)
			time.Sleep(5 * time.Millisecond) // a load long enough for others to queue behind it
			return make([]error, len(ms))
		}
	})
	e.publishBackfill(40)
	day := time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 8 {
		e.publish("idem.ready.orders", event("orders", day.AddDate(0, 0, i).Format(time.DateOnly), "live_1"), nil)
	}
	e.start(func(ctx context.Context, m *Message) error {
		record([]*Message{m})
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(loaded) == 48 }, waitFor, tick)
	mu.Lock()
	defer mu.Unlock()
	grouped := [2]bool{}
	for _, g := range groups {
		for _, ln := range g {
			require.Equal(t, g[0], ln, "a group of one lane: %v", g)
		}
		if len(g) > 1 {
			grouped[g[0]] = true
		}
	}
	require.True(t, grouped[laneBackfill], "backfill events load in groups: %v", groups)
	require.True(t, grouped[laneLive], "live events load in groups: %v", groups)
	for k, n := range loaded {
		require.Equal(t, 1, n, k)
	}
}

// A live pull never takes the backfill probe's slot, even in the moment
// the probe's pull ended and gave it back: the backfill could otherwise
// never fetch while live work runs.
func TestLivePullsLeaveTheBackfillProbeItsSlot(t *testing.T) {
	l := newLanes(8, 4, 50)
	l.busy[laneLive], l.held[laneLive] = 1, 1
	require.Equal(t, 6, l.free(laneLive), "every slot but the probe's")
	l.held[laneLive] += l.free(laneLive)
	require.Equal(t, 1, l.free(laneBackfill), "the probe still fetches")
}
