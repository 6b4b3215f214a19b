package chaos

import (
	"context"
	"time"
)

// The pool modes a campaign can put in front of PostgreSQL (Options.PoolMode).
// Statement pooling is not one: idem refuses to start behind it.
const (
	PoolTransaction = "transaction"
	PoolSession     = "session"
)

// Pooler is a connection pooler the caller started in front of the
// campaign's database (Options.Pooler): the replicas connect through URL,
// and pooler_restart stops it and starts it again. The campaign defines it
// so that it need not know how the pooler is run: the test harness hands in
// a real PgBouncer.
type Pooler interface {
	// URL is a connection string to database db through the pooler.
	URL(db string) string
	// Stop ends the pooler: every client and server connection dropped at
	// once. Stopping a stopped pooler does nothing.
	Stop()
	// Restart starts it again (stopping it first if it runs) on the same
	// address, and returns once a query passes through it.
	Restart(ctx context.Context) error
	// Leftovers lists what the clients that have gone left on the pooler's
	// server connections to database db (session advisory locks, settings,
	// prepared statements, temporary tables, LISTEN channels, cursors), and
	// advisory locks held by idle backends, seen through serverURL, a
	// direct connection to the primary. None is the expected answer.
	Leftovers(ctx context.Context, db, serverURL string) ([]string, error)
}

// poolerRestartMaxDown is the longest a pooler_restart keeps the pooler
// down: a pooler restarted by a supervisor or a deploy is back within
// seconds.
const poolerRestartMaxDown = 2 * time.Second

// poolerRestart stops the pooler mid-load, keeps it down for f.Hold and
// starts it again: every client connection of every replica drops at once
// (a load in flight loses its connection: an attempt spent, as with
// pg_immediate), and new ones are refused until the start.
func (n *nemesis) poolerRestart(ctx, heal context.Context, f *fault) error {
	if n.pooler == nil {
		f.Skipped = "no pooler"
		return nil
	}
	n.pooler.Stop()
	down := time.Now()
	sleepCtx(ctx, f.Hold)
	rctx, cancel := context.WithTimeout(heal, time.Minute)
	defer cancel()
	err := n.pooler.Restart(rctx)
	f.Outage = time.Since(down)
	return err
}
