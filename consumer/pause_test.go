package consumer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pauseSwitch is a Config.Paused answering from memory, as the service's.
type pauseSwitch struct {
	mu    sync.Mutex
	until map[string]time.Time // zero: until resumed
}

func (p *pauseSwitch) set(dataset string, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.until == nil {
		p.until = map[string]time.Time{}
	}
	p.until[dataset] = until
}

func (p *pauseSwitch) resume(dataset string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.until, dataset)
}

func (p *pauseSwitch) paused(dataset string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.until[dataset]
	return u, ok
}

func TestPausedDatasetIsHeldWithoutSlotsWhileOthersLoad(t *testing.T) {
	t.Parallel()
	sw := &pauseSwitch{}
	sw.set("orders", time.Time{})
	e := newEnv(t, func(c *Config) {
		c.MaxInFlight = 2 // 4 fetch slots: 2 orders held at most
		c.AckWait = time.Second
		// One attempt: anything counted against the budget would dead-letter.
		c.Datasets["orders"] = Dataset{Retry: Retry{MaxAttempts: 1, Delay: time.Millisecond, MaxDelay: time.Millisecond}}
		c.Paused = sw.paused
	})
	var orders, customers calls
	c, _ := e.start(func(_ context.Context, m *Message) error {
		if m.Dataset == "orders" {
			orders.add(m)
		} else {
			customers.add(m)
		}
		return nil
	})
	for i := range 12 {
		e.publish("idem.ready.orders", event("orders", fmt.Sprintf("2026-11-%02d", i+1), "r1"), nil)
	}
	var last uint64
	for i := range 12 {
		last = e.publish("idem.ready.customers", event("customers", fmt.Sprintf("2026-11-%02d", i+1), "r1"), nil)
	}
	// The customers behind twelve paused orders all load: held orders
	// take no fetch slot, the others go back to the stream.
	require.Eventually(t, func() bool { return customers.count() == 12 }, waitFor, tick)
	require.Eventually(t, func() bool {
		c.pauses.mu.Lock()
		defer c.pauses.mu.Unlock()
		return c.pauses.held["orders"] == c.maxPaused()
	}, waitFor, tick, "the process holds its bound of paused messages")
	heartbeats := e.hook.heartbeatCount()
	require.Eventually(t, func() bool { return e.hook.heartbeatCount() > heartbeats }, waitFor, tick, "held messages are kept owned")
	require.Positive(t, e.hook.event("orders/paused"), "messages beyond the bound were sent back")
	require.Zero(t, orders.count(), "nothing of a paused dataset runs")
	require.Zero(t, e.streamMsgs(testDLQ))

	sw.resume("orders")
	e.settled(last)
	msgs, _ := orders.snapshot()
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Event.Key.Key]++
	}
	require.Len(t, seen, 12)
	for p, n := range seen {
		require.Equal(t, 1, n, "partition %s loaded once", p)
	}
	require.Zero(t, e.streamMsgs(testDLQ), "a pause spends no attempt")
}

func TestPauseEndsByItselfAtItsUntil(t *testing.T) {
	t.Parallel()
	sw := &pauseSwitch{}
	until := time.Now().Add(1500 * time.Millisecond)
	sw.set("orders", until)
	e := newEnv(t, func(c *Config) { c.Paused = sw.paused })
	var ranAt atomic.Int64
	e.start(func(_ context.Context, m *Message) error {
		ranAt.CompareAndSwap(0, time.Now().UnixNano())
		return nil
	})
	last := e.publish("idem.ready.orders", event("orders", "2026-11-01", "r1"), nil)
	e.settled(last)
	require.GreaterOrEqual(t, ranAt.Load(), until.UnixNano(), "the load waited for the pause's end")
}

// Every message of a lane held by a pause lent its slot, so the lane
// counts as empty and its pull probes with one slot: the held messages
// must still run at once when the pause ends, with nothing else to fetch.
func TestResumeRunsEveryHeldMessageOfAnIdleLane(t *testing.T) {
	t.Parallel()
	sw := &pauseSwitch{}
	sw.set("orders", time.Time{})
	e := newEnv(t, func(c *Config) {
		c.FetchWait = 30 * time.Second // a pull that outlives the test: only a wake-up ends the wait
		c.AckWait = 5 * time.Second
		c.Paused = sw.paused
	})
	c, _ := e.start(func(_ context.Context, m *Message) error { return nil })
	for i := range 2 {
		e.publish("idem.ready.orders", event("orders", fmt.Sprintf("2026-11-%02d", i+1), "r1"), nil)
	}
	require.Eventually(t, func() bool {
		c.pauses.mu.Lock()
		defer c.pauses.mu.Unlock()
		return c.pauses.held["orders"] == 2
	}, waitFor, tick, "both held")
	sw.set("orders", time.Now().Add(-time.Second)) // the pause ended
	e.hook.waitEvent(t, "orders/acked", 2)
}

