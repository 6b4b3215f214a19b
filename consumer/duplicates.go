package consumer

import (
	"context"
	"sync"
	"time"
)

// Duplicates answers, for messages waiting for a load slot, which are
// runs already done: it records each one's skip (as the handler would)
// and returns its attempt number, 0 for a message that goes on to its
// load. It is asked in batches, one call for the messages that came to
// wait together (a fetch's worth), so that a backlog of duplicates is
// acknowledged without taking a slot and a batch costs one round trip.
type Duplicates func(ctx context.Context, ms []*Message) []int

// dupLinger is how long the first message to wait for a slot waits for
// others to join its batch: the messages of one fetch arrive within it.
// It waits for a slot anyway.
const dupLinger = time.Millisecond

// dupMaxBatch bounds one batch.
const dupMaxBatch = 256

// A backlog of new runs (a backfill) finds no duplicate, and asking costs
// the warehouse a statement per batch: after dupMisses batches in a row
// found none, only one batch in dupProbeEvery is asked about (the others
// go to their loads, whose own ledger check still skips a duplicate),
// until one finds a duplicate again. A replay's flood of duplicates is so
// found within dupProbeEvery batches.
const (
	dupMisses     = 4
	dupProbeEvery = 16
)

// dupBatcher gathers the questions of waiting messages into batches.
type dupBatcher struct {
	ask     Duplicates
	timeout time.Duration

	mu      sync.Mutex
	pending []dupQuestion
	// misses counts the batches in a row that found no duplicate;
	// batches counts every batch, to pick the probes.
	misses, batches int
}

type dupQuestion struct {
	m      *Message
	answer chan int
}

// check asks about m; the channel receives its answer once.
func (b *dupBatcher) check(m *Message) <-chan int {
	q := dupQuestion{m: m, answer: make(chan int, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, q)
	n := len(b.pending)
	b.mu.Unlock()
	switch {
	case n >= dupMaxBatch:
		go b.flush()
	case n == 1:
		time.AfterFunc(dupLinger, b.flush)
	}
	return q.answer
}

// flush asks about every pending message in one call.
func (b *dupBatcher) flush() {
	b.mu.Lock()
	qs := b.pending
	b.pending = nil
	ask := len(qs) > 0 && (b.misses < dupMisses || b.batches%dupProbeEvery == 0)
	if len(qs) > 0 {
		b.batches++
	}
	b.mu.Unlock()
	if len(qs) == 0 {
		return
	}
	var answers []int
	if ask {
		ms := make([]*Message, len(qs))
		for i, q := range qs {
			ms[i] = q.m
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		answers = b.ask(ctx, ms)
		cancel()
		found := false
		for _, n := range answers {
			found = found || n > 0
		}
		b.mu.Lock()
		if found {
			b.misses = 0
		} else {
			b.misses++
		}
		b.mu.Unlock()
	}
	for i, q := range qs {
		if i < len(answers) {
			q.answer <- answers[i]
		} else {
			q.answer <- 0
		}
	}
}

// dupCheck asks whether d, which must wait for a load slot, is a run
// already done; nil when it cannot be one this way (no Duplicates, a body
// that did not decode, the backfill lane, whose cancellations the handler
// decides first).
func (c *Consumer) dupCheck(d *delivery) <-chan int {
	if c.dups == nil || d.decodeErr != nil || d.lane != laneLive {
		return nil
	}
	return c.dups.check(d.m)
}

// waitLoad waits for a load slot of d's lane, like startLoad; a message
// that must wait is asked about meanwhile (dupCheck), and one found done
// gives its place up: skipped > 0 is its attempt, and no slot is held.
// ok false means stopping.
func (c *Consumer) waitLoad(d *delivery) (ok bool, skipped int) {
	granted, withdraw := c.lanes.queueLoad(d.lane)
	var dup <-chan int
	select {
	case <-granted:
		return c.loadGranted(d.lane), 0
	default:
		dup = c.dupCheck(d)
	}
	for {
		select {
		case <-granted:
			if dup != nil {
				// A skip it recorded must not load: its answer first.
				if n := <-dup; n > 0 {
					c.lanes.endLoad(d.lane)
					return false, n
				}
			}
			return c.loadGranted(d.lane), 0
		case n := <-dup:
			dup = nil
			if n > 0 {
				if !withdraw() {
					c.lanes.endLoad(d.lane)
				}
				return false, n
			}
		case <-c.stopping:
			if !withdraw() {
				c.lanes.endLoad(d.lane)
			}
			// A skip the question recorded is acked, not sent back: its
			// redelivery would be recorded skipped a second time.
			if dup != nil {
				return false, <-dup
			}
			return false, 0
		}
	}
}

// loadGranted counts in a load granted to ln, unless stopping.
func (c *Consumer) loadGranted(ln lane) bool {
	if c.isStopping() {
		c.lanes.endLoad(ln)
		return false
	}
	c.loadStarted(ln)
	return true
}
