// Package relay publishes what loads wrote to idem.outbox: the downstream
// events of `then:`, each event's result (package results, on the results
// stream) and, with lineage configured, its OpenLineage events (POSTed in
// the order written). So a pipeline is idempotent end to end: a row exists
// if and only if its load committed, and it goes out at least once,
// deduplicated by its Nats-Msg-Id (a lineage receiver by the run id).
//
// Every `idem serve` runs a relay. A pass claims due rows in one short
// statement (a lease, not a lock), publishes them outside any transaction,
// and records each outcome in one more statement: the relay's DB cannot even
// begin a transaction. A failed row is moved back by its own exponential
// backoff, so it never holds back newer rows; a relay that dies leaves its
// rows claimed until the lease lapses, and their re-publish is dropped by
// JetStream's duplicate window (past it, skipped by the consumer's ledger).
// The outbox stores what an event is; the subject, the body and the message
// id are derived here, from package schemas. A message id names the
// upstream attempt by its audit id and the row's token, drawn when the row
// was written: an audit id alone can come back after a failover that lost
// commits. Sent rows are deleted after Config.Retention.
//
// Watermill's SQL subscriber and forwarder were measured against these
// needs and do not meet them. watermill-sql/v4 (v4.1.2) with its forwarder,
// run against PostgreSQL (ten queued messages, a stand-in publisher), held
// its batch's FOR UPDATE transaction open while publishing (idle in
// transaction for 3 s with 300 ms publishes); re-sent a failed message in
// place, blocking the rows behind it (0 of 9 newer out in 5 s while the
// failing one was tried 50 times); kept acked rows forever or deleted them
// at once; and stored a row as a JSON envelope, so dataset, partition and
// lineage are not queryable.
package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/results"
	"github.com/idem-data/idem/internal/resultstream"
	"github.com/idem-data/idem/internal/tracing"
	"github.com/idem-data/idem/schemas"
)

// DB is what the relay needs of the pool: single statements, no Begin.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// markTimeout bounds the statements that record a pass's outcomes, which
// run even when the relay is stopping; finalPassTimeout bounds the last
// pass made after Run's context ends; maxPurgeBatches bounds one purge, so
// a large first purge does not hold up publishing (the rest waits for the
// next interval).
const (
	markTimeout      = 5 * time.Second
	finalPassTimeout = 5 * time.Second
	maxPurgeBatches  = 20
)

// Relay moves outbox rows to JetStream.
type Relay struct {
	// Published, Failed: the number of publishes JetStream acknowledged,
	// and of those that failed, after each pass.
	Published func(n int)
	Failed    func(n int)
	// Backlog receives the outbox's backlog every Config.BacklogInterval.
	Backlog func(audit.OutboxBacklog)
	// Tracer makes a publish span for each downstream event, a child of
	// the load that caused it (the row's trace); nil makes none, and the
	// event still carries that trace context.
	Tracer trace.Tracer

	db     DB
	js     jetstream.JetStream
	cfg    Config
	log    zerolog.Logger
	retry  consumer.Retry
	jitter func() float64
	wake   chan struct{}
}

// New returns a relay for cfg (zero fields take their defaults), or why cfg
// is wrong.
func New(db DB, js jetstream.JetStream, cfg Config, log zerolog.Logger) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Relay{
		db: db, js: js, cfg: cfg, log: log,
		retry:  consumer.Retry{Delay: cfg.RetryDelay, MaxDelay: cfg.MaxRetryDelay},
		jitter: rand.Float64,
		wake:   make(chan struct{}, 1),
	}, nil
}

// Wake asks for a pass now (after a commit that queued events).
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run relays until ctx is done, then makes one last pass. Between passes it
// deletes sent rows past the retention and reports the backlog.
func (r *Relay) Run(ctx context.Context) error {
	poll := time.NewTicker(r.cfg.Interval)
	defer poll.Stop()
	purge := time.NewTicker(r.cfg.PurgeInterval)
	defer purge.Stop()
	backlog := time.NewTicker(r.cfg.BacklogInterval)
	defer backlog.Stop()
	r.reportBacklog(ctx)
	for {
		r.drain(ctx)
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalPassTimeout)
			_, _ = r.Flush(fctx)
			cancel()
			return nil
		case <-poll.C:
		case <-r.wake:
			// Let the commits of the loads running now queue their rows
			// too: one claim and one mark for all of them, not one each.
			t := time.NewTimer(r.cfg.Coalesce)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		case <-purge.C:
			r.purge(ctx)
		case <-backlog.C:
			r.reportBacklog(ctx)
		}
	}
}

// drain makes passes while they find full batches.
func (r *Relay) drain(ctx context.Context) {
	for ctx.Err() == nil {
		p, err := r.Flush(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn().Err(err).Msg("outbox relay: pass failed; retrying")
			}
			return
		}
		if p.Claimed < r.cfg.Batch {
			return
		}
	}
}

