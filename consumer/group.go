package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// GroupHandler loads several messages of one dataset at once (distinct
// partitions) and returns each one's error, in order: what Handler returns
// for one message, for each.
type GroupHandler func(ctx context.Context, ms []*Message) []error

// A group forms only from messages already fetched and waiting for a load
// slot: when a slot frees, the message that takes it takes along up to
// GroupSize-1 others of its dataset that are waiting for one, and one
// handler call loads them all in one transaction. Nothing waits to fill a
// group: a lone message loads alone at once. Each member keeps its own
// heartbeats, its own fate and its own ack.

// waiter is a message waiting for a load slot, ready to join a group.
type waiter struct {
	d    *delivery
	done chan groupResult
}

type groupResult struct {
	err     error
	handled time.Duration
}

// groupQueue holds, per dataset, the messages waiting for a load slot.
type groupQueue struct {
	mu      sync.Mutex
	waiting map[string][]*waiter
}

func (q *groupQueue) add(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting == nil {
		q.waiting = map[string][]*waiter{}
	}
	q.waiting[groupKey(w.d)] = append(q.waiting[groupKey(w.d)], w)
}

// groupKey is where d waits: a group takes the messages of one dataset and
// one lane, so a live load never carries a backfill's partitions.
func groupKey(d *delivery) string { return d.lane.String() + "/" + d.dataset }

// remove takes w out of the queue; false when a group already took it.
func (q *groupQueue) remove(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.waiting[groupKey(w.d)]
	for i, x := range ws {
		if x == w {
			q.waiting[groupKey(w.d)] = append(ws[:i:i], ws[i+1:]...)
			return true
		}
	}
	return false
}

// take takes up to n waiting messages of lead's dataset and lane, oldest
// first, each for a partition no other member has.
func (q *groupQueue) take(lead *delivery, n int) []*waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.waiting[groupKey(lead)]
	seen := map[string]bool{lead.m.Event.Key.Key: true}
	var taken, left []*waiter
	for _, w := range ws {
		k := w.d.m.Event.Key.Key
		if len(taken) < n && !seen[k] {
			seen[k] = true
			taken = append(taken, w)
			continue
		}
		left = append(left, w)
	}
	q.waiting[groupKey(lead)] = left
	return taken
}

// groupSize is how many messages d's load may take, d among them.
func (c *Consumer) groupSize(d *delivery) int {
	if c.cfg.GroupHandler == nil || c.cfg.GroupSize == nil {
		return 1
	}
	return c.cfg.GroupSize(d.m)
}

// runGrouped is run's load for a message that may share a group: it waits
// for a load slot like any other, unless a group takes it first. It
// returns the handler's error for d and how long its load took, and false
// when it ran no handler (stopping). A message that must wait is first
// asked about (dupCheck), before a group can take it: skipped > 0 is the
// attempt of a duplicate acked without a slot.
func (c *Consumer) runGrouped(hard context.Context, d *delivery, size int) (_ error, _ time.Duration, ran bool, skipped int) {
	w := &waiter{d: d, done: make(chan groupResult, 1)}
	granted, withdraw := c.lanes.queueLoad(d.lane)
	// let go gives back a load granted meanwhile.
	letGo := func() {
		if !withdraw() {
			c.lanes.endLoad(d.lane)
		}
	}
	select {
	case <-granted:
		now := make(chan struct{}, 1)
		now <- struct{}{}
		granted = now
	default:
		if dup := c.dupCheck(d); dup != nil {
			select {
			case n := <-dup:
				if n > 0 {
					letGo()
					return nil, 0, false, n
				}
			case <-c.stopping:
				letGo()
				// A skip the question recorded is acked, not sent back.
				if n := <-dup; n > 0 {
					return nil, 0, false, n
				}
				return ErrShutdown, 0, false, 0
			}
		}
	}
	c.groups.add(w)
	select {
	case <-granted:
		if !c.groups.remove(w) {
			// A group took it while the slot came free: the slot is not ours.
			c.lanes.endLoad(d.lane)
			r := <-w.done
			return r.err, r.handled, true, 0
		}
		if c.isStopping() {
			c.lanes.endLoad(d.lane)
			return ErrShutdown, 0, false, 0
		}
		if err := c.pausedMeanwhile(d); err != nil {
			c.lanes.endLoad(d.lane)
			return err, 0, false, 0
		}
		c.loadStarted(d.lane)
		defer c.endLoad(d.lane)
		members := c.groups.take(d, size-1)
		ds := []*delivery{d}
		for _, m := range members {
			ds = append(ds, m.d)
		}
		start := time.Now()
		gctx, end := c.startGroup(hard, ds)
		errs := c.callGroup(d.log.WithContext(gctx), ds)
		end()
		took := time.Since(start)
		for i, m := range members {
			m.done <- groupResult{err: errs[i+1], handled: took}
		}
		return errs[0], took, true, 0
	case r := <-w.done:
		letGo()
		return r.err, r.handled, true, 0
	case <-c.stopping:
		letGo()
		if c.groups.remove(w) {
			return ErrShutdown, 0, false, 0
		}
		r := <-w.done
		return r.err, r.handled, true, 0
	}
}

// callGroup runs the handler on ds: the group handler for more than one,
// a panic turned into a *PanicError for each.
func (c *Consumer) callGroup(ctx context.Context, ds []*delivery) (errs []error) {
	if len(ds) == 1 {
		return []error{c.call(ctx, ds[0])}
	}
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			ds[0].log.Error().Str("panic", fmt.Sprint(v)).Str("stack", string(pe.Stack)).Int("group", len(ds)).Msg("group handler panicked")
			errs = make([]error, len(ds))
			for i := range errs {
				errs[i] = pe
			}
		}
	}()
	ms := make([]*Message, len(ds))
	for i, d := range ds {
		ms[i] = d.m
	}
	errs = c.cfg.GroupHandler(ctx, ms)
	if len(errs) != len(ds) {
		panic(fmt.Sprintf("consumer: the group handler returned %d errors for %d messages", len(errs), len(ds)))
	}
	return errs
}
