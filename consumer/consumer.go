package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/internal/tracing"
)

// Handler handles one message. It returns nil once the work is committed or
// found already done, an error whose Fatal() reports true when no retry can
// help, and any other error to be retried after a backoff.
//
// ctx carries Run's context values and the message's logger
// (zerolog.Ctx(ctx)); it is cancelled with cause ErrShutdown when a stop's
// grace period runs out. A panic is recovered as a *PanicError.
type Handler func(ctx context.Context, m *Message) error

// Consumer fetches events from the durable pull consumer, runs the Handler on
// each, and carries out the fate Decide gives it. Build it with New; Run it
// once.
type Consumer struct {
	js     jetstream.JetStream
	cfg    Config
	handle Handler
	log    zerolog.Logger
	dl     *deadLetterer

	// lanes holds the slots, one per message fetched and not yet settled
	// (max_in_flight messages running plus as many fetched ahead, so the
	// next loads find their message already delivered while the previous
	// ones commit and are acked; a message fetched ahead waits with its
	// heartbeats going, like one waiting for its dataset's turn), and the
	// loads, one per handler running (never more than max_in_flight), and
	// shares both between the live and the backfill lane.
	lanes   *lanes
	running atomic.Int64
	// laneRunning counts the loads running per lane, for the gauge.
	laneRunning [2]atomic.Int64
	// sets is the current generation of the configured datasets; a
	// delivery keeps the one it was read with until its fate (Reload).
	sets    atomic.Pointer[datasets]
	circuit *circuit
	fleet   atomic.Pointer[fleet] // set once Run opened the bucket; read by Reload and Fleet
	held    atomic.Int64
	wg      sync.WaitGroup
	groups  groupQueue
	pauses  pauses
	dups    *dupBatcher // nil without Config.Duplicates

	started atomic.Bool
	// stopCtx is cancelled by the first stop; stopping is its Done channel.
	// It also cancels the pull in progress, so that the server, which checks
	// a pull's interest before each delivery, sends nothing more.
	stopCtx  context.Context
	stopNow  context.CancelFunc
	stopping <-chan struct{}
	stopOnce sync.Once
	stopMu   sync.Mutex
	graceEnd time.Time
}

