package handlers

import (
	"context"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Probe tells whether the warehouse can take loads again: it opens a new
// session (a pooled one would hide a rotated password or a server that now
// refuses connections) and checks that a transaction there may write (a
// server demoted by a failover answers read-only). It returns nil, or the
// reason, classified.
func Probe(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return Classify(err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var readOnly string
	if err := conn.QueryRow(ctx, "SELECT current_setting('transaction_read_only')").Scan(&readOnly); err != nil {
		return Classify(err)
	}
	if readOnly == "on" {
		return &UnavailableError{Err: &pgconn.PgError{
			Severity: "ERROR", Code: pgerrcode.ReadOnlySQLTransaction,
			Message: "the server only accepts read-only transactions (a standby, or default_transaction_read_only is on)",
		}}
	}
	return nil
}
