// Package relay publishes the events that loads wrote to idem.outbox (the
// downstream datasets of `then:`), so that a pipeline is idempotent end to
// end: a downstream event exists if and only if its upstream load committed,
// and it is published at least once, deduplicated by its Nats-Msg-Id.
//
// Every `idem serve` runs a relay. Rows are claimed with FOR UPDATE SKIP
// LOCKED, so replicas share the work without sending one row twice at once; a
// relay that dies after the PubAck and before marking the row sent leaves it
// pending, and the next publish of it is dropped by JetStream's duplicate
// window (and, past the window, skipped by the consumer's run ledger).
//
// Watermill's forwarder was considered: it keeps its own tables and a
// database/sql connection, while our outbox row must be written with the
// load's pgx transaction; the loop below is smaller than the glue.
package relay

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
)

// DB is what the relay needs of the pool.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Defaults.
const (
	DefaultInterval = 500 * time.Millisecond
	DefaultBatch    = 100
)

// Relay moves outbox rows to JetStream.
type Relay struct {
	DB     DB
	JS     jetstream.JetStream
	Stream string // the events stream the subjects must land in
	Log    zerolog.Logger
	// Interval between polls when nothing wakes the relay. Default DefaultInterval.
	Interval time.Duration
	// Batch is the most rows one pass claims. Default DefaultBatch.
	Batch int
	// Published is called with the number of events each pass sent.
	Published func(n int)

	wake chan struct{}
}

// New returns a relay with defaults filled.
func New(db DB, js jetstream.JetStream, stream string, log zerolog.Logger) *Relay {
	return &Relay{DB: db, JS: js, Stream: stream, Log: log, Interval: DefaultInterval, Batch: DefaultBatch, wake: make(chan struct{}, 1)}
}

// Wake asks for a pass now (after a commit that queued events).
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run relays until ctx is done, then makes one last pass.
func (r *Relay) Run(ctx context.Context) error {
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		for {
			n, err := r.Flush(ctx)
			if err != nil && ctx.Err() == nil {
				r.Log.Warn().Err(err).Msg("outbox relay: pass failed; retrying")
			}
			if n < r.Batch || err != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = r.Flush(fctx)
			cancel()
			return nil
		case <-t.C:
		case <-r.wake:
		}
	}
}

// Flush makes one pass: it claims up to Batch pending rows, publishes each
// and waits for its PubAck, marks it sent, and commits. It returns how many
// were sent.
func (r *Relay) Flush(ctx context.Context) (int, error) {
	tx, err := r.DB.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := audit.ClaimPending(ctx, tx, r.Batch)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	sent := 0
	var firstErr error
	for _, row := range rows {
		msg := &nats.Msg{Subject: row.Subject, Data: row.Body, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, row.MsgID)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ack, err := r.JS.PublishMsg(pctx, msg, jetstream.WithExpectStream(r.Stream))
		cancel()
		if err != nil {
			firstErr = errors.Join(firstErr, err)
			if merr := audit.MarkFailed(ctx, tx, row.ID, err); merr != nil {
				return sent, merr
			}
			continue
		}
		if err := audit.MarkSent(ctx, tx, row.ID, ack.Sequence); err != nil {
			return sent, err
		}
		r.Log.Info().Str("subject", row.Subject).Str("msg_id", row.MsgID).Uint64("stream_seq", ack.Sequence).
			Bool("duplicate", ack.Duplicate).Msg("outbox: downstream event published")
		sent++
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	if r.Published != nil && sent > 0 {
		r.Published(sent)
	}
	return sent, firstErr
}