// A message that passed the pause check, then waited for the warehouse (an
// open circuit) or for its dataset's turn, does not load through a pause
// set while it waited: it is held again, and loads once resumed.
func TestPauseSetWhileWaitingHoldsTheMessage(t *testing.T) {
	t.Parallel()
	t.Run("the warehouse", func(t *testing.T) {
		t.Parallel()
		sw := &pauseSwitch{}
		w := &warehouse{}
		w.down.Store(true)
		e := newEnv(t, func(c *Config) {
			c.AckWait = time.Second
			c.Datasets["orders"] = Dataset{Retry: Retry{MaxAttempts: 1, Delay: time.Millisecond, MaxDelay: time.Millisecond}}
			c.Paused = sw.paused
			c.Probe = w.probe
			c.ProbeDelay = 50 * time.Millisecond
			c.MaxProbeDelay = 100 * time.Millisecond
		})
		var tries atomic.Int32
		var loaded calls
		e.start(func(_ context.Context, m *Message) error {
			tries.Add(1)
			if w.down.Load() {
				return unavailable{}
			}
			if _, paused := sw.paused("orders"); paused {
				t.Errorf("%s loaded while its dataset was paused", m.Event.Key.Key)
			}
			loaded.add(m)
			return nil
		})
		last := e.publish("idem.ready.orders", event("orders", "2026-11-01", "r1"), nil)
		// The load found the warehouse down: the message waits for the
		// circuit, past its pause check.
		require.Eventually(t, func() bool { return tries.Load() == 1 && w.probes.Load() >= 2 }, waitFor, tick)
		sw.set("orders", time.Time{})
		w.down.Store(false)
		time.Sleep(time.Second) // the circuit closes within 100 ms
		require.Zero(t, loaded.count(), "a message loaded through a pause set while it waited for the warehouse")
		sw.resume("orders")
		e.settled(last)
		require.Equal(t, 1, loaded.count())
		require.Zero(t, e.streamMsgs(testDLQ))
	})
	t.Run("a turn", func(t *testing.T) {
		t.Parallel()
		sw := &pauseSwitch{}
		e := newEnv(t, func(c *Config) {
			c.AckWait = time.Second
			c.Datasets["orders"] = Dataset{MaxConcurrency: 1}
			c.Paused = sw.paused
		})
		first := make(chan struct{})
		release := make(chan struct{})
		var loaded calls
		e.start(func(_ context.Context, m *Message) error {
			if loaded.add(m) == 1 {
				close(first)
				<-release
				return nil
			}
			if _, paused := sw.paused("orders"); paused {
				t.Errorf("%s loaded while its dataset was paused", m.Event.Key.Key)
			}
			return nil
		})
		e.publish("idem.ready.orders", event("orders", "2026-11-01", "r1"), nil)
		<-first
		last := e.publish("idem.ready.orders", event("orders", "2026-11-02", "r1"), nil)
		// The second waits for the first's turn, past its pause check.
		require.Eventually(t, func() bool { return strings.Contains(e.logs.String(), "waiting for a turn") }, waitFor, tick)
		sw.set("orders", time.Time{})
		close(release)
		time.Sleep(time.Second)
		require.Equal(t, 1, loaded.count(), "a message loaded through a pause set while it waited for its turn")
		sw.resume("orders")
		e.settled(last)
		require.Equal(t, 2, loaded.count())
		require.Zero(t, e.streamMsgs(testDLQ))
	})
	for _, grouped := range []bool{false, true} {
		t.Run(map[bool]string{false: "a slot", true: "a slot, grouped"}[grouped], func(t *testing.T) {
			t.Parallel()
			sw := &pauseSwitch{}
			// Without groups as many are fetched ahead as run: two long
			// loads, so that a third waits.
			blocking := map[bool]int{false: 2, true: 1}[grouped]
			release := make(chan struct{})
			var loaded calls
			load := func(m *Message) {
				if loaded.add(m) <= blocking {
					<-release
					return
				}
				if _, paused := sw.paused("orders"); paused {
					t.Errorf("%s loaded while its dataset was paused", m.Event.Key.Key)
				}
			}
			e := newEnv(t, func(c *Config) {
				c.AckWait = time.Second
				c.MaxInFlight = blocking
				c.Paused = sw.paused
				if grouped {
					c.MaxGroup = 4
					c.GroupSize = func(*Message) int { return 4 }
					c.GroupHandler = func(_ context.Context, ms []*Message) []error {
						for _, m := range ms {
							load(m)
						}
						return make([]error, len(ms))
					}
				}
			})
			e.start(func(_ context.Context, m *Message) error { load(m); return nil })
			for i := range blocking {
				e.publish("idem.ready.orders", event("orders", fmt.Sprintf("2026-10-%02d", i+1), "r1"), nil)
			}
			require.Eventually(t, func() bool { return loaded.count() == blocking }, waitFor, tick)
			last := e.publish("idem.ready.customers", event("customers", "2026-11-02", "r1"), nil)
			if grouped {
				last = e.publish("idem.ready.orders", event("orders", "2026-11-02", "r1"), nil)
			}
			// Fetched past its pause check, it waits for the only slot.
			require.Eventually(t, func() bool { return e.consumerInfo().Delivered.Stream >= last }, waitFor, tick)
			sw.set("orders", time.Time{})
			sw.set("customers", time.Time{})
			close(release)
			time.Sleep(time.Second)
			require.Equal(t, blocking, loaded.count(), "a message loaded through a pause set while it waited for a slot")
			sw.resume("orders")
			sw.resume("customers")
			e.settled(last)
			require.Equal(t, blocking+1+map[bool]int{false: 0, true: 1}[grouped], loaded.count())
			require.Zero(t, e.streamMsgs(testDLQ))
		})
	}
}
