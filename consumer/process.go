package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// process takes one fetched message from delivery to fate: read it, keep it
// owned with heartbeats while it waits for its turn and runs, ask Decide,
// carry the fate out.
func (c *Consumer) process(hard context.Context, msg jetstream.Msg) {
	d, err := c.newDelivery(msg)
	if err != nil {
		// Unreachable for a pull consumer's message; never drop it silently.
		c.log.Error().Err(err).Str("subject", msg.Subject()).Msg("message without JetStream metadata: nak'ed")
		_ = msg.NakWithDelay(c.cfg.ShutdownNakDelay)
		return
	}
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
	in, handled := c.run(hard, d)
	hb.Stop()
	c.apply(d, in, Decide(in), handled)
}

// run calls the handler when the message may run, and returns what Decide
// needs and how long the handler ran.
func (c *Consumer) run(hard context.Context, d *delivery) (Input, time.Duration) {
	in := Input{
		Attempt:       d.m.NumDelivered,
		Retry:         d.retry,
		Jitter:        c.cfg.Rand(),
		ShutdownDelay: c.cfg.ShutdownNakDelay,
	}
	switch {
	case d.decodeErr != nil:
		in.Err = d.decodeErr
		return in, 0
	case d.m.NumDelivered > d.retry.MaxDeliveries:
		in.Err = &unfinishedError{attempt: d.m.NumDelivered, max: d.retry.MaxDeliveries}
		return in, 0
	}
	release, ok := c.takeTurn(d)
	if !ok || c.isStopping() {
		if ok {
			release()
		}
		in.Err, in.Cause = ErrShutdown, ErrShutdown
		return in, 0
	}
	defer release()
	ctx := d.log.WithContext(hard)
	start := time.Now()
	in.Err = c.call(ctx, d)
	in.Cause = context.Cause(ctx)
	return in, time.Since(start)
}

// takeTurn waits for a free place under the dataset's MaxConcurrency, or
// for a stop (ok false). Other datasets' messages do not wait behind it.
func (c *Consumer) takeTurn(d *delivery) (release func(), ok bool) {
	turn, limited := c.turns[d.dataset]
	if !limited {
		return func() {}, true
	}
	select {
	case turn <- struct{}{}:
	default:
		d.log.Debug().Int("max_concurrency", cap(turn)).Msg("dataset at its concurrency limit: waiting for a turn")
		select {
		case turn <- struct{}{}:
		case <-c.stopping:
			return nil, false
		}
	}
	return func() { <-turn }, true
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
	log := d.log.With().Stringer("fate", f).Logger()
	label := d.label()
	switch f.Action {
	case Ack:
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.AckTimeout)
		err := d.msg.DoubleAck(ctx)
		cancel()
		if err != nil {
			log.Warn().Err(err).Msg("ack not confirmed: a redelivery will find the work done")
		} else {
			log.Info().Dur("handled", handled).Msg("acked")
		}
	case Nak:
		if err := d.msg.NakWithDelay(f.Delay); err != nil {
			log.Warn().Err(err).Msg("nak not sent: redelivery after the ack wait")
		}
		if f.Shutdown {
			log.Info().Msg("interrupted by shutdown: nak'ed for redelivery")
		} else {
			log.Warn().Err(in.Err).Dur("retry_in", f.Delay).Int("max_deliveries", d.retry.MaxDeliveries).Msg("transient failure: will retry")
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
	}
	if d.decodeErr == nil {
		dl.partition, dl.runID = d.m.Event.Key.Key, d.m.Event.RunID
	}
	ack, err := c.dl.publish(context.Background(), d.dataset, dl)
	if err != nil {
		log.Error().Err(err).AnErr("cause", in.Err).Dur("retry_in", f.Delay).
			Msg("dead letter not published: nak'ed, the message stays pending")
		if err := d.msg.NakWithDelay(f.Delay); err != nil {
			log.Warn().Err(err).Msg("nak not sent: redelivery after the ack wait")
		}
		return false
	}
	if err := d.msg.TermWithReason(dl.termReason()); err != nil {
		log.Warn().Err(err).Msg("term not sent: the redelivery will be dead-lettered again, deduplicated by Nats-Msg-Id")
	}
	log.Error().Err(in.Err).Str("error_kind", string(f.Kind)).Str("dlq_subject", c.dl.subject(d.dataset)).
		Uint64("dlq_seq", ack.Sequence).Bool("duplicate", ack.Duplicate).Msg("dead-lettered")
	if !ack.Duplicate {
		c.cfg.Hooks.deadLetter(d.label(), f.Kind)
	}
	return true
}
