package backfill

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/tracing"
	"github.com/idem-data/idem/schemas"
)

const (
	// window bounds the publishes waiting for their PubAck: enough to keep
	// the server busy, few enough that a failure leaves little in doubt.
	window = 256
	// pubAckTimeout bounds the wait for one PubAck, as idem publish's.
	pubAckTimeout = 10 * time.Second
)

// NewJetStream is the JetStream context Publish needs on nc: its PubAck
// timeout, and room for its window of publishes in flight.
func NewJetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	return jetstream.New(nc, jetstream.WithPublishAsyncTimeout(pubAckTimeout),
		jetstream.WithPublishAsyncMaxPending(2*window))
}

// Message is the message of one event of the backfill, as schemas derives
// it for every publisher: validated as the consumer will validate it, so a
// bad run_id is refused before anything is planned or sent. It goes to the
// backfill lane (schemas.BackfillPrefix), read after live events; the body
// and message id are a live event's.
func Message(cfg *config.Config, ev schemas.PartitionReady) (schemas.Message, error) {
	return schemas.NewMessage(schemas.BackfillPrefix(cfg.NATS.SubjectPrefix), ev, cfg.Lookup, time.Now())
}

// Publish publishes the plan's events in plan order (at most perSecond a
// second when it is positive), with up to a window of them waiting for their
// PubAck; one connection keeps that order in the stream. A partition counts
// as published only once its PubAck is in; progress is called with the
// count each time one is. On an error nothing more is sent, and the
// publishes in flight are still confirmed or not before it returns.
func Publish(ctx context.Context, js jetstream.JetStream, cfg *config.Config, res *Result, perSecond float64, progress func(done int)) error {
	type inFlight struct {
		p   *Partition
		ack jetstream.PubAckFuture
	}
	var pending []inFlight
	// confirm takes the oldest publish's PubAck off the window: waiting for
	// it, or with wait false only if it is already in (so progress moves
	// while the rate spaces the publishes).
	confirm := func(wait bool) (bool, error) {
		f := pending[0]
		var ack *jetstream.PubAck
		var err error
		if wait {
			t := time.NewTimer(pubAckTimeout + time.Second)
			defer t.Stop()
			select {
			case ack = <-f.ack.Ok():
			case err = <-f.ack.Err():
			case <-t.C:
				err = fmt.Errorf("no PubAck within %s", pubAckTimeout)
			case <-ctx.Done():
				err = ctx.Err()
			}
		} else {
			select {
			case ack = <-f.ack.Ok():
			case err = <-f.ack.Err():
			default:
				return false, nil
			}
		}
		pending = pending[1:]
		if err != nil {
			return true, fmt.Errorf("publish %s %s: %w", res.Dataset, f.p.Partition, err)
		}
		f.p.Seq, f.p.Duplicate = ack.Sequence, ack.Duplicate
		res.Published++
		if ack.Duplicate {
			res.Duplicates++
		}
		progress(res.Published)
		return true, nil
	}
	drain := func(first error) error {
		for len(pending) > 0 {
			if _, err := confirm(true); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	// Each event's publish span is a child of ctx's span, from its
	// provider, and carries the trace context in a lower-case traceparent
	// (the scheduler's, when ctx holds only that).
	tracer := trace.SpanFromContext(ctx).TracerProvider().Tracer("github.com/idem-data/idem/internal/backfill")
	pace := &pacer{}
	if perSecond > 0 {
		pace.every = time.Duration(float64(time.Second) / perSecond)
	}
	for _, p := range res.Partitions {
		if p.Action != ActionPublish {
			continue
		}
		m, err := Message(cfg, schemas.PartitionReady{Dataset: res.Dataset, Partition: p.Partition, RunID: res.RunID, Force: res.Force})
		if err != nil {
			return drain(err)
		}
		for len(pending) > 0 {
			done, err := confirm(len(pending) == window)
			if err != nil {
				return drain(err)
			}
			if !done {
				break
			}
		}
		if err := pace.wait(ctx); err != nil {
			return drain(err)
		}
		msg := &nats.Msg{Subject: m.Subject, Data: m.Body, Header: nats.Header{}}
		_, span := tracing.StartPublish(ctx, tracer, tracing.Message{Subject: m.Subject, Header: msg.Header, MsgID: m.MsgID, BodySize: len(m.Body)})
		ack, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(m.MsgID), jetstream.WithExpectStream(cfg.NATS.Stream))
		span.End()
		if err != nil {
			return drain(fmt.Errorf("publish %s %s: %w", res.Dataset, p.Partition, err))
		}
		pending = append(pending, inFlight{p, ack})
	}
	return drain(nil)
}

// pacer spaces events every apart (no burst): a backfill must not flood
// the consumer or the database behind it.
type pacer struct {
	every time.Duration
	next  time.Time
}

func (p *pacer) wait(ctx context.Context) error {
	if p.every <= 0 {
		return nil
	}
	now := time.Now()
	if d := p.next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now = p.next
	}
	p.next = now.Add(p.every)
	return nil
}
