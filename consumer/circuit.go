package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// circuit is the warehouse circuit. A handler error that says the warehouse
// cannot be used at all (Unavailable() == true) opens it: the fetch loop
// stops fetching, the messages held wait (their heartbeats go on, so they
// spend no delivery), and a prober tries the warehouse with a growing delay.
// When a probe succeeds, one waiting message is let through first (half
// open); if its load reaches the warehouse, the circuit closes and everything
// resumes, else it opens again.
//
// One log line per change of state, never one per message.
type circuit struct {
	probe    func(context.Context) error
	minDelay time.Duration
	maxDelay time.Duration
	timeout  time.Duration
	log      zerolog.Logger
	hook     func(up bool)
	stopping <-chan struct{}

	mu     sync.Mutex
	state  circuitState
	reason error
	since  time.Time
	// closed is closed while the circuit is closed; opening makes a new one.
	closed chan struct{}
	// trial holds the one token of the half-open state.
	trial   chan struct{}
	waiters int
	// failedTrials counts the trial loads that failed since the circuit
	// opened: a server that connects but cannot load (a full disk) is then
	// probed less and less often, as one that does not connect is.
	failedTrials int
	probes       sync.WaitGroup
}

type circuitState int

const (
	circuitClosed circuitState = iota
	circuitOpen
	circuitHalfOpen
)

func (s circuitState) String() string {
	switch s {
	case circuitOpen:
		return "open"
	case circuitHalfOpen:
		return "half_open"
	}
	return "closed"
}

func newCircuit(cfg Config, stopping <-chan struct{}) *circuit {
	c := &circuit{
		probe:    cfg.Probe,
		minDelay: cfg.ProbeDelay,
		maxDelay: cfg.MaxProbeDelay,
		timeout:  cfg.AckTimeout,
		log:      cfg.Log,
		hook:     cfg.Hooks.Circuit,
		stopping: stopping,
		closed:   make(chan struct{}),
		trial:    make(chan struct{}, 1),
	}
	close(c.closed)
	return c
}

// State is the circuit's state and, unless closed, why and since when.
func (c *circuit) State() (state string, reason error, since time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.String(), c.reason, c.since
}

// trip records that a load met an unavailable warehouse. A closed circuit
// opens; a half-open one opens again when the trial load is the one that
// failed. Loads that started before the circuit opened may still fail while
// it is half open: they change nothing.
func (c *circuit) trip(err error, trial bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.state == circuitClosed:
		c.state, c.reason, c.since = circuitOpen, err, time.Now()
		c.closed = make(chan struct{})
		c.log.Error().Err(err).Msg("warehouse unavailable: circuit open; fetching paused, held messages wait without spending their retry budget")
		if c.hook != nil {
			c.hook(false)
		}
		c.startProbing()
	case c.state == circuitHalfOpen && trial:
		c.state, c.reason = circuitOpen, err
		c.failedTrials++
		c.log.Warn().Err(err).Int("failed_trials", c.failedTrials).Dur("next_probe_in", c.firstDelay()).
			Msg("warehouse circuit: the first load after a good probe failed; open again")
		c.startProbing()
	case c.state == circuitOpen:
		c.reason = err
	}
}

// pass returns at once while the circuit is closed; otherwise it waits until
// it closes, or until it hands this caller the half-open trial (trial true:
// report the load's result with settle). ok is false when stopping.
func (c *circuit) pass() (trial, ok bool) {
	c.mu.Lock()
	if c.state == circuitClosed {
		c.mu.Unlock()
		return false, true
	}
	closed := c.closed
	c.waiters++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.waiters--
		c.mu.Unlock()
	}()
	select {
	case <-closed:
		return false, true
	case <-c.trial:
		return true, true
	case <-c.stopping:
		return false, false
	}
}

// waitClosed blocks the fetch loop while the circuit is not closed; false
// when stopping.
func (c *circuit) waitClosed() bool {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	select {
	case <-closed:
		return true
	case <-c.stopping:
		return false
	}
}

// settle reports the trial's result: a load that ran and did not find the
// warehouse unavailable closes the circuit; a trial that ran nothing (a
// stop, no turn for its dataset) hands the trial to another waiter.
func (c *circuit) settle(trial, ran, unavailable bool) {
	if !trial {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != circuitHalfOpen {
		return
	}
	switch {
	case !ran:
		c.trial <- struct{}{}
	case !unavailable:
		c.closeLocked()
	}
}

func (c *circuit) closeLocked() {
	down := time.Since(c.since)
	c.state, c.reason, c.failedTrials = circuitClosed, nil, 0
	select {
	case <-c.trial:
	default:
	}
	close(c.closed)
	c.log.Info().Dur("down_for", down).Msg("warehouse back: circuit closed, fetching resumed")
	if c.hook != nil {
		c.hook(true)
	}
}

// startProbing starts the prober; c.mu is held.
func (c *circuit) startProbing() {
	first := c.firstDelay()
	c.probes.Add(1)
	go func() {
		defer c.probes.Done()
		c.probeUntilUp(first)
	}()
}

// firstDelay is the prober's first wait: minDelay, doubled for each failed
// trial, up to maxDelay; c.mu is held.
func (c *circuit) firstDelay() time.Duration {
	d := c.minDelay
	for i := 0; i < c.failedTrials && d < c.maxDelay; i++ {
		d *= 2
	}
	return min(d, c.maxDelay)
}

// probeUntilUp probes with a delay doubling from minDelay to maxDelay until a
// probe succeeds or the consumer stops. A good probe closes the circuit when
// no message waits, and otherwise lets one through first.
func (c *circuit) probeUntilUp(delay time.Duration) {
	for {
		t := time.NewTimer(delay)
		select {
		case <-c.stopping:
			t.Stop()
			return
		case <-t.C:
		}
		err := c.runProbe()
		c.mu.Lock()
		if c.state != circuitOpen {
			c.mu.Unlock()
			return
		}
		if err == nil {
			if c.waiters == 0 {
				c.closeLocked()
			} else {
				c.state = circuitHalfOpen
				c.trial <- struct{}{}
				c.log.Info().Msg("warehouse circuit: probe succeeded, one load goes first")
			}
			c.mu.Unlock()
			return
		}
		c.reason = err
		c.mu.Unlock()
		c.log.Debug().Err(err).Dur("next_probe_in", min(2*delay, c.maxDelay)).Msg("warehouse probe failed")
		delay = min(2*delay, c.maxDelay)
	}
}

func (c *circuit) runProbe() error {
	if c.probe == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	return c.probe(ctx)
}

// wait returns once no prober runs; the consumer stops them by stopping.
func (c *circuit) wait() { c.probes.Wait() }
