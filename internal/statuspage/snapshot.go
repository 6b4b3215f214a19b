package statuspage

// The API reads the audit (audit.LatestInRange, AttemptsInRange, ChecksOf)
// in one snapshot.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/audit"
)

// snapshot runs fn on one read-only REPEATABLE READ transaction when db can
// open one (a pool can), so its statements see the same audit.
func snapshot(ctx context.Context, db audit.Querier, fn func(audit.Querier) error) error {
	b, ok := db.(interface {
		BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	})
	if !ok {
		return fn(db)
	}
	return pgx.BeginTxFunc(ctx, b, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error { return fn(tx) })
}