// Pass is what one Flush did.
type Pass struct {
	Claimed, Sent, Failed int
}

// Flush makes one pass: it claims up to Config.Batch due rows, publishes
// them all at once, each waiting for its PubAck, and records each outcome:
// sent, failed and moved back by its backoff, or (when ctx ends first)
// released untried. The error is the database's; failed publishes are
// counted in Pass and recorded on their rows.
func (r *Relay) Flush(ctx context.Context) (Pass, error) {
	rows, err := audit.ClaimOutbox(ctx, r.db, r.cfg.Batch, r.cfg.Lease)
	if err != nil || len(rows) == 0 {
		return Pass{}, err
	}
	// The claim has committed: nothing is locked while NATS answers.
	errs := make([]error, len(rows))
	acks := make([]*jetstream.PubAck, len(rows))
	var wg sync.WaitGroup
	var lineage []int
	// Every publish of the pass starts now: one deadline bounds each
	// one's wait for its PubAck (a timer per row was a tenth of a
	// result's publish).
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	for i := range rows {
		if rows[i].Lineage != nil {
			lineage = append(lineage, i)
			continue
		}
		wg.Go(func() { acks[i], errs[i] = r.publish(pctx, rows[i]) })
	}
	// Lineage events one after the other, in the order they were written
	// (an attempt's START before its COMPLETE or FAIL).
	wg.Go(func() {
		var failed error
		for _, i := range lineage {
			if failed != nil {
				// Held back with the one that failed, so that they are due
				// again together and still go in order.
				errs[i] = fmt.Errorf("held behind an earlier lineage event: %w", failed)
				continue
			}
			acks[i], errs[i] = r.sendLineage(ctx, rows[i])
			failed = errs[i]
		}
	})
	wg.Wait()
	return r.settle(ctx, rows, acks, errs)
}

// LineageSender sends one OpenLineage event (internal/lineage's Client).
type LineageSender interface {
	Send(ctx context.Context, event []byte) error
}

// sendLineage sends a lineage row. A receiver's refusal that no retry can
// change (a 4xx: the error's Fatal) drops the event: the row is marked
// sent, and the refusal logged. Without a sender configured any more, the
// event is dropped likewise.
func (r *Relay) sendLineage(ctx context.Context, row audit.OutboxRow) (*jetstream.PubAck, error) {
	if r.cfg.Lineage == nil {
		r.log.Warn().Int64("audit_id", row.AuditID).Msg("outbox: a lineage event, and no lineage receiver configured: dropped")
		return &jetstream.PubAck{}, nil
	}
	err := r.cfg.Lineage.Send(ctx, row.Lineage)
	var f interface{ Fatal() bool }
	if errors.As(err, &f) && f.Fatal() {
		r.log.Error().Err(err).Int64("audit_id", row.AuditID).Msg("outbox: the lineage receiver refused an event: dropped")
		return &jetstream.PubAck{}, nil
	}
	if err != nil {
		return nil, err
	}
	return &jetstream.PubAck{}, nil
}

// publish sends row with the subject, body and message id schemas derive;
// a result goes to the results stream, as package results derives it.
// ctx's deadline (the pass's) bounds the wait for its PubAck.
func (r *Relay) publish(ctx context.Context, row audit.OutboxRow) (*jetstream.PubAck, error) {
	if row.Result != nil {
		// The claim read the status and the event's stream and sequence
		// out of the body: no parse of it here (it was a tenth of the
		// relay's CPU).
		h := row.ResultHead
		if h.Status == "" {
			return nil, fmt.Errorf("relay: result row %d names no status", row.ID)
		}
		if r.cfg.ResultsStream == "" {
			return nil, errors.New("relay: a result row, and no results stream configured")
		}
		m := resultstream.MsgFromParts(r.cfg.ResultsSubjectPrefix, row.Event.Dataset, h.Status, h.Stream, h.StreamSeq, row.AuditID, row.Token, row.Result)
		return r.js.PublishMsg(ctx, m, jetstream.WithExpectStream(r.cfg.ResultsStream))
	}
	m, err := schemas.NewTriggeredMessage(r.cfg.SubjectPrefix, row.Event, row.AuditID, row.Token)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: m.Subject, Data: m.Body, Header: nats.Header{}}
	// The load's trace goes on in the downstream event: its traceparent
	// names this span (or, without a tracer, the load's own).
	ctx, span := tracing.StartPublish(tracing.Load(ctx, row.Trace), tracing.OrNoop(r.Tracer),
		tracing.Message{Subject: m.Subject, Header: msg.Header, MsgID: m.MsgID, BodySize: len(m.Body)})
	defer span.End()
	ack, err := r.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.MsgID), jetstream.WithExpectStream(r.cfg.Stream))
	if err != nil {
		span.SetStatus(codes.Error, "not stored")
	}
	return ack, err
}