// New checks cfg (after WithDefaults) and returns a Consumer. js comes from
// the caller, which owns the connection (internal/service builds it with
// internal/natsconn: reconnecting forever, every disconnect and reconnect
// logged) and drains it after Run returns.
func New(js jetstream.JetStream, cfg Config, h Handler) (*Consumer, error) {
	if js == nil || h == nil {
		return nil, errors.New("consumer: New needs a JetStream and a Handler")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Consumer{
		js:     js,
		cfg:    cfg,
		handle: h,
		log:    cfg.Log,
		dl:     newDeadLetterer(js, cfg),
		lanes:  newLanes(cfg.MaxInFlight+prefetch(cfg.MaxInFlight, cfg.MaxGroup), cfg.MaxInFlight, cfg.BackfillShare),
	}
	if cfg.Duplicates != nil {
		c.dups = &dupBatcher{ask: cfg.Duplicates, timeout: cfg.AckTimeout}
	}
	c.sets.Store(newDatasets(cfg.Datasets, nil))
	c.stopCtx, c.stopNow = context.WithCancel(context.Background())
	c.stopping = c.stopCtx.Done()
	c.circuit = newCircuit(cfg, c.stopping)
	return c, nil
}

// Reload replaces the configured datasets, as a reloaded config says, and
// tells the fleet (version and definitions as in Config.Fleet). A message
// already fetched keeps the datasets it was read with: a running load
// finishes under the config it started with. A dataset whose
// MaxConcurrency is unchanged keeps its turns; a changed one gets new
// turns, so for as long as loads of the old limit run, both limits apply
// side by side.
func (c *Consumer) Reload(ctx context.Context, ds map[string]Dataset, version string, defs map[string]json.RawMessage) error {
	cfg := c.cfg
	cfg.Datasets = ds
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	c.sets.Store(newDatasets(cfg.Datasets, c.sets.Load()))
	if f := c.fleet.Load(); f != nil {
		if err := f.update(ctx, sortedKeys(cfg.Datasets), version, defs); err != nil {
			c.log.Warn().Err(err).Msg("fleet entry not updated after the reload; the next refresh writes it")
		}
	}
	return nil
}

// Fleet lists the live replicas' entries in the fleet bucket (nil without a
// fleet): which config version each runs and which datasets it knows.
func (c *Consumer) Fleet(ctx context.Context) ([]Member, error) {
	f := c.fleet.Load()
	if f == nil {
		return nil, nil
	}
	return f.view(ctx, false)
}

// FleetNow is Fleet read from the bucket now, not from the view kept for
// at most two seconds: for a rare decision that a replica which joined a
// moment ago must change (a schema change refused here).
func (c *Consumer) FleetNow(ctx context.Context) ([]Member, error) {
	f := c.fleet.Load()
	if f == nil {
		return nil, nil
	}
	return f.view(ctx, true)
}

// Warehouse reports the warehouse circuit: up while it is closed; otherwise
// the state ("open", or "half_open" while the first load after a good probe
// runs), the last reason and since when.
func (c *Consumer) Warehouse() (up bool, state string, reason error, since time.Time) {
	state, reason, since = c.circuit.State()
	return state == circuitClosed.String(), state, reason, since
}

func newDeadLetterer(js jetstream.JetStream, cfg Config) *deadLetterer {
	return &deadLetterer{js: js, stream: cfg.DLQStream, prefix: cfg.DLQSubjectPrefix, timeout: cfg.AckTimeout,
		tracer: tracing.OrNoop(cfg.Tracer), stored: cfg.DeadLettered}
}

// Run consumes until stopped, by Stop or by ctx's cancellation (which
// stops with Config.ShutdownGrace), then returns nil once every message
// fetched has been acked, nak'ed or dead-lettered. It returns an error only
// when the connection is closed for good.
//
// The consumer must exist: EnsureStreams creates it. While it is missing
// (deleted by hand, or not yet loaded by a restarting server), Run logs and
// retries rather than recreating it, which would replay the whole stream.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("consumer: Run called twice")
	}
	// Handlers keep ctx's values but not its cancellation: a stop gives them
	// the grace period first.
	hard, cancelHard := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHard(ErrShutdown)

	settled := make(chan struct{})
	supervised := make(chan struct{})
	go func() {
		defer close(supervised)
		select {
		case <-ctx.Done():
			c.stop(c.cfg.ShutdownGrace, context.Cause(ctx))
		case <-c.stopping:
		}
		t := time.NewTimer(time.Until(c.graceDeadline()))
		defer t.Stop()
		select {
		case <-t.C:
			if n := c.held.Load(); n > 0 {
				c.log.Warn().Int64("in_flight", n).Msg("grace period over: cancelling handlers, their messages will be nak'ed")
			}
			cancelHard(ErrShutdown)
		case <-settled:
		}
	}()

	if c.cfg.Fleet != nil {
		if f, err := openFleet(ctx, c.js, *c.cfg.Fleet, sortedKeys(c.sets.Load().byName), c.log); err != nil {
			// Without the fleet an event for a dataset this replica lacks is
			// dead-lettered at once, as before there was one.
			c.log.Error().Err(err).Str("bucket", c.cfg.Fleet.Bucket).
				Msg("fleet bucket not usable (run `idem streams`, check the permissions): events for datasets this replica does not know are dead-lettered at once")
		} else {
			c.fleet.Store(f)
			fctx, stopFleet := context.WithCancel(context.WithoutCancel(ctx))
			fleetDone := make(chan struct{})
			go func() { defer close(fleetDone); f.run(fctx) }()
			defer func() { stopFleet(); <-fleetDone }()
		}
	}
	c.log.Info().Str("stream", c.cfg.Stream).Str("consumer", c.cfg.Consumer).Str("backfill_consumer", c.cfg.backfillConsumer()).
		Int("max_in_flight", c.cfg.MaxInFlight).Int("backfill_share", c.cfg.BackfillShare).Msg("consuming")
	// One fetch loop per lane. A replica of a version before the lanes
	// runs only the live one: backfill events wait in the stream until a
	// replica of this version runs.
	loops := make(chan error, 2)
	for _, ln := range []lane{laneLive, laneBackfill} {
		go func() { loops <- c.fetchLoop(hard, ln) }()
	}
	var err error
	for range 2 {
		if e := <-loops; e != nil && err == nil {
			err = e
			c.stop(c.cfg.ShutdownGrace, err)
		}
	}
	c.wg.Wait()
	close(settled)
	<-supervised
	c.circuit.wait()
	c.log.Info().Msg("consumer stopped: every fetched message is settled")
	return err
}

// Stop stops fetching and lets in-flight handlers finish for up to grace;
// then their context is cancelled with ErrShutdown and their messages are
// nak'ed. Messages waiting for their dataset's turn are nak'ed at once. It
// returns at once; Run returns when all is settled. Only the first stop
// counts.
func (c *Consumer) Stop(grace time.Duration) { c.stop(grace, ErrShutdown) }

func (c *Consumer) stop(grace time.Duration, cause error) {
	c.stopOnce.Do(func() {
		c.stopMu.Lock()
		c.graceEnd = time.Now().Add(grace)
		c.stopMu.Unlock()
		c.log.Info().AnErr("cause", cause).Dur("grace", grace).Int64("in_flight", c.held.Load()).Msg("stopping: no more fetches")
		c.stopNow()
	})
}

func (c *Consumer) graceDeadline() time.Time {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	return c.graceEnd
}

func (c *Consumer) isStopping() bool {
	select {
	case <-c.stopping:
		return true
	default:
		return false
	}
}

