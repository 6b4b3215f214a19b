package cli

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/schemas"
)

// publishBackfill publishes the plan's events in plan order, with up to
// backfillWindow waiting for their PubAck; one connection keeps that order in
// the stream. A partition counts as published only once its PubAck is in.
// On an error nothing more is sent, and the publishes in flight are still
// confirmed or not before it returns.
func publishBackfill(ctx context.Context, js jetstream.JetStream, cfg *config.Config, res *backfillResult, perSecond float64, progress func(done int)) error {
	type inFlight struct {
		p   *bfPartition
		ack jetstream.PubAckFuture
	}
	var window []inFlight
	// confirm takes the oldest publish's PubAck off the window: waiting for
	// it, or with wait false only if it is already in (so progress moves
	// while --rate spaces the publishes).
	confirm := func(wait bool) (bool, error) {
		f := window[0]
		var ack *jetstream.PubAck
		var err error
		if wait {
			t := time.NewTimer(backfillPubAckTimeout + time.Second)
			defer t.Stop()
			select {
			case ack = <-f.ack.Ok():
			case err = <-f.ack.Err():
			case <-t.C:
				err = fmt.Errorf("no PubAck within %s", backfillPubAckTimeout)
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
		window = window[1:]
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
		for len(window) > 0 {
			if _, err := confirm(true); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	pace := &bfPacer{}
	if perSecond > 0 {
		pace.every = time.Duration(float64(time.Second) / perSecond)
	}
	for _, p := range res.Partitions {
		if p.Action != "publish" {
			continue
		}
		msg, err := eventMsg(cfg, schemas.PartitionReady{Dataset: res.Dataset, Partition: p.Partition, RunID: res.RunID, Force: res.Force})
		if err != nil {
			return drain(err)
		}
		for len(window) > 0 {
			done, err := confirm(len(window) == backfillWindow)
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
		ack, err := js.PublishMsgAsync(msg, jetstream.WithExpectStream(cfg.NATS.Stream))
		if err != nil {
			return drain(fmt.Errorf("publish %s %s: %w", res.Dataset, p.Partition, err))
		}
		window = append(window, inFlight{p, ack})
	}
	return drain(nil)
}

// bfDeadLetter is what the dead-letter stream says about one partition.
type bfDeadLetter struct{ kind, err string }

// bfDLQWatch collects this run's dead letters for the dataset. It only matters
// for crashes: a fatal or exhausted failure is in the audit table too, a
// delivery that died is only in the dead-letter stream.
type bfDLQWatch struct {
	mu   sync.Mutex
	seen map[string]bfDeadLetter
	cc   jetstream.ConsumeContext
}

func watchBackfillDLQ(ctx context.Context, js jetstream.JetStream, cfg *config.Config, dataset, runID string, warn io.Writer) *bfDLQWatch {
	w := &bfDLQWatch{seen: map[string]bfDeadLetter{}}
	cons, err := js.OrderedConsumer(ctx, cfg.NATS.DLQStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{cfg.NATS.DLQSubjectPrefix + "." + dataset},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err == nil {
		w.cc, err = cons.Consume(func(m jetstream.Msg) {
			h := m.Headers()
			if h.Get(consumer.HeaderRunID) != runID {
				return
			}
			w.mu.Lock()
			w.seen[h.Get(consumer.HeaderPartition)] = bfDeadLetter{kind: h.Get(consumer.HeaderErrorKind), err: h.Get(consumer.HeaderError)}
			w.mu.Unlock()
		})
	}
	if err != nil {
		fmt.Fprintf(warn, "idem: cannot follow the dead-letter stream %s (%v): a delivery that crashed will show as started until --timeout\n", cfg.NATS.DLQStream, err)
	}
	return w
}

func (w *bfDLQWatch) get(partition string) (bfDeadLetter, bool) {
	if w == nil {
		return bfDeadLetter{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d, ok := w.seen[partition]
	return d, ok
}

func (w *bfDLQWatch) stop() {
	if w != nil && w.cc != nil {
		w.cc.Stop()
	}
}

// backfillOutcome decides where a published partition stands in the run: success;
// failed for good (a fatal error, the last allowed delivery, or a dead letter
// of this run, which is how a crash shows); or still pending.
func backfillOutcome(a audit.RunAttempt, dl bfDeadLetter, dead bool, maxDeliveries int) bfOutcome {
	o := bfOutcome{Attempts: a.Attempt, Rows: a.RowCount, Error: a.Error}
	switch {
	case a.Succeeded:
		o.Status, o.Final, o.Error = audit.StatusSuccess, true, ""
	case a.Status == audit.StatusFailed && a.ErrorKind == "fatal":
		o.Status, o.Final, o.DLQ = audit.StatusFailed, true, string(consumer.KindFatal)
	case a.Status == audit.StatusFailed && a.Attempt >= maxDeliveries:
		o.Status, o.Final, o.DLQ = audit.StatusFailed, true, string(consumer.KindExhausted)
	case dead:
		o.Status, o.Final, o.DLQ = audit.StatusFailed, true, dl.kind
		if o.Error == "" || dl.kind == string(consumer.KindCrashed) {
			o.Error = dl.err
		}
	case a.Status == audit.StatusFailed:
		o.Status = planRetrying
	case a.Status == audit.StatusStarted:
		o.Status = audit.StatusStarted
	default:
		o.Status = "queued"
	}
	return o
}
