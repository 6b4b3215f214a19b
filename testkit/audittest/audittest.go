// Package audittest writes and reads audit rows for tests through the
// statements a load sends (audit.QueueBegin, audit.QueueMarkSucceeded,
// audit.QueueLookupRun, sent in a batch), so no test holds a second copy of
// the audit SQL and none needs an export production does not use. It must
// never be imported by non-test code.
package audittest

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/testkit/pgtest"
)

// NewDB is pgtest.NewDB with schema idem at its latest version: a copy of
// a database migrated once per cluster, not migrated again in every test.
func NewDB(t testing.TB) *pgtest.DB {
	t.Helper()
	return pgtest.NewDBFrom(t, "idem-migrated", migrate)
}

// NewDBAt is NewDB on the cluster adminURL points at.
func NewDBAt(t testing.TB, adminURL string) *pgtest.DB {
	t.Helper()
	return pgtest.NewDBAtFrom(t, adminURL, "idem-migrated", migrate)
}

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := audit.Migrate(ctx, pool)
	return err
}

// DB is what pgx.Tx, *pgx.Conn, *pgxpool.Conn and *pgxpool.Pool have in
// common: audit's Querier and batches.
type DB interface {
	audit.Querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Send sends what queue puts on a batch and reads every result. The error is
// the first one, including what a callback reports.
func Send(ctx context.Context, db DB, queue func(b *pgx.Batch)) error {
	b := &pgx.Batch{}
	queue(b)
	return db.SendBatch(ctx, b).Close()
}

// Begin writes the start of attempt a as a handler's first round trip
// does (audit.QueueBegin, without a result), with a budget of loads that
// ran (0: none), and returns what it found and did.
func Begin(ctx context.Context, db DB, a audit.Attempt, budget int) (audit.Begun, error) {
	var (
		b   audit.Begun
		ran bool
	)
	err := Send(ctx, db, func(batch *pgx.Batch) { audit.QueueBegin(batch, a, budget, nil, &b, &ran) })
	return b, err
}

// Start writes the `started` row of a, as Begin does with no retry budget,
// and returns its id. A run that already succeeded (without force) is an
// error: Begin then writes a `skipped` row.
func Start(ctx context.Context, db DB, a audit.Attempt) (int64, error) {
	b, err := Begin(ctx, db, a, 0)
	if err != nil {
		return 0, err
	}
	if b.Skipped {
		return 0, fmt.Errorf("audittest: run %+v already succeeded: Begin wrote skipped row %d", a.RunKey, b.ID)
	}
	return b.ID, nil
}

// Succeed finishes started row id of run k as a load's commit does
// (audit.QueueMarkSucceeded): the row becomes `success` with rows, and the
// ledger records the run, in one statement. Its refusals come back as
// audit.SuccessError maps them (audit.ErrNotStarted,
// audit.ErrAlreadySucceeded).
func Succeed(ctx context.Context, db DB, k audit.RunKey, id int64, rows audit.Rows, force bool) error {
	var err error
	send := Send(ctx, db, func(b *pgx.Batch) {
		err = audit.QueueMarkSucceeded(b, []audit.Success{{RunKey: k, ID: id, Rows: rows, Force: force}})
	})
	if err != nil {
		return err
	}
	return audit.SuccessError(send)
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
	err := Send(ctx, db, func(b *pgx.Batch) { audit.QueueLookupRun(b, k, &done) })
	return done, err
}
