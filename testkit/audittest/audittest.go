// Package audittest writes and reads audit rows for tests through the
// functions production uses (audit.Begin, the Queue* forms sent in a batch),
// so no test holds a second copy of the audit SQL. It must never be imported
// by non-test code.
package audittest

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/audit"
)

// DB is what pgx.Tx, *pgx.Conn, *pgxpool.Conn and *pgxpool.Pool have in
// common: audit's Querier and batches.
type DB interface {
	audit.Querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Send sends what queue puts on a batch and reads every result. The error is
// the first one, including what a callback reports (audit.ErrNotStarted,
// audit.ErrAlreadySucceeded).
func Send(ctx context.Context, db DB, queue func(b *pgx.Batch)) error {
	b := &pgx.Batch{}
	queue(b)
	return db.SendBatch(ctx, b).Close()
}

// Start writes the `started` row of a, as a handler's audit.Begin does with
// no retry budget, and returns its id. A run that already succeeded (without
// force) is an error: Begin then writes a `skipped` row.
func Start(ctx context.Context, db DB, a audit.Attempt) (int64, error) {
	b, err := audit.Begin(ctx, db, a, 0)
	if err != nil {
		return 0, err
	}
	if b.Skipped {
		return 0, fmt.Errorf("audittest: run %+v already succeeded: Begin wrote skipped row %d", a.RunKey, b.ID)
	}
	return b.ID, nil
}

// Succeed finishes started row id of run k as a load's commit does, in one
// batch: the row becomes `success` with rows, and the ledger records the run.
func Succeed(ctx context.Context, db DB, k audit.RunKey, id int64, rows audit.Rows, force bool) error {
	return Send(ctx, db, func(b *pgx.Batch) {
		audit.QueueSucceed(b, id, rows)
		audit.QueueRecordSuccess(b, k, id, force)
	})
}

// Load writes a finished successful attempt of a (Start, then Succeed) and
// returns its audit id.
func Load(ctx context.Context, db DB, a audit.Attempt, rows audit.Rows) (int64, error) {
	id, err := Start(ctx, db, a)
	if err != nil {
		return 0, err
	}
	return id, Succeed(ctx, db, a.RunKey, id, rows, a.Force)
}

// Succeeded reports whether the ledger holds a success for k.
func Succeeded(ctx context.Context, db DB, k audit.RunKey) (bool, error) {
	var done bool
	err := Send(ctx, db, func(b *pgx.Batch) { audit.QueueSucceeded(b, k, &done) })
	return done, err
}
