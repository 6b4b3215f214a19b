package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"

	"github.com/idem-data/idem/internal/tracing"
)

// process takes one fetched message from delivery to fate: read it, keep it
// owned with heartbeats while it waits and runs, ask Decide, carry the fate
// out. A Hold (the warehouse circuit) keeps the message and runs it again
// when the circuit lets it through: the same delivery, no retry spent.
func (c *Consumer) process(hard context.Context, msg jetstream.Msg) {
	received := time.Now()
	d, err := c.newDelivery(msg)
	if err != nil {
		// Unreachable for a pull consumer's message; never drop it silently.
		c.log.Error().Err(err).Str("subject", msg.Subject()).Msg("message without JetStream metadata: nak'ed")
		_ = msg.NakWithDelay(c.cfg.ShutdownNakDelay)
		return
	}
	c.received(d, received)
	if d.m.NumDelivered > 1 {
		c.cfg.Hooks.redelivery(d.label())
	}
	hb := startHeartbeat(max(c.cfg.AckWait/3, time.Millisecond), msg.InProgress, func(err error) {
		if err != nil {
			d.log.Warn().Err(err).Msg("heartbeat not sent: the message may be redelivered after the ack wait")
			return
		}
		c.cfg.Hooks.heartbeat(d.label())
	})
	var (
		in      Input
		f       Fate
		handled time.Duration
	)
	for {
		var trial, ran bool
		in, handled, trial, ran = c.run(hard, d)
		f = Decide(in)
		c.circuit.settle(trial, ran, f.Action == Hold)
		if f.Action != Hold {
			break
		}
		c.circuit.trip(in.Err, trial)
		d.log.Debug().Err(in.Err).Msg("warehouse unavailable: the message waits for the circuit")
	}
	hb.Stop()
	c.apply(d, in, f, handled)
}

// run calls the handler when the message may run, and returns what Decide
// needs, how long the handler ran, whether this was the circuit's trial and
// whether the handler ran at all.
func (c *Consumer) run(hard context.Context, d *delivery) (in Input, handled time.Duration, trial, ran bool) {
	in = Input{
		Delivery:      d.m.NumDelivered,
		Retry:         d.retry,
		Jitter:        c.cfg.Rand(),
		ShutdownDelay: c.cfg.ShutdownNakDelay,
	}
	if d.decodeErr != nil {
		in.Err, in.Attempt = c.unknownDataset(hard, d), d.m.NumDelivered
		return in, 0, false, false
	}
	var release func()
	for {
		if err := c.holdWhilePaused(hard, d); err != nil {
			in.Err, in.Cause = err, context.Cause(hard)
			return in, 0, false, false
		}
		var ok bool
		if trial, ok = c.circuit.pass(); !ok {
			in.Err, in.Cause = ErrShutdown, ErrShutdown
			return in, 0, trial, false
		}
		var turn turnResult
		release, turn = c.takeTurn(d)
		switch {
		case turn == turnFull:
			in.Err = errNoTurn
			return in, 0, trial, false
		case turn == turnStopped || c.isStopping():
			if release != nil {
				release()
			}
			in.Err, in.Cause = ErrShutdown, ErrShutdown
			return in, 0, trial, false
		}
		// Waiting for the warehouse or for a turn can outlast a pause set
		// meanwhile: the message is held again, its turn and the circuit's
		// trial given back, before a load starts.
		if _, paused := c.paused(d.dataset); !paused {
			break
		}
		release()
		c.circuit.settle(trial, false, false)
	}
	defer release()
	// The process span's context carries hard's values and cancellation.
	pctx, span := c.startProcess(hard, d)
	defer func() { endProcess(span, in.Err) }()
	if size := c.groupSize(d); size > 1 && !trial {
		err, took, ran, skipped := c.runGrouped(pctx, d, size)
		if skipped > 0 {
			in.Attempt = skipped
			return in, 0, trial, false
		}
		if !ran {
			in.Err, in.Cause = err, err
			return in, 0, trial, false
		}
		in.Err, in.Cause = err, context.Cause(hard)
		in.Attempt = reportedAttempt(in.Err)
		if in.Attempt == 0 {
			in.Attempt = d.m.NumDelivered
		}
		return in, took, trial, true
	}
	// A circuit's trial loads at once; any other message that must wait
	// for its slot may turn out a duplicate meanwhile, acked without one.
	var started bool
	if trial {
		started = c.startLoad(d.lane)
	} else if started, in.Attempt = c.waitLoad(d); in.Attempt > 0 {
		return in, 0, trial, false
	}
	if !started {
		in.Err, in.Cause = ErrShutdown, ErrShutdown
		return in, 0, trial, false
	}
	defer c.endLoad(d.lane)
	if err := c.pausedMeanwhile(d); err != nil {
		in.Err = err
		return in, 0, trial, false
	}
	ctx := d.log.WithContext(pctx)
	start := time.Now()
	in.Err = c.call(ctx, d)
	in.Cause = context.Cause(ctx)
	in.Attempt = reportedAttempt(in.Err)
	if in.Attempt == 0 {
		in.Attempt = d.m.NumDelivered
	}
	return in, time.Since(start), trial, true
}

