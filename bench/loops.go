package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// job is the work of event i on worker w (each worker owns its connection).
type job func(ctx context.Context, w, i int) error

// firstErr keeps the first error of several goroutines and cancels the rest.
type firstErr struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func (f *firstErr) set(err error) {
	f.once.Do(func() { f.err = err; f.cancel() })
}

// runClosed runs n events on c workers, each taking the next as soon as it is
// free, and returns the wall time from the first start to the last commit.
func runClosed(ctx context.Context, c, n int, do job) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fe := &firstErr{cancel: cancel}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(ctx, w, i); err != nil {
					fe.set(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), fe.err
}

// runOpen schedules event i at start + i/rate and runs it on the first free
// of c workers; the latency of an event is from its schedule to its commit,
// so time spent waiting for a worker counts, as it does for a published
// event waiting in the stream.
func runOpen(ctx context.Context, c, n int, rate float64, do job) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fe := &firstErr{cancel: cancel}
	type item struct {
		i     int
		sched time.Time
	}
	ch := make(chan item, n)
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				if ctx.Err() != nil {
					continue
				}
				if err := do(ctx, w, it.i); err != nil {
					fe.set(err)
					continue
				}
				lat[it.i] = time.Since(it.sched)
			}
		}()
	}
	start := time.Now()
	for i := range n {
		sched := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(sched); d > 0 {
			select {
			case <-time.After(d): // pacing
			case <-ctx.Done():
			}
		}
		ch <- item{i, sched}
	}
	close(ch)
	wg.Wait()
	return lat, fe.err
}
