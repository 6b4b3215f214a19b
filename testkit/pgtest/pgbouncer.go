package pgtest

import (
	"context"
	"testing"

	"github.com/idem-data/idem/internal/localpg"
)

// PgBouncerBin is where Debian's pgbouncer package (make pgbouncer) puts it.
const PgBouncerBin = localpg.PgBouncerBin

// Pool modes of pgbouncer, for StartPgBouncer.
const (
	PoolSession     = localpg.PoolSession
	PoolTransaction = localpg.PoolTransaction
	PoolStatement   = localpg.PoolStatement
)

// PgBouncer is a real pgbouncer process in front of a PostgreSQL server
// (see localpg.PgBouncer).
type PgBouncer = localpg.PgBouncer

// PgBouncerVersion runs pgbouncer --version and returns its first line,
// e.g. "PgBouncer 1.18.0".
func PgBouncerVersion() (string, error) { return localpg.PgBouncerVersion() }

// StartPgBouncer starts pgbouncer in pool mode mode (PoolSession,
// PoolTransaction or PoolStatement) in front of the server serverURL points
// at (pgtest.AdminURL(), or a localpg.Server's URL), and waits until a query
// passes through it. Clients connect as serverURL's user; t's cleanup stops
// it and, when t failed, logs the tail of pgbouncer's log.
func StartPgBouncer(t testing.TB, serverURL, mode string) *PgBouncer {
	t.Helper()
	// Not t.TempDir: its parents are root's and closed to the postgres user.
	b, err := localpg.StartPgBouncer(context.Background(), serverURL, mode, "")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		b.Stop()
		if t.Failed() {
			t.Logf("pgtest: pgbouncer (%s, %s mode, port %d) log tail:\n%s", b.Version, b.Mode, b.Port, b.LogTail(4000))
		}
		_ = b.Close()
	})
	return b
}
