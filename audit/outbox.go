package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/schemas"
)

// OutboxEvent is a downstream event written in the load's transaction: what
// the event is, never how it travels (the subject and the Nats-Msg-Id are
// the relay's, from schemas).
type OutboxEvent struct {
	Event   schemas.PartitionReady
	AuditID int64 // the upstream attempt that caused it
	// Trace is the trace context of the load that caused it (package
	// tracing's stored form), "" for none; the relay's publish continues it.
	Trace string
}

// QueueEnqueueEvent queues on b, inside the caller's transaction, the insert of e
// into idem.outbox. An event already queued by the same upstream attempt is
// left alone: it is the same message. An event that could never be published
// (one Marshal refuses) is refused here, before it is stored.
func QueueEnqueueEvent(b *pgx.Batch, e OutboxEvent) error {
	if _, err := e.Event.Marshal(); err != nil {
		return fmt.Errorf("audit: outbox: %w", err)
	}
	var attrs []byte
	if len(e.Event.Attributes) > 0 {
		var err error
		if attrs, err = json.Marshal(e.Event.Attributes); err != nil {
			return fmt.Errorf("audit: outbox: %w", err)
		}
	}
	b.Queue(`
		INSERT INTO idem.outbox (dataset, partition_key, run_id, force, attributes, audit_id, trace)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (audit_id, dataset, partition_key, run_id) WHERE result IS NULL AND lineage IS NULL DO NOTHING`,
		e.Event.Dataset, e.Event.Partition, e.Event.RunID, e.Event.Force, attrs, e.AuditID, nullString(e.Trace))
	return nil
}

// QueueEnqueueResult queues on b, inside the caller's transaction, the
// result of attempt auditID (body: its JSON, package results) for the
// relay to publish on the results stream. A second result of the same
// attempt is left alone. For a skip, the body gains the rows
// and the audit id of the run's load, from the ledger: what a scheduler
// that asked again wants to know.
func QueueEnqueueResult(b *pgx.Batch, k RunKey, auditID int64, body []byte, skip bool) {
	sql, args := enqueueResultSQL(k, auditID, body, skip)
	b.Queue(sql, args...)
}

func enqueueResultSQL(k RunKey, auditID int64, body []byte, skip bool) (string, []any) {
	args := []any{k.Dataset, k.Partition, k.RunID, auditID, string(body)}
	merge := "'{}'::jsonb"
	if skip {
		args = append(args, k.Pipeline)
		merge = loadedBy("$6", "$1", "$2", "$3")
	}
	return `
		INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, result)
		SELECT $1, $2, $3, $4, $5::jsonb || ` + merge + `
		ON CONFLICT (audit_id) WHERE result IS NOT NULL DO NOTHING`, args
}

// EnqueueResult is QueueEnqueueResult as a statement of its own, committed
// at once: for an attempt whose transaction already ended (a skip).
func EnqueueResult(ctx context.Context, db Querier, k RunKey, auditID int64, body []byte, skip bool) error {
	sql, args := enqueueResultSQL(k, auditID, body, skip)
	if _, err := db.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("audit: outbox result: %w", err)
	}
	return nil
}

// lineageSQL inserts one OpenLineage event of attempt auditID; the same
// attempt's event of the same type is left alone (a retried statement).
const lineageSQL = `
		INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, lineage)
		VALUES ($1, $2, $3, $4, $5::jsonb)
		ON CONFLICT (audit_id, (lineage ->> 'eventType')) WHERE lineage IS NOT NULL DO NOTHING`

// QueueEnqueueLineage queues on b, inside the caller's transaction, the
// OpenLineage events of attempt auditID (each its JSON) for the relay to
// send, in this order.
func QueueEnqueueLineage(b *pgx.Batch, k RunKey, auditID int64, events ...[]byte) {
	for _, e := range events {
		b.Queue(lineageSQL, k.Dataset, k.Partition, k.RunID, auditID, string(e))
	}
}

