package audit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/schemas"
)

// OutboxEvent is a downstream event written in the load's transaction: what
// the event is, never how it travels (the subject and the Nats-Msg-Id are
// the relay's, from schemas).
type OutboxEvent struct {
	Event   schemas.PartitionReady
	AuditID int64 // the upstream attempt that caused it
}

// wire is how e is published today: subject under prefix, body, message id.
func (e OutboxEvent) wire(prefix string) (subject, msgID string, body []byte, err error) {
	body, err = e.Event.Marshal()
	if err != nil {
		return "", "", nil, err
	}
	return schemas.Subject(prefix, e.Event.Dataset), e.Event.TriggeredMsgID(e.AuditID), body, nil
}

const enqueueSQL = `
		INSERT INTO idem.outbox (subject, msg_id, body, audit_id) VALUES ($1, $2, $3, $4)
		ON CONFLICT (msg_id) DO NOTHING`

// Enqueue writes e to idem.outbox inside the caller's transaction, for the
// subject prefix prefix. An event with the same message id already queued is
// left alone: it is the same event.
func Enqueue(ctx context.Context, db Querier, prefix string, e OutboxEvent) error {
	subject, msgID, body, err := e.wire(prefix)
	if err != nil {
		return fmt.Errorf("audit: outbox: %w", err)
	}
	if _, err := db.Exec(ctx, enqueueSQL, subject, msgID, body, e.AuditID); err != nil {
		return fmt.Errorf("audit: outbox: %w", err)
	}
	return nil
}

// OutboxRow is a queued event.
type OutboxRow struct {
	ID       int64
	Subject  string
	MsgID    string
	Body     []byte
	Attempts int
}

// ClaimPending locks up to limit unsent events, oldest first, skipping rows
// another relay holds: several replicas relay in parallel without sending
// one row twice at once. The lock lasts until tx ends.
func ClaimPending(ctx context.Context, tx pgx.Tx, limit int) ([]OutboxRow, error) {
	rows, err := tx.Query(ctx, `
		SELECT id, subject, msg_id, body, attempts FROM idem.outbox
		 WHERE sent_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: outbox claim: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (OutboxRow, error) {
		var o OutboxRow
		err := r.Scan(&o.ID, &o.Subject, &o.MsgID, &o.Body, &o.Attempts)
		return o, err
	})
}

// MarkSent records that JetStream acknowledged the event.
func MarkSent(ctx context.Context, tx pgx.Tx, id int64, streamSeq uint64) error {
	_, err := tx.Exec(ctx, `UPDATE idem.outbox SET sent_at = clock_timestamp(), stream_seq = $2, attempts = attempts + 1, last_error = NULL WHERE id = $1`,
		id, int64(streamSeq))
	return err
}

// MarkFailed records a failed publish; the row stays pending.
func MarkFailed(ctx context.Context, tx pgx.Tx, id int64, cause error) error {
	_, err := tx.Exec(ctx, `UPDATE idem.outbox SET attempts = attempts + 1, last_error = $2 WHERE id = $1`, id, truncate(cause.Error(), 1000))
	return err
}

// PendingOutbox counts unsent events (for metrics and tests).
func PendingOutbox(ctx context.Context, db Querier) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL").Scan(&n)
	return n, err
}