// maxQueued is how many messages of a dataset limited to limit may wait for
// a turn in this process: enough that the next loads need no redelivery
// (half the slots, those fetched ahead included), never so many that other
// datasets find none free.
func (c *Consumer) maxQueued(limit int) int {
	return max(limit, c.lanes.slots/2)
}

// unknownDataset decides what to do with an event this replica cannot read:
// when the only problem is a dataset it does not know, and the fleet says a
// live replica knows it, or the event is younger than the grace (a config
// still rolling out), the event waits for another delivery; otherwise its
// decoding error stands, and it is dead-lettered as fatal.
func (c *Consumer) unknownDataset(ctx context.Context, d *delivery) error {
	f := c.fleet.Load()
	if f == nil || !has(d.decodeErr, func(e interface{ UnknownDataset() bool }) bool { return e.UnknownDataset() }) {
		return d.decodeErr
	}
	fctx, cancel := context.WithTimeout(ctx, c.cfg.AckTimeout)
	defer cancel()
	known, err := f.knows(fctx, d.token)
	// Published is the events stream's clock: compared with the server's
	// clock as the fleet reads it, a step of this host's clock neither
	// dead-letters an event at once nor keeps one waiting an hour.
	age := f.serverNow().Sub(d.m.Published)
	switch {
	case known:
		return errElsewhere
	case age < f.cfg.Grace:
		if err != nil {
			d.log.Warn().Err(err).Msg("fleet not readable: the event waits as if its dataset were rolling out")
		}
		return errRollout
	}
	return fmt.Errorf("%w; no live replica knows it after %s", d.decodeErr, f.cfg.Grace)
}

type turnResult int

const (
	turnTaken turnResult = iota
	turnFull
	turnStopped
)

// takeTurn waits for a free place under the dataset's MaxConcurrency. At
// most maxQueued messages of a dataset wait for a turn in a process; a
// message beyond that gets turnFull and goes back to the stream, so a
// dataset's backlog does not fill the slots other datasets could use.
// Other datasets' messages never wait behind it.
func (c *Consumer) takeTurn(d *delivery) (release func(), _ turnResult) {
	t, limited := d.set.turns[d.dataset]
	if !limited {
		return func() {}, turnTaken
	}
	select {
	case t.running <- struct{}{}:
	default:
		if int(t.queued.Add(1)) > c.maxQueued(cap(t.running)) {
			t.queued.Add(-1)
			return nil, turnFull
		}
		defer t.queued.Add(-1)
		d.log.Debug().Int("max_concurrency", cap(t.running)).Msg("dataset at its concurrency limit: waiting for a turn")
		select {
		case t.running <- struct{}{}:
		case <-c.stopping:
			return nil, turnStopped
		}
	}
	return func() { <-t.running }, turnTaken
}

// call runs the handler, turning a panic into a *PanicError.
func (c *Consumer) call(ctx context.Context, d *delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			d.log.Error().Str("panic", fmt.Sprint(v)).Str("stack", string(pe.Stack)).Msg("handler panicked")
			err = pe
		}
	}()
	return c.handle(ctx, d.m)
}