// fetchLoop pulls ln's messages, as many as there are slots ln may take
// (lanes), hands each to its own goroutine, and ends when stopping. A stop cancels the pull in
// progress at once: left open, it would take back the very messages the
// stop naks and burn their deliveries. What it already brought is nak'ed.
func (c *Consumer) fetchLoop(hard context.Context, ln lane) error {
	var cons jetstream.Consumer
	pause := time.Duration(0)
	failed := func(err error, msg string) bool {
		pause = min(max(2*pause, 100*time.Millisecond), 10*time.Second)
		c.log.Warn().Err(err).Dur("retry_in", pause).Msg(msg)
		return c.sleep(pause)
	}
	for !c.isStopping() {
		if cons == nil {
			var err error
			cons, err = c.lookup(hard, ln)
			if errors.Is(err, nats.ErrConnectionClosed) {
				return fmt.Errorf("consumer: %w", err)
			}
			if err != nil {
				if !failed(err, "consumer not available; run `idem streams` if it was deleted") {
					return nil
				}
				continue
			}
		}
		// While the warehouse circuit is open nothing is fetched: a message
		// fetched now could only wait.
		if !c.circuit.waitClosed() {
			return nil
		}
		n := c.lanes.reserve(ln, c.stopping)
		if n == 0 {
			return nil
		}
		if c.isStopping() {
			c.lanes.release(ln, n)
			return nil
		}
		// The lanes cancel a backfill pull that holds more slots than the
		// backfill may now (see broadcast).
		fctx, cancel := pull(c.stopCtx, pullWait(c.cfg.FetchWait, c.cfg.Rand()))
		c.lanes.pulling(ln, cancel)
		batch, err := cons.Fetch(n, jetstream.FetchContext(fctx))
		if err != nil {
			c.lanes.release(ln, n)
		} else {
			got := 0
			for msg := range batch.Messages() {
				got++
				c.dispatch(hard, msg, ln)
			}
			c.lanes.release(ln, n-got)
			err = batch.Error()
		}
		c.lanes.pulling(ln, nil)
		cancel()
		switch {
		case err == nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) ||
			errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			pause = 0
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("consumer: %w", err)
		default:
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
				errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrNoHeartbeat) {
				cons = nil
			}
			if !failed(err, "fetch failed") {
				return nil
			}
		}
	}
	return nil
}

// pullWait is one pull request's wait: FetchWait, jittered by half either
// way. JetStream hands a message to the request that has waited longest,
// so the replicas' requests must not fall into step: with one fixed wait
// the replica whose request goes out first in each round wins nearly
// every delivery, and an event its config lacks, left for another
// replica, came back to it again and again (seen: one event bounced for
// a minute between two replicas, never reaching the one that knows its
// dataset).
func pullWait(wait time.Duration, jitter float64) time.Duration {
	return wait/2 + time.Duration(jitter*float64(wait))
}

func (c *Consumer) lookup(ctx context.Context, ln lane) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AckTimeout)
	defer cancel()
	name := c.cfg.Consumer
	if ln == laneBackfill {
		name = c.cfg.backfillConsumer()
	}
	return c.js.Consumer(ctx, c.cfg.Stream, name)
}

// sleep waits d or until stopping; it reports whether to go on.
func (c *Consumer) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.stopping:
		return false
	}
}

// dispatch hands msg, which holds one slot reserved for ln, to its own
// goroutine.
func (c *Consumer) dispatch(hard context.Context, msg jetstream.Msg, ln lane) {
	c.wg.Add(1)
	c.held.Add(1)
	c.lanes.fetched(ln)
	go func() {
		defer func() {
			c.held.Add(-1)
			c.lanes.settled(ln)
			c.wg.Done()
		}()
		c.process(hard, msg)
	}()
}

// prefetch is how many messages are fetched ahead of the running loads: as
// many as run and, with group loads, as many as their groups take plus one
// group more, so that when a group ends a whole group is already waiting
// for its slot (with only as many as run, a max_in_flight of 1 alternated
// groups of 7 and 2: the refill of one group arrived while the next had
// formed). All within the ack budget every replica's consumer has by
// default (a max_in_flight above half of it fetches less ahead).
func prefetch(maxInFlight, maxGroup int) int {
	n := maxInFlight
	if maxGroup > 1 {
		n = (maxInFlight + 1) * maxGroup
	}
	return max(0, min(n, DefaultMaxAckPending-maxInFlight))
}

// startLoad waits for a load of ln; false means stopping. Every
// successful call is followed by endLoad.
func (c *Consumer) startLoad(ln lane) bool {
	granted, withdraw := c.lanes.queueLoad(ln)
	select {
	case <-granted:
	case <-c.stopping:
		if !withdraw() {
			c.lanes.endLoad(ln)
		}
		return false
	}
	return c.loadGranted(ln)
}

// loadStarted counts a granted load in.
func (c *Consumer) loadStarted(ln lane) {
	c.cfg.Hooks.inFlight(int(c.running.Add(1)))
	c.cfg.Hooks.laneInFlight(ln.String(), int(c.laneRunning[ln].Add(1)))
}

// endLoad frees the load; counted out first, so the gauge never shows
// more than max_in_flight.
func (c *Consumer) endLoad(ln lane) {
	c.cfg.Hooks.inFlight(int(c.running.Add(-1)))
	c.cfg.Hooks.laneInFlight(ln.String(), int(c.laneRunning[ln].Add(-1)))
	c.lanes.endLoad(ln)
}
