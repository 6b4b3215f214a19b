package audit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// OutboxEvent is a downstream event written in the load's transaction.
type OutboxEvent struct {
	Subject string
	MsgID   string // Nats-Msg-Id
	Body    []byte
	AuditID int64 // the upstream attempt that caused it
}

const enqueueSQL = `
		INSERT INTO idem.outbox (subject, msg_id, body, audit_id) VALUES ($1, $2, $3, $4)
		ON CONFLICT (msg_id) DO NOTHING`

// Enqueue writes e to idem.outbox inside the caller's transaction. An event
// with the same MsgID already queued is left alone: it is the same event.
func Enqueue(ctx context.Context, db Querier, e OutboxEvent) error {
	_, err := db.Exec(ctx, enqueueSQL, e.Subject, e.MsgID, e.Body, e.AuditID)
	if err != nil {
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
