package resultstream

import (
	"context"
	"errors"
	"github.com/idem-data/idem/internal/results"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/tracing"
)

// Publisher publishes the results that do not go through the outbox: a
// dead letter's, once the dead-letter stream acknowledged it.
type Publisher struct {
	JS             jetstream.JetStream
	Pipeline       string
	Stream, Prefix string
	// Published and Failed count results stored and given up (nil: not
	// counted). A result given up is still known to a waiter, which reads
	// the dead-letter stream too.
	Published, Failed func(status string)
	Log               zerolog.Logger
}

// publishBudget bounds the tries of one result, so a results stream that
// is down delays a dead letter's termination by at most that.
const publishBudget = 10 * time.Second

// DeadLettered publishes the result of the event dl dead-lettered (ack is
// the dead letter's PubAck; attempt the loads that ran). It fits
// consumer.Config.DeadLettered.
func (p *Publisher) DeadLettered(ctx context.Context, dl deadletter.Envelope, attempt int, ack *jetstream.PubAck) {
	errText := "unknown error"
	if dl.Err != nil {
		errText = dl.Err.Error()
	}
	l := deadletter.Letter{
		Seq: ack.Sequence, Kind: dl.Kind, Dataset: dl.Dataset, Partition: dl.Partition, RunID: dl.RunID,
		Attempts: attempt, Error: errText, OriginalStream: dl.Stream, OriginalSeq: dl.Seq, FailedAt: dl.FailedAt,
		Header: nats.Header{},
	}
	if id := dl.Header.Get(nats.MsgIdHdr); id != "" {
		l.Header.Set(deadletter.HeaderOriginalPrefix+nats.MsgIdHdr, id)
	}
	r := FromDeadLetter(p.Pipeline, l)
	if dl.Dataset == "" {
		return // no dataset, no subject a waiter follows
	}
	p.publish(ctx, r)
}

func (p *Publisher) publish(ctx context.Context, r results.Result) {
	m := Msg(p.Prefix, r)
	var err error
	// The dead letter's trace context (ctx's span), for whoever follows it.
	tracing.Inject(ctx, m.Header)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishBudget)
	defer cancel()
	delay := 250 * time.Millisecond
	for {
		tctx, tcancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = p.JS.PublishMsg(tctx, m, jetstream.WithExpectStream(p.Stream))
		tcancel()
		if err == nil {
			if p.Published != nil {
				p.Published(r.Status)
			}
			return
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
			delay *= 2
			continue
		}
		break
	}
	if p.Failed != nil {
		p.Failed(r.Status)
	}
	p.Log.Warn().Err(err).Str("dataset", r.Dataset).Str("partition", r.Partition).Uint64("stream_seq", r.StreamSeq).
		Str("results_stream", p.Stream).Msg("result not published (a waiter still finds the dead letter)")
}
