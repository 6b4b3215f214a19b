package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/tracing"
)

// deadLetter is one message on its way to the dead-letter stream: what the
// consumer knows of it when it decides to dead-letter it.
type deadLetter struct {
	kind       Kind
	err        error
	subject    string // the original's
	stream     string
	seq        uint64
	deliveries uint64
	header     nats.Header
	data       []byte
	dataset    string // "" when unknown
	partition  string
	runID      string
	failedAt   time.Time
	attempt    int // the loads the handler counted; 0 when unknown
}

func (dl deadLetter) envelope() deadletter.Envelope {
	return deadletter.Envelope{
		Kind:       dl.kind,
		Err:        dl.err,
		Subject:    dl.subject,
		Stream:     dl.stream,
		Seq:        dl.seq,
		Deliveries: dl.deliveries,
		Attempts:   dl.attempt,
		Header:     dl.header,
		Data:       dl.data,
		Dataset:    dl.dataset,
		Partition:  dl.partition,
		RunID:      dl.runID,
		FailedAt:   dl.failedAt,
	}
}

// termReason is the reason given with TermWithReason: it shows in the
// server's terminated advisory.
func (dl deadLetter) termReason() string { return dl.envelope().TermReason() }

// deadLetterer publishes dead letters and waits for their PubAck.
type deadLetterer struct {
	js      jetstream.JetStream
	stream  string // the dead-letter stream, expected on publish
	prefix  string
	timeout time.Duration
	tracer  trace.Tracer
	stored  func(ctx context.Context, dl deadletter.Envelope, attempt int, ack *jetstream.PubAck)
}

// subject routes a dead letter: <prefix>.<dataset> for a configured
// dataset, <prefix>._invalid otherwise.
func (p *deadLetterer) subject(dataset string) string { return deadletter.Subject(p.prefix, dataset) }

// publish sends dl to the dead-letter stream and returns once JetStream has
// stored it (or had it already: PubAck.Duplicate). Its context is detached
// from ctx's cancellation: a stop must not abandon a dead letter halfway.
//
// A dead letter too big for the connection or the stream is published
// without its body (Envelope.OmitBody). Without that, a message near
// max_payload could never be dead-lettered and would never leave the
// pending set.
func (p *deadLetterer) publish(ctx context.Context, configuredDataset string, dl deadLetter) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	env := dl.envelope()
	m := env.Msg(p.subject(configuredDataset))
	if nc := p.js.Conn(); nc != nil {
		if limit := nc.MaxPayload(); limit > 0 && int64(deadletter.Size(m)) > limit {
			env.OmitBody(m, "the dead letter would exceed the server's max_payload")
		}
	}
	// Under ctx's span (the settle span): the dead letter continues the
	// message's trace, in a lower-case traceparent replacing the original's.
	// Without one (the reconciler's), under the original's.
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = tracing.Extract(ctx, dl.header)
	}
	_, span := tracing.StartPublish(ctx, p.tracer, tracing.Message{Subject: m.Subject, Header: m.Header,
		MsgID: m.Header.Get(jetstream.MsgIDHeader), BodySize: len(m.Data)})
	defer span.End()
	ack, err := p.js.PublishMsg(ctx, m, jetstream.WithExpectStream(p.stream))
	if errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) && len(m.Data) > 0 {
		env.OmitBody(m, "the dead letter would exceed the stream's max_msg_size")
		ack, err = p.js.PublishMsg(ctx, m, jetstream.WithExpectStream(p.stream))
	}
	if err != nil {
		span.SetStatus(codes.Error, "not stored")
		return nil, fmt.Errorf("publish dead letter %s to %s: %w", deadletter.MsgID(dl.stream, dl.seq), m.Subject, err)
	}
	if p.stored != nil {
		p.stored(ctx, env, dl.attempt, ack)
	}
	return ack, nil
}

// termConfirmFor bounds how long confirmTerm tries.
const termConfirmFor = 30 * time.Second

// confirmTerm terminates m, whose dead letter is stored, and waits for the
// server to confirm it (a Term sent with a reply subject is answered once
// the consumer applied it), sending it again while no answer comes. A Term
// sent fire-and-forget while the consumer has no leader (an election after
// a server died) is dropped without an error: the message comes back after
// AckWait, and when its next verdict comes after the dead-letter stream's
// duplicate window (a warehouse outage, a pause, in between) it is
// dead-lettered a second time. Past termConfirmFor it gives up, and the
// window is the only guard left. Each try waits at most each.
func confirmTerm(ctx context.Context, nc *nats.Conn, m jetstream.Msg, reason string, each time.Duration) error {
	if nc == nil || m.Reply() == "" {
		return m.TermWithReason(reason)
	}
	ctx, cancel := context.WithTimeout(ctx, termConfirmFor)
	defer cancel()
	body := []byte("+TERM " + reason)
	retry := time.NewTicker(250 * time.Millisecond)
	defer retry.Stop()
	for {
		rctx, rcancel := context.WithTimeout(ctx, each)
		_, err := nc.RequestWithContext(rctx, m.Reply(), body)
		rcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer within %s: %w", termConfirmFor, err)
		case <-retry.C:
		}
	}
}
