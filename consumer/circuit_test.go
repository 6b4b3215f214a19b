package consumer

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// warehouse is a stand-in for the database's availability: the handler and
// the probe both ask it, as the real ones ask PostgreSQL.
type warehouse struct {
	down   atomic.Bool
	probes atomic.Int32
	mu     sync.Mutex
	loads  []string // run_ids of the loads that ran while up, in order
}

func (w *warehouse) probe(context.Context) error {
	w.probes.Add(1)
	if w.down.Load() {
		return unavailable{}
	}
	return nil
}

func TestCircuitHoldsMessagesThroughAnOutageWithoutSpendingTheirBudget(t *testing.T) {
	t.Parallel()
	w := &warehouse{}
	w.down.Store(true)
	e := newEnv(t, func(c *Config) {
		c.AckWait = time.Second
		c.MaxInFlight = 3
		// One attempt: anything counted against the budget would dead-letter.
		c.Datasets["orders"] = Dataset{Retry: Retry{MaxAttempts: 1, Delay: time.Millisecond, MaxDelay: time.Millisecond}}
		c.Probe = w.probe
		c.ProbeDelay = 50 * time.Millisecond
		c.MaxProbeDelay = 200 * time.Millisecond
	})
	var running atomic.Int32
	var overlap atomic.Bool
	c, _ := e.start(func(_ context.Context, m *Message) error {
		if w.down.Load() {
			return unavailable{}
		}
		if running.Add(1) > 1 && w.loadsRan() == 0 {
			overlap.Store(true) // a second load ran before the trial settled
		}
		defer running.Add(-1)
		time.Sleep(20 * time.Millisecond)
		w.mu.Lock()
		w.loads = append(w.loads, m.Event.RunID)
		w.mu.Unlock()
		return nil
	})
	var last uint64
	for i := range 8 {
		last = e.publish("idem.ready.orders", event("orders", "2026-11-28", "r"+string(rune('a'+i))), nil)
	}

	// Open: nothing fetched beyond the slots, nothing dead-lettered, the
	// probe runs again and again, the state says why.
	require.Eventually(t, func() bool { return w.probes.Load() >= 5 }, waitFor, tick)
	up, state, reason, _ := c.Warehouse()
	require.False(t, up)
	require.Equal(t, "open", state)
	require.ErrorContains(t, reason, "warehouse unavailable")
	info := e.consumerInfo()
	require.LessOrEqual(t, info.NumAckPending, c.lanes.slots, "no fetch beyond the messages held while open")
	require.Zero(t, e.streamMsgs(testDLQ))

	w.down.Store(false)
	info = e.settled(last)
	require.Zero(t, e.streamMsgs(testDLQ), "an outage dead-letters nothing")
	require.Equal(t, 8, w.loadsRan())
	require.False(t, overlap.Load(), "the first load after a good probe ran alone")
	require.Equal(t, []bool{false, true}, e.hook.circuitChanges(), "opened once, closed once")
	up, state, _, _ = c.Warehouse()
	require.True(t, up)
	require.Equal(t, "closed", state)
	// The held messages kept their delivery: heartbeats, no nak.
	require.Equal(t, uint64(8), info.Delivered.Consumer, "8 deliveries for 8 messages: none redelivered")

	logs := e.logs.String()
	require.Equal(t, 1, strings.Count(logs, "circuit open;"), "one line per change, not per message:\n%s", logs)
	require.Equal(t, 1, strings.Count(logs, "circuit closed"))
	require.Equal(t, 1, strings.Count(logs, "one load goes first"))
}

func (w *warehouse) loadsRan() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.loads)
}

func TestCircuitReopensWhenTheTrialLoadFails(t *testing.T) {
	t.Parallel()
	var probes atomic.Int32
	var calls atomic.Int32
	e := newEnv(t, func(c *Config) {
		c.Probe = func(context.Context) error { probes.Add(1); return nil } // lies: says up at once
		c.ProbeDelay = 20 * time.Millisecond
		c.MaxProbeDelay = 40 * time.Millisecond
	})
	e.start(func(_ context.Context, m *Message) error {
		if calls.Add(1) <= 3 {
			return unavailable{}
		}
		return nil
	})
	seq := e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)
	e.settled(seq)
	require.Equal(t, int32(4), calls.Load(), "the same delivery ran again after each good probe")
	require.Equal(t, int32(3), probes.Load())
	require.Equal(t, []bool{false, true}, e.hook.circuitChanges())
	require.Equal(t, 2, strings.Count(e.logs.String(), "open again"))
	e.hook.waitEvent(t, "orders/acked", 1)
}

func TestStopWhileTheCircuitIsOpenNaksWithoutCounting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.Probe = func(context.Context) error { return unavailable{} }
		c.Datasets["orders"] = Dataset{Retry: Retry{MaxAttempts: 1, Delay: time.Millisecond, MaxDelay: time.Millisecond}}
	})
	var calls atomic.Int32
	_, stop := e.start(func(context.Context, *Message) error { calls.Add(1); return unavailable{} })
	e.publish("idem.ready.orders", event("orders", "2026-11-28", "r1"), nil)
	require.Eventually(t, func() bool { return calls.Load() == 1 }, waitFor, tick)
	require.NoError(t, stop(time.Second))
	e.hook.waitEvent(t, "orders/interrupted", 1)
	require.Zero(t, e.streamMsgs(testDLQ))

	// The next process loads it: the nak spent no attempt.
	var ok atomic.Int32
	e.start(func(context.Context, *Message) error { ok.Add(1); return nil })
	require.Eventually(t, func() bool { return ok.Load() == 1 }, waitFor, tick)
	require.Zero(t, e.streamMsgs(testDLQ))
}
