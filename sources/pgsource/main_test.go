package pgsource

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/testkit/pgtest"
)

// The integration tests share one throwaway primary (the source, and the
// warehouse in databases of its own) and, for the tests that need one, a
// streaming standby of it. Both start on first use, so the pure tests run
// without them. The standby cancels a query that holds up replay for more
// than 100ms (hot_standby_feedback off), which makes recovery conflicts
// quick to produce.
var rig struct {
	primaryOnce, standbyOnce sync.Once
	primary, standby         *localpg.Server
	primaryErr, standbyErr   error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if rig.standby != nil {
		_ = rig.standby.Close()
	}
	if rig.primary != nil {
		_ = rig.primary.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "pgsource: goroutines left running after the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// primary starts the shared primary once, with a login role "app" whose
// password is secret (scram over TCP) and which reads everything.
func primary(t *testing.T) *localpg.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	rig.primaryOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := localpg.Start(ctx, localpg.Options{
			Settings: []string{"hot_standby_feedback = off", "max_standby_streaming_delay = 100ms", "autovacuum = off"},
			HBA:      []string{"host all app 127.0.0.1/32 scram-sha-256"},
		})
		if err != nil {
			rig.primaryErr = err
			return
		}
		rig.primary = s
		c, err := pgx.Connect(ctx, s.URL(""))
		if err != nil {
			rig.primaryErr = err
			return
		}
		defer c.Close(ctx)
		_, rig.primaryErr = c.Exec(ctx, "CREATE ROLE app LOGIN PASSWORD '"+secret+"'; GRANT pg_read_all_data TO app")
	})
	require.NoError(t, rig.primaryErr)
	return rig.primary
}

// standby starts the shared streaming standby of the primary once.
func standby(t *testing.T) *localpg.Server {
	t.Helper()
	p := primary(t)
	rig.standbyOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rig.standby, rig.standbyErr = p.Standby(ctx, 0)
	})
	require.NoError(t, rig.standbyErr)
	return rig.standby
}

// appURL is the URL of database db on s as the app role, password and all.
func appURL(s *localpg.Server, db string) string {
	return fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/%s?sslmode=disable", secret, s.Port, db)
}

// newDB makes a database of its own for t on the primary, as its superuser.
func newDB(t *testing.T) *pgtest.DB {
	t.Helper()
	return pgtest.NewDBAt(t, primary(t).URL(""))
}

// alterDB sets database-level defaults, which every new session of db
// starts with, and drops the pool's idle connections so it opens new ones.
func alterDB(t *testing.T, db *pgtest.DB, settings ...string) {
	t.Helper()
	for _, s := range settings {
		db.Exec(t, "ALTER DATABASE "+pgx.Identifier{db.Name}.Sanitize()+" SET "+s)
	}
	db.Pool.Reset()
}

// begin opens the destination transaction of a load, rolled back when t ends.
func begin(t *testing.T, db *pgtest.DB) pgx.Tx {
	t.Helper()
	tx, err := db.Pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// dump is the text of every row of query, one line each, ordered, read with
// the settings Copy pins: equal dumps on two servers mean equal values.
func dump(t *testing.T, q interface {
	Begin(context.Context) (pgx.Tx, error)
}, query string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := q.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, strings.ReplaceAll(beginSQL, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;", ""))
	require.NoError(t, err)
	var s string
	require.NoError(t, tx.QueryRow(ctx, "SELECT coalesce(string_agg(dump_row::text, E'\\n' ORDER BY dump_row::text), '') FROM ("+query+") dump_row").Scan(&s))
	return s
}

// onStandby connects to database db on the standby as its superuser, once
// the standby has replayed its creation.
func onStandby(t *testing.T, db string) *pgxpool.Pool {
	t.Helper()
	st := standby(t)
	var pool *pgxpool.Pool
	require.Eventually(t, func() bool {
		p, err := pgxpool.New(context.Background(), st.URL(db))
		if err != nil {
			return false
		}
		if err := p.Ping(context.Background()); err != nil {
			p.Close()
			return false
		}
		pool = p
		return true
	}, 30*time.Second, 20*time.Millisecond, "the standby never saw database %s", db)
	t.Cleanup(pool.Close)
	return pool
}

// caughtUp waits until the standby has replayed everything the primary has
// written so far.
func caughtUp(t *testing.T, st *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	p, err := pgx.Connect(ctx, primary(t).URL(""))
	require.NoError(t, err)
	defer p.Close(ctx)
	var lsn string
	require.NoError(t, p.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn))
	require.Eventually(t, func() bool {
		var ok bool
		return st.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&ok) == nil && ok
	}, 30*time.Second, 10*time.Millisecond, "the standby did not replay up to %s", lsn)
}