// EnqueueLineage is QueueEnqueueLineage in a transaction of its own.
func EnqueueLineage(ctx context.Context, db interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}, k RunKey, auditID int64, events ...[]byte) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	QueueEnqueueLineage(b, k, auditID, events...)
	b.Queue("COMMIT")
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("audit: outbox lineage: %w", err)
	}
	return nil
}

// ResultHead is a result's status and the event it answers.
type ResultHead struct {
	Status, Stream string
	StreamSeq      uint64
}

// OutboxRow is a claimed event or result.
type OutboxRow struct {
	ID int64
	OutboxEvent
	// Result is the body of a result, Lineage an OpenLineage event (both
	// nil for a downstream event).
	Result, Lineage []byte
	// ResultHead is what a result's message says outside its body, read
	// from the body by the claim (the relay never parses it).
	ResultHead ResultHead
	// Attempts counts the publishes already tried (this one not included).
	Attempts int
	// Claim is when the claim lapses; it also names the claim, so a relay
	// whose claim lapsed cannot decide the fate of a row another one holds.
	Claim time.Time
	// Token is the row's own, set when it was written: with the audit id
	// in the message id of what is published from it, because after a
	// failover that lost commits a new attempt can get the audit id of a
	// lost one. Empty for rows written before schema v14.
	Token string
}

// ClaimOutbox claims up to limit due events for lease, in one short
// statement: due first (a row that failed went behind by its backoff), then
// oldest. Rows another relay claims are skipped, and stay skipped until their
// claim lapses (a relay that died), so replicas share the outbox without a
// transaction held while they publish.
func ClaimOutbox(ctx context.Context, db Querier, limit int, lease time.Duration) ([]OutboxRow, error) {
	rows, err := db.Query(ctx, `
		WITH due AS (
			SELECT id FROM idem.outbox
			 WHERE sent_at IS NULL AND next_attempt_at <= now()
			   AND (claimed_until IS NULL OR claimed_until <= now())
			 ORDER BY next_attempt_at, id
			 LIMIT $1
			   FOR UPDATE SKIP LOCKED)
		UPDATE idem.outbox o SET claimed_until = now() + $2 * interval '1 microsecond'
		  FROM due WHERE o.id = due.id
		RETURNING o.id, o.dataset, o.partition_key, o.run_id, o.force, o.attributes, o.audit_id, o.attempts, o.claimed_until, o.result::text, o.lineage::text,
		          coalesce(o.trace, ''), coalesce(o.result ->> 'status', ''), coalesce(o.result ->> 'stream', ''),
		          coalesce((o.result ->> 'stream_seq')::bigint, 0), coalesce(o.token::text, '')`,
		limit, lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("audit: outbox claim: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxRow, error) {
		var o OutboxRow
		e := &o.Event
		var seq int64
		// Straight into the byte slices (nil for NULL): a result scanned
		// as a string and copied was two allocations of its body per row.
		err := r.Scan(&o.ID, &e.Dataset, &e.Partition, &e.RunID, &e.Force, &e.Attributes, &o.AuditID, &o.Attempts, &o.Claim, &o.Result, &o.Lineage, &o.Trace,
			&o.ResultHead.Status, &o.ResultHead.Stream, &seq, &o.Token)
		o.ResultHead.StreamSeq = uint64(max(seq, 0))
		return o, err
	})
}

// OutboxSent is a publish JetStream acknowledged.
type OutboxSent struct {
	ID        int64
	StreamSeq uint64
}