func msgID(row audit.OutboxRow) string {
	if row.Lineage != nil {
		return fmt.Sprintf("lineage:%d", row.AuditID)
	}
	if row.Result != nil {
		return results.MsgID(row.ResultHead.Stream, row.ResultHead.StreamSeq, row.AuditID, row.Token)
	}
	return row.Event.TriggeredMsgID(row.AuditID, row.Token)
}

// settle records the outcome of each publish of one claim. It runs on a
// context that survives ctx, so a relay that is stopping still says what it
// sent and does not leave rows claimed until the lease lapses.
func (r *Relay) settle(ctx context.Context, rows []audit.OutboxRow, acks []*jetstream.PubAck, errs []error) (Pass, error) {
	var (
		sent         []audit.OutboxSent
		failed       []audit.OutboxFailed
		released     []int64
		first        error
		lineageDelay time.Duration
	)
	for i, row := range rows {
		// The row's fields go on each line as it is logged: most lines
		// are at debug, and a logger built for each row cost its
		// allocations whether or not the line was written.
		fields := func(ev *zerolog.Event) *zerolog.Event {
			return ev.Str("dataset", row.Event.Dataset).Str("partition", row.Event.Partition).
				Str("run_id", row.Event.RunID).Str("msg_id", msgID(row)).Int("attempt", row.Attempts+1)
		}
		switch err := errs[i]; {
		case err == nil:
			sent = append(sent, audit.OutboxSent{ID: row.ID, StreamSeq: acks[i].Sequence})
			if row.Result != nil || row.Lineage != nil {
				// One or more per event: not worth a line at info.
				if ev := r.log.Debug(); ev.Enabled() {
					fields(ev).Uint64("results_seq", acks[i].Sequence).Bool("duplicate", acks[i].Duplicate).Msg("outbox: result published")
				}
				continue
			}
			fields(r.log.Info()).Uint64("stream_seq", acks[i].Sequence).Bool("duplicate", acks[i].Duplicate).
				Msg("outbox: downstream event published")
		case ctx.Err() != nil:
			// Stopping, not the row's fault: it is due again at once.
			released = append(released, row.ID)
		default:
			delay := r.retry.Backoff(row.Attempts+1, r.jitter())
			if row.Lineage != nil {
				// Every lineage row of a pass is due again at the same
				// moment: the claim takes them in the order written.
				if lineageDelay == 0 {
					lineageDelay = delay
				}
				delay = lineageDelay
			}
			failed = append(failed, audit.OutboxFailed{ID: row.ID, Err: err, RetryIn: delay})
			if first == nil {
				first = err
			}
			if ev := r.log.Debug(); ev.Enabled() {
				fields(ev).Err(err).Dur("retry_in", delay).Msg("outbox: publish failed")
			}
		}
	}
	if len(failed) > 0 {
		r.log.Warn().Err(first).Int("failed", len(failed)).Int("claimed", len(rows)).
			Msg("outbox: publishes failed; each row retries after its own backoff")
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	claim := rows[0].Claim // one statement claimed them all
	err := errors.Join(
		audit.MarkOutboxSent(mctx, r.db, sent),
		audit.MarkOutboxFailed(mctx, r.db, claim, failed),
		audit.ReleaseOutbox(mctx, r.db, claim, released),
	)
	if r.Published != nil && len(sent) > 0 {
		r.Published(len(sent))
	}
	if r.Failed != nil && len(failed) > 0 {
		r.Failed(len(failed))
	}
	return Pass{Claimed: len(rows), Sent: len(sent), Failed: len(failed)}, err
}

// purge deletes sent rows past the retention, one small batch per
// statement, until a batch comes back short or maxPurgeBatches ran.
func (r *Relay) purge(ctx context.Context) {
	var total int64
	for range maxPurgeBatches {
		n, err := audit.PurgeOutbox(ctx, r.db, r.cfg.Retention, r.cfg.PurgeBatch)
		total += n
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn().Err(err).Msg("outbox relay: purge failed; retrying at the next interval")
			}
			break
		}
		if n < int64(r.cfg.PurgeBatch) {
			break
		}
	}
	if total > 0 {
		r.log.Info().Int64("deleted", total).Dur("retention", r.cfg.Retention).Msg("outbox: sent rows past the retention deleted")
	}
}

func (r *Relay) reportBacklog(ctx context.Context) {
	if r.Backlog == nil {
		return
	}
	b, err := audit.PendingOutbox(ctx, r.db)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("outbox relay: backlog unknown")
		}
		return
	}
	r.Backlog(b)
}
