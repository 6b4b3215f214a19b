package handlers

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// connTx is the load's transaction on a connection whose BEGIN was sent in
// a pipelined batch, ahead of the statements that follow it, instead of in
// a round trip of its own (pgx.Conn.Begin waits for it). Strategies see an
// ordinary pgx.Tx; only the handler ends it, by queueing COMMIT with its
// last batch or by rollback.
type connTx struct {
	c     *pgx.Conn
	depth int // savepoint depth; 0 is the transaction itself
	done  bool
}

var _ pgx.Tx = (*connTx)(nil)

func (t *connTx) Begin(ctx context.Context) (pgx.Tx, error) {
	sp := &connTx{c: t.c, depth: t.depth + 1}
	if _, err := t.c.Exec(ctx, "SAVEPOINT "+sp.savepoint()); err != nil {
		return nil, err
	}
	return sp, nil
}

func (t *connTx) savepoint() string { return fmt.Sprintf("idem_sp_%d", t.depth) }

// errOuterCommit: the handler commits the load's transaction, in its last batch.
var errOuterCommit = errors.New("handlers: the load's transaction is committed by the handler")

func (t *connTx) Commit(ctx context.Context) error {
	if t.depth == 0 {
		return errOuterCommit
	}
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	_, err := t.c.Exec(ctx, "RELEASE SAVEPOINT "+t.savepoint())
	return err
}

func (t *connTx) Rollback(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	if t.depth == 0 {
		_, err := t.c.Exec(ctx, "ROLLBACK")
		return err
	}
	_, err := t.c.Exec(ctx, "ROLLBACK TO SAVEPOINT "+t.savepoint())
	return err
}

func (t *connTx) CopyFrom(ctx context.Context, id pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return t.c.CopyFrom(ctx, id, cols, src)
}

func (t *connTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.c.SendBatch(ctx, b)
}

func (t *connTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *connTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.c.Prepare(ctx, name, sql)
}

func (t *connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.c.Exec(ctx, sql, args...)
}

func (t *connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.c.Query(ctx, sql, args...)
}

func (t *connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.c.QueryRow(ctx, sql, args...)
}

func (t *connTx) Conn() *pgx.Conn { return t.c }
