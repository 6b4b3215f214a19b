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

// dupAsker is Duplicates for a test: the run ids starting "dup" are done.
type dupAsker struct {
	mu      sync.Mutex
	batches [][]string
}

func (a *dupAsker) ask(_ context.Context, ms []*Message) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	var runs []string
	out := make([]int, len(ms))
	for i, m := range ms {
		runs = append(runs, m.Event.RunID)
		if strings.HasPrefix(m.Event.RunID, "dup") {
			out[i] = 2
		}
	}
	a.batches = append(a.batches, runs)
	return out
}

func (a *dupAsker) asked() (batches, messages int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, b := range a.batches {
		messages += len(b)
	}
	return len(a.batches), messages
}

// TestDuplicatesTakeNoLoadSlot: while the only load slot is held by a
// long load, duplicates fetched behind it are asked about in batches and
// acknowledged at once, without the handler and without waiting for the
// slot; the other messages wait for it and load, each once.
func TestDuplicatesTakeNoLoadSlot(t *testing.T) {
	for _, grouped := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "grouped"}[grouped], func(t *testing.T) {
			asker := &dupAsker{}
			release := make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			var (
				mu      sync.Mutex
				loaded  = map[string]int{}
				holding atomic.Int32 // long loads holding their slot
			)
			load := func(m *Message) {
				if strings.HasPrefix(m.Event.RunID, "first") {
					holding.Add(1)
					<-release
				}
				mu.Lock()
				loaded[m.Event.RunID+"/"+m.Event.Key.Key]++
				mu.Unlock()
			}
			e := newEnv(t, func(c *Config) {
				// Both slots held by the long loads; without groups, as
				// many are fetched ahead.
				c.MaxInFlight = 2
				c.Duplicates = asker.ask
				if grouped {
					c.MaxGroup = 4
					c.GroupSize = func(*Message) int { return 4 }
					c.GroupHandler = func(ctx context.Context, ms []*Message) []error {
						for _, m := range ms {
							load(m)
						}
						return make([]error, len(ms))
					}
				}
			})
			e.publish("idem.ready.orders", event("orders", "2026-01-01", "first"), nil)
			first := e.publish("idem.ready.orders", event("orders", "2026-01-01", "first_again"), nil)
			e.start(func(ctx context.Context, m *Message) error { load(m); return nil })
			t.Cleanup(free) // before the consumer's stop, which waits for the loads
			// Both slots held before the duplicates come: delivered is not
			// enough, a busy machine can run a later message's wait for a
			// slot before the second long load takes its own.
			require.Eventually(t, func() bool { return e.consumerInfo().Delivered.Stream >= first && holding.Load() == 2 }, waitFor, tick)
			var last uint64
			for i := range 6 {
				last = e.publish("idem.ready.orders", event("orders", fmt.Sprintf("2026-02-%02d", i+1), "dup_run"), nil)
			}
			fresh := e.publish("idem.ready.orders", event("orders", "2026-03-01", "fresh"), nil)

			// Every duplicate acked while the slot is still held, and the
			// new run asked about too.
			require.Eventually(t, func() bool {
				_, asked := asker.asked()
				return e.hook.event("orders/acked") >= 6 && asked >= 7
			}, waitFor, tick)
			info := e.consumerInfo()
			require.Less(t, info.AckFloor.Stream, first, "the long loads still hold their slots: %+v", info.AckFloor)
			batches, asked := asker.asked()
			if grouped {
				// A group's worth is fetched ahead: they wait together.
				require.Less(t, batches, asked, "asked in batches")
			}

			free()
			e.settled(fresh)
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, map[string]int{"first/2026-01-01": 1, "first_again/2026-01-01": 1, "fresh/2026-03-01": 1}, loaded, "duplicates never reach the handler")
			require.GreaterOrEqual(t, e.consumerInfo().AckFloor.Stream, last)
		})
	}
}

// TestALoneMessageIsNotAskedAbout: a message that finds a free slot loads
// at once; no duplicate question delays it.
func TestALoneMessageIsNotAskedAbout(t *testing.T) {
	asker := &dupAsker{}
	e := newEnv(t, func(c *Config) { c.Duplicates = asker.ask })
	seq := e.publish("idem.ready.orders", event("orders", "2026-01-01", "dup_but_alone"), nil)
	var calls calls
	e.start(func(ctx context.Context, m *Message) error { calls.add(m); return nil })
	e.settled(seq)
	require.Equal(t, 1, calls.count(), "loaded: the handler's own ledger check decides its skip")
	_, asked := asker.asked()
	require.Zero(t, asked)
}

// TestDupBatcherProbesABacklogOfNewRuns: batches that find no duplicate
// stop being asked about, but for one in dupProbeEvery; a probe that finds
// one makes every batch asked about again.
func TestDupBatcherProbesABacklogOfNewRuns(t *testing.T) {
	dups := false
	var asked int
	b := &dupBatcher{timeout: waitFor, ask: func(_ context.Context, ms []*Message) []int {
		asked++
		out := make([]int, len(ms))
		if dups {
			for i := range out {
				out[i] = 1
			}
		}
		return out
	}}
	batch := func() int {
		ch := b.check(&Message{})
		b.flush()
		return <-ch
	}
	for range dupMisses {
		require.Zero(t, batch())
	}
	require.Equal(t, dupMisses, asked, "asked while it may find some")
	for range 3 * dupProbeEvery {
		require.Zero(t, batch())
	}
	require.Equal(t, dupMisses+3, asked, "then one batch in %d", dupProbeEvery)

	dups = true
	found := 0
	for range dupProbeEvery {
		found += batch()
	}
	require.Positive(t, found, "a probe finds the flood")
	before := asked
	for range 5 {
		require.Equal(t, 1, batch(), "and every batch is asked about again")
	}
	require.Equal(t, before+5, asked)
}

// TestAStopAcksASkipItsQuestionRecorded: a stop that comes while a
// waiting message's question is in flight waits for the answer, and a
// skip it recorded is acked, not sent back to be recorded twice.
func TestAStopAcksASkipItsQuestionRecorded(t *testing.T) {
	asked := make(chan struct{})
	answer := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	e := newEnv(t, func(c *Config) {
		c.MaxInFlight = 2
		c.Duplicates = func(_ context.Context, ms []*Message) []int {
			once.Do(func() { close(asked) })
			<-answer
			out := make([]int, len(ms))
			for i, m := range ms {
				if strings.HasPrefix(m.Event.RunID, "dup") {
					out[i] = 1
				}
			}
			return out
		}
	})
	e.publish("idem.ready.orders", event("orders", "2026-01-01", "first"), nil)
	e.publish("idem.ready.orders", event("orders", "2026-01-02", "first"), nil)
	var loads calls
	_, stop := e.start(func(ctx context.Context, m *Message) error {
		loads.add(m)
		<-release
		return nil
	})
	require.Eventually(t, func() bool { return loads.count() == 2 }, waitFor, tick)
	dup := e.publish("idem.ready.orders", event("orders", "2026-01-03", "dup_run"), nil)
	<-asked
	stopped := make(chan error, 1)
	go func() { stopped <- stop(5 * time.Second) }()
	time.Sleep(200 * time.Millisecond) // the stop begins while the question is out
	close(answer)
	close(release)
	require.NoError(t, <-stopped)
	require.Equal(t, 2, loads.count(), "the duplicate never loaded")
	info := e.consumerInfo()
	require.GreaterOrEqual(t, info.AckFloor.Stream, dup, "the skip acked: %+v", info.AckFloor)
	require.Zero(t, e.hook.event("orders/interrupted"), "nothing sent back")
}
