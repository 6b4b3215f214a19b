package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/schemas"
)

// maxDeliverAdvisoryType is the "type" of JetStream's max-deliveries advisory.
const maxDeliverAdvisoryType = "io.nats.jetstream.advisory.v1.max_deliver"

// reconcileRetryDelay paces an advisory whose dead letter failed.
const reconcileRetryDelay = 5 * time.Second

// maxDeliverAdvisory is the part of JetStream's advisory we read
// (nats-server JSConsumerDeliveryExceededAdvisory).
type maxDeliverAdvisory struct {
	Type       string `json:"type"`
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// Reconciler dead-letters, as crashed, the messages JetStream stopped
// delivering after MaxDeliver deliveries without a verdict: a poison message
// that kills the process on every delivery must neither loop forever nor
// vanish. It reads the max-deliveries advisories that the advisory stream
// captured (so none is lost while every replica is down), fetches each
// message by its stream sequence and dead-letters it. Run one per replica.
type Reconciler struct {
	js  jetstream.JetStream
	cfg Config
	log zerolog.Logger
	dl  *deadLetterer
}

// NewReconciler checks cfg (after WithDefaults) and returns a Reconciler.
func NewReconciler(js jetstream.JetStream, cfg Config) (*Reconciler, error) {
	if js == nil {
		return nil, errors.New("consumer: NewReconciler needs a JetStream")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Reconciler{js: js, cfg: cfg, log: cfg.Log, dl: newDeadLetterer(js, cfg)}, nil
}

// Run reconciles until ctx is cancelled, then returns nil; it returns an
// error only when the connection is closed for good. An advisory in hand at
// cancellation is redelivered to another replica after its ack wait.
func (r *Reconciler) Run(ctx context.Context) error {
	var (
		cons   jetstream.Consumer
		events jetstream.Stream
		pause  time.Duration
	)
	failed := func(err error, msg string) {
		pause = min(max(2*pause, 100*time.Millisecond), 10*time.Second)
		r.log.Warn().Err(err).Dur("retry_in", pause).Msg(msg)
		t := time.NewTimer(pause)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	name := r.cfg.Streams().ReconcilerName()
	for ctx.Err() == nil {
		var err error
		if cons == nil {
			if cons, err = r.js.Consumer(ctx, r.cfg.AdvisoryStream, name); err != nil {
				cons = nil
			}
		}
		if err == nil && events == nil {
			if events, err = r.js.Stream(ctx, r.cfg.Stream); err != nil {
				events = nil
			}
		}
		if err == nil {
			err = r.fetch(ctx, cons, events)
		}
		switch {
		case err == nil, ctx.Err() != nil, errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrNoMessages):
			pause = 0
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("consumer: reconciler: %w", err)
		default:
			cons, events = nil, nil
			failed(err, "reconciler: advisories not available; run `idem streams` if the advisory stream is missing")
		}
	}
	return nil
}

func (r *Reconciler) fetch(ctx context.Context, cons jetstream.Consumer, events jetstream.Stream) error {
	fctx, cancel := pull(ctx, r.cfg.FetchWait)
	defer cancel()
	batch, err := cons.Fetch(16, jetstream.FetchContext(fctx))
	if err != nil {
		return err
	}
	for m := range batch.Messages() {
		r.reconcile(ctx, events, m)
	}
	return batch.Error()
}

// reconcile dead-letters the message one advisory names, then acks the
// advisory; a failure naks it for another try.
func (r *Reconciler) reconcile(ctx context.Context, events jetstream.Stream, m jetstream.Msg) {
	var adv maxDeliverAdvisory
	if err := json.Unmarshal(m.Data(), &adv); err != nil || adv.Type != maxDeliverAdvisoryType || adv.StreamSeq == 0 {
		r.log.Warn().Err(err).Str("subject", m.Subject()).Msg("reconciler: not a max-deliveries advisory: dropped")
		_ = m.Term()
		return
	}
	if adv.Stream != r.cfg.Stream || (adv.Consumer != r.cfg.Consumer && adv.Consumer != r.cfg.backfillConsumer()) {
		_ = m.Ack()
		return
	}
	log := r.log.With().Uint64("stream_seq", adv.StreamSeq).Uint64("deliveries", adv.Deliveries).Logger()
	gctx, cancel := context.WithTimeout(ctx, r.cfg.AckTimeout)
	raw, err := events.GetMsg(gctx, adv.StreamSeq)
	cancel()
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		log.Warn().Msg("reconciler: the message is no longer in the stream (stream limits or removed by hand): nothing to dead-letter")
		_ = m.Ack()
		return
	}
	if err != nil {
		log.Warn().Err(err).Msg("reconciler: could not read the message: will retry")
		_ = m.NakWithDelay(reconcileRetryDelay)
		return
	}

	token, _ := laneDataset(r.cfg.SubjectPrefix, raw.Subject)
	dataset := ""
	if _, ok := r.cfg.Datasets[token]; ok {
		dataset = token
	}
	ev, decodeErr := schemas.Decode(raw.Subject, raw.Data, r.cfg.lookup)
	log = messageLogger(r.log, token, ev, int(adv.Deliveries), adv.StreamSeq, raw.Subject, decodeErr == nil)
	dl := deadLetter{
		kind: KindCrashed,
		err: fmt.Errorf("JetStream stopped redelivering it after %d deliveries, none of which reached a verdict "+
			"(the process died, lost the message, was stopped, or could not publish its dead letter)", adv.Deliveries),
		subject:    raw.Subject,
		stream:     adv.Stream,
		seq:        adv.StreamSeq,
		deliveries: adv.Deliveries,
		header:     raw.Header,
		data:       raw.Data,
		dataset:    token,
		failedAt:   r.cfg.Now(),
	}
	if decodeErr == nil {
		dl.partition, dl.runID = ev.Key.Key, ev.RunID
	}
	ack, err := r.dl.publish(ctx, dataset, dl)
	if err != nil {
		log.Error().Err(err).Msg("reconciler: dead letter not published: will retry")
		_ = m.NakWithDelay(reconcileRetryDelay)
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.AckTimeout)
	if err := m.DoubleAck(actx); err != nil {
		log.Warn().Err(err).Msg("reconciler: advisory ack not confirmed: a retry is deduplicated by Nats-Msg-Id")
	}
	cancel()
	if ack.Duplicate {
		log.Info().Msg("reconciler: already dead-lettered")
		return
	}
	label := dataset
	if label == "" {
		label = InvalidDataset
	}
	r.cfg.Hooks.deadLetter(label, KindCrashed)
	log.Error().Str("error_kind", string(KindCrashed)).Uint64("dlq_seq", ack.Sequence).Msg("dead-lettered a message that ran out of deliveries without a verdict")
}
