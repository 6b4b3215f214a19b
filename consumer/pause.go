package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A paused dataset (Config.Paused) has its messages held, as the warehouse
// circuit holds them: heartbeats go on, no load runs, no attempt or retry
// is spent, nothing is dead-lettered or audited per message. Unlike a
// message waiting for the circuit, a held paused message gives its fetch
// slot back while it waits, so other datasets keep loading at full width,
// and takes a slot again once the pause ends, running at once.
//
// At most maxPaused messages of one dataset are held so in this process:
// held messages count against the consumer's MaxAckPending, shared by the
// fleet. A message beyond that goes back to the stream with PauseDelay.

// pausePoll is how often a held message asks Config.Paused again. The
// answer is a map lookup in this process; the service refreshes it from
// the database about every second.
const pausePoll = 200 * time.Millisecond

// MaxPauseDelay caps PauseDelay.
const MaxPauseDelay = 10 * time.Minute

// PauseDelay is the redelivery delay of a paused dataset's message this
// process cannot hold: doubling from one second with each delivery, at
// most MaxPauseDelay, and never past the pause's end (left > 0: the time
// until it; 0: until resumed), so a timed pause's messages come back when
// it ends.
//
// Why it grows: each nak is a delivery, and JetStream's MaxDeliver
// (DefaultMaxDeliver, 1000) counts them all; a message that reaches it is
// dead-lettered as crashed by the Reconciler. Doubling reaches the cap at
// the tenth delivery (1+2+...+512 s, about 17 min in all), then every
// delivery waits 10 min: 990 more deliveries take 165 h. A message of an
// open-ended pause reaches MaxDeliver after about 6.9 days of pause, only
// if it is never among the held ones; a pause of 2 days spends about 300
// deliveries. The price is latency after a resume: a message sent back
// comes again up to MaxPauseDelay later (held ones run at once).
func PauseDelay(delivery int, left time.Duration) time.Duration {
	d := MaxPauseDelay
	if n := max(delivery, 1) - 1; n < 10 {
		d = min(time.Second<<n, MaxPauseDelay)
	}
	if left > 0 {
		d = min(d, left)
	}
	return d
}

// PausedError is a paused dataset's message this process did not hold: it
// goes back to the stream after PauseDelay. Left is the time until the
// pause ends, 0 when it lasts until resumed.
type PausedError struct {
	Dataset string
	Left    time.Duration
}

func (e *PausedError) Error() string {
	if e.Left > 0 {
		return fmt.Sprintf("consumer: dataset %s is paused for %s more", e.Dataset, e.Left.Round(time.Second))
	}
	return fmt.Sprintf("consumer: dataset %s is paused", e.Dataset)
}

// pauses counts, per dataset, the messages held for a pause.
type pauses struct {
	mu   sync.Mutex
	held map[string]int
}

func (p *pauses) join(dataset string, bound int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = map[string]int{}
	}
	if p.held[dataset] >= bound {
		return false
	}
	p.held[dataset]++
	return true
}

func (p *pauses) leave(dataset string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held[dataset]--
}

// maxPaused is how many messages of one paused dataset this process holds:
// half the fetch slots, as many as may queue for a dataset's turn.
func (c *Consumer) maxPaused() int { return max(1, c.lanes.slots/2) }

// paused asks Config.Paused about dataset now: the time left (0: until
// resumed) and whether it is paused.
func (c *Consumer) paused(dataset string) (time.Duration, bool) {
	if c.cfg.Paused == nil || dataset == "" {
		return 0, false
	}
	until, ok := c.cfg.Paused(dataset)
	if !ok {
		return 0, false
	}
	if until.IsZero() {
		return 0, true
	}
	left := until.Sub(c.cfg.Now())
	return left, left > 0
}

// holdWhilePaused returns nil at once when d's dataset is not paused, and
// once its pause has ended otherwise, d holding a fetch slot again. It
// returns a *PausedError when the dataset's held messages are at
// maxPaused, and ErrShutdown when the consumer stops meanwhile.
func (c *Consumer) holdWhilePaused(hard context.Context, d *delivery) error {
	left, ok := c.paused(d.dataset)
	if !ok {
		return nil
	}
	if !c.pauses.join(d.dataset, c.maxPaused()) {
		return &PausedError{Dataset: d.dataset, Left: left}
	}
	defer c.pauses.leave(d.dataset)
	d.log.Debug().Msg("dataset paused: the message is held")
	// The slot goes back while the message waits, and is taken again
	// before it runs: dispatch releases it after the fate.
	c.lanes.lend(d.lane)
	defer c.lanes.reclaim(d.lane)
	t := time.NewTicker(pausePoll)
	defer t.Stop()
	for {
		select {
		case <-c.stopping:
			return ErrShutdown
		case <-hard.Done():
			return ErrShutdown
		case <-t.C:
		}
		if _, ok := c.paused(d.dataset); !ok {
			d.log.Info().Msg("dataset resumed: the held message runs")
			return nil
		}
	}
}

// pausedMeanwhile is the *PausedError of d's dataset when it was paused
// while d waited for its load slot: d then goes back for later, loading
// nothing (the pause was checked before the wait).
func (c *Consumer) pausedMeanwhile(d *delivery) error {
	if left, paused := c.paused(d.dataset); paused {
		d.log.Info().Msg("dataset paused while the message waited for a slot: nak'ed for later")
		return &PausedError{Dataset: d.dataset, Left: left}
	}
	return nil
}

// isPaused reports the *PausedError in err's chain.
func isPaused(err error) (*PausedError, bool) {
	var p *PausedError
	return p, errors.As(err, &p)
}