// apply carries out f. Every ack here is the message's last word, so none
// is sent before the heartbeat has stopped.
func (c *Consumer) apply(d *delivery, in Input, f Fate, handled time.Duration) {
	// attempt is the load's number as the handler counted it; 0 when no
	// load ran in this delivery.
	label := d.label()
	if f.Action == Ack {
		// The common case: its one line takes the fate and attempt as
		// fields, without a logger of its own for them (an allocation per
		// message).
		sctx, span := c.startSettle(d, tracing.SettleAck)
		ctx, cancel := context.WithTimeout(sctx, c.cfg.AckTimeout)
		err := d.msg.DoubleAck(ctx)
		cancel()
		endSettle(span, err)
		if err != nil {
			d.log.Warn().Stringer("fate", f).Int("attempt", in.Attempt).Err(err).Msg("ack not confirmed: a redelivery will find the work done")
		} else {
			d.log.Info().Stringer("fate", f).Int("attempt", in.Attempt).Dur("handled", handled).Msg("acked")
		}
		c.cfg.Hooks.event(label, f.Outcome(), handled)
		return
	}
	log := d.log.With().Stringer("fate", f).Int("attempt", in.Attempt).Logger()
	switch f.Action {
	case Nak:
		_, span := c.startSettle(d, tracing.SettleNak)
		err := d.msg.NakWithDelay(f.Delay)
		endSettle(span, err)
		if err != nil {
			log.Warn().Err(err).Msg("nak not sent: redelivery after the ack wait")
		}
		switch {
		case f.Shutdown:
			log.Info().Msg("interrupted by shutdown: nak'ed for redelivery")
		case f.Deferred:
			log.Debug().Dur("retry_in", f.Delay).Msg("no turn for the dataset: nak'ed for later, not counted")
		case f.Waiting:
			log.Info().Str("waiting", in.Err.Error()).Dur("retry_in", f.Delay).Msg("source not ready: waiting, no attempt spent")
		case f.Paused:
			log.Debug().Str("paused", in.Err.Error()).Dur("retry_in", f.Delay).Msg("dataset paused: nak'ed for later, no attempt spent")
		default:
			log.Warn().Err(in.Err).Int("max_attempts", d.retry.MaxAttempts).Dur("retry_in", f.Delay).
				Msg("transient failure: will retry")
		}
	case DeadLetter:
		if !c.deadLetter(d, in, f, log) {
			c.cfg.Hooks.event(label, OutcomeDeadLetterFailed, handled)
			return
		}
	}
	c.cfg.Hooks.event(label, f.Outcome(), handled)
}

// deadLetter publishes the dead letter and terminates the message only once
// JetStream holds the copy; if the publish fails the message is nak'ed with
// f.Delay and stays pending. It reports whether the dead letter is stored.
func (c *Consumer) deadLetter(d *delivery, in Input, f Fate, log zerolog.Logger) bool {
	dl := deadLetter{
		kind:       f.Kind,
		err:        in.Err,
		subject:    d.m.Subject,
		stream:     d.m.Stream,
		seq:        d.m.StreamSeq,
		deliveries: d.meta.NumDelivered,
		header:     d.msg.Headers(),
		data:       d.msg.Data(),
		dataset:    d.token,
		failedAt:   c.cfg.Now(),
		attempt:    in.Attempt,
	}
	if d.decodeErr == nil {
		dl.partition, dl.runID = d.m.Event.Key.Key, d.m.Event.RunID
	}
	// The dead letter's publish and the term are one settle span: the
	// dead letter carries its trace context.
	sctx, span := c.startSettle(d, tracing.SettleTerm)
	defer span.End()
	// The publish and the hook that follows it (the event's result, which
	// waits for a results stream that is full) may outlast the ack wait:
	// the message stays owned meanwhile, or it would come back and be
	// dead-lettered again.
	hb := startHeartbeat(max(c.cfg.AckWait/3, time.Millisecond), d.msg.InProgress, func(err error) {
		if err != nil {
			log.Warn().Err(err).Msg("heartbeat not sent while dead-lettering: the message may come back, deduplicated by Nats-Msg-Id")
		}
	})
	ack, err := c.dl.publish(sctx, d.dataset, dl)
	if err != nil {
		hb.Stop()
		span.SetStatus(codes.Error, "dead letter not published")
		log.Error().Err(err).AnErr("cause", in.Err).Dur("retry_in", f.Delay).
			Msg("dead letter not published: nak'ed, the message stays pending")
		if err := d.msg.NakWithDelay(f.Delay); err != nil {
			log.Warn().Err(err).Msg("nak not sent: redelivery after the ack wait")
		}
		return false
	}
	err = confirmTerm(context.WithoutCancel(sctx), c.js.Conn(), d.msg, dl.termReason(), min(c.cfg.AckTimeout, 2*time.Second))
	hb.Stop()
	if err != nil {
		span.SetStatus(codes.Error, "term not confirmed")
		log.Warn().Err(err).Msg("term not confirmed: the redelivery will be dead-lettered again, deduplicated by Nats-Msg-Id within the duplicate window")
	}
	log.Error().Err(in.Err).Str("error_kind", string(f.Kind)).Str("dlq_subject", c.dl.subject(d.dataset)).
		Uint64("dlq_seq", ack.Sequence).Bool("duplicate", ack.Duplicate).Msg("dead-lettered")
	if !ack.Duplicate {
		c.cfg.Hooks.deadLetter(d.label(), f.Kind)
	}
	return true
}