// MarkOutboxSent records publishes JetStream acknowledged. Whoever published
// a row, it is sent: the mark holds even for a claim that lapsed.
func MarkOutboxSent(ctx context.Context, db Querier, sent []OutboxSent) error {
	if len(sent) == 0 {
		return nil
	}
	ids, seqs := make([]int64, len(sent)), make([]int64, len(sent))
	for i, s := range sent {
		ids[i], seqs[i] = s.ID, int64(s.StreamSeq)
	}
	_, err := db.Exec(ctx, `
		UPDATE idem.outbox o
		   SET sent_at = clock_timestamp(), stream_seq = s.seq, attempts = o.attempts + 1,
		       claimed_until = NULL, last_error = NULL
		  FROM unnest($1::bigint[], $2::bigint[]) AS s(id, seq)
		 WHERE o.id = s.id AND o.sent_at IS NULL`, ids, seqs)
	if err != nil {
		return fmt.Errorf("audit: outbox mark sent: %w", err)
	}
	return nil
}

// OutboxFailed is a publish that failed, and when to try the row again.
type OutboxFailed struct {
	ID      int64
	Err     error
	RetryIn time.Duration
}

// MarkOutboxFailed records failed publishes of claim and moves each row back
// by its own delay, ending the claim. Rows no longer under claim (it lapsed
// and another relay took them) are left to their new holder.
func MarkOutboxFailed(ctx context.Context, db Querier, claim time.Time, failed []OutboxFailed) error {
	if len(failed) == 0 {
		return nil
	}
	ids, delays, errs := make([]int64, len(failed)), make([]int64, len(failed)), make([]string, len(failed))
	for i, f := range failed {
		ids[i], delays[i], errs[i] = f.ID, f.RetryIn.Microseconds(), truncate(f.Err.Error(), 1000)
	}
	_, err := db.Exec(ctx, `
		UPDATE idem.outbox o
		   SET attempts = o.attempts + 1, last_error = s.err, claimed_until = NULL,
		       next_attempt_at = statement_timestamp() + s.delay * interval '1 microsecond'
		  FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS s(id, delay, err)
		 WHERE o.id = s.id AND o.sent_at IS NULL AND o.claimed_until = $4`, ids, delays, errs, claim)
	if err != nil {
		return fmt.Errorf("audit: outbox mark failed: %w", err)
	}
	return nil
}

// ReleaseOutbox ends claim on rows that were not tried (the relay is
// stopping): they are due again at once, with no attempt spent.
func ReleaseOutbox(ctx context.Context, db Querier, claim time.Time, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, `UPDATE idem.outbox SET claimed_until = NULL
		 WHERE id = ANY($1) AND sent_at IS NULL AND claimed_until = $2`, ids, claim)
	if err != nil {
		return fmt.Errorf("audit: outbox release: %w", err)
	}
	return nil
}

// PurgeOutbox deletes up to limit events sent more than retention ago (or
// than idem.retention_floor, when that is longer), in one short statement,
// and says how many it deleted. Pending rows are never deleted, however
// old. The delete is the database's function idem.purge_outbox, which runs
// as its owner: idem's role needs EXECUTE on it, not DELETE.
func PurgeOutbox(ctx context.Context, db Querier, retention time.Duration, limit int) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT idem.purge_outbox($1 * interval '1 microsecond', $2::int)`,
		retention.Microseconds(), limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("audit: outbox purge: %w", err)
	}
	return n, nil
}

// OutboxBacklog is what waits in the outbox.
type OutboxBacklog struct {
	// Pending counts events not yet sent, due or backing off.
	Pending int64
	// Oldest is the age of the oldest pending event; 0 when none is.
	Oldest time.Duration
}

// PendingOutbox reads the outbox's backlog.
func PendingOutbox(ctx context.Context, db Querier) (OutboxBacklog, error) {
	var b OutboxBacklog
	var oldest float64
	err := db.QueryRow(ctx, `
		SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
		  FROM idem.outbox WHERE sent_at IS NULL`).Scan(&b.Pending, &oldest)
	if err != nil {
		return OutboxBacklog{}, fmt.Errorf("audit: outbox backlog: %w", err)
	}
	b.Oldest = max(time.Duration(oldest*float64(time.Second)), 0)
	return b, nil
}
