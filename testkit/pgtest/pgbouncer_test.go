package pgtest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/testkit/pgtest"
)

// What pgbouncer 1.18 (Debian 12) was seen to do, with its defaults:
//
//   - The BackendKeyData it hands a client carries a random pid, not the
//     server backend's: PgConn().PID() differs from SELECT pg_backend_pid()
//     in session, transaction and statement mode alike; connected directly
//     they are equal.
//   - A startup parameter it does not track is refused before any server
//     connection: FATAL 08P01 "unsupported startup parameter: jit" (the same
//     for synchronous_commit), in every pool mode.
//   - It tracks exactly application_name, client_encoding, DateStyle,
//     TimeZone and standard_conforming_strings (pgtest.PoolerTrackedSettings)
//     and SETs them on a server connection whose values differ from the
//     client's: they show as source 'session'.
//   - Statement mode: a BEGIN sent on its own is refused with FATAL 08P01
//     "transaction blocks not allowed in statement pooling mode" and the
//     client is disconnected; "BEGIN; SELECT 1; SELECT 2; COMMIT" sent as
//     one simple-protocol message passes (one statement to pgbouncer).
//   - Transaction mode hands out the idle server connection used last
//     (server_round_robin = 0): A's p1 goes to B's transaction, and A's
//     next statement meanwhile gets a new backend.
//   - Transaction mode resets nothing between clients; session mode runs
//     DISCARD ALL (server_reset_query) as soon as a client disconnects.

func connect(t *testing.T, url string, mode pgx.QueryExecMode, params map[string]string) (*pgx.Conn, error) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	c, err := pgx.ConnectConfig(t.Context(), cfg)
	if err == nil {
		t.Cleanup(func() { _ = c.Close(context.Background()) })
	}
	return c, err
}

func mustConnect(t *testing.T, url string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	c, err := connect(t, url, mode, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func backendPID(t *testing.T, c *pgx.Conn) uint32 {
	t.Helper()
	var pid uint32
	if err := c.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func pgCode(err error) (code, msg string) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe.Severity + ": " + pe.Message
	}
	return "", fmt.Sprint(err)
}

var modes = []string{pgtest.PoolSession, pgtest.PoolTransaction, pgtest.PoolStatement}

func TestPgBouncerBackendKeyPIDIsNotTheBackend(t *testing.T) {
	db := pgtest.NewDB(t)
	c := mustConnect(t, db.URL, pgx.QueryExecModeSimpleProtocol)
	if got, want := c.PgConn().PID(), backendPID(t, c); got != want {
		t.Fatalf("direct: BackendKeyData pid %d, pg_backend_pid() %d: want equal", got, want)
	}
	for _, mode := range modes {
		b := pgtest.StartPgBouncer(t, pgtest.AdminURL(), mode)
		c := mustConnect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol)
		if key, pid := c.PgConn().PID(), backendPID(t, c); key == pid {
			t.Errorf("%s mode: BackendKeyData pid %d equals pg_backend_pid(): want pgbouncer's own", mode, key)
		}
	}
}

func TestPgBouncerRefusesUntrackedStartupParameters(t *testing.T) {
	db := pgtest.NewDB(t)
	for _, mode := range modes {
		b := pgtest.StartPgBouncer(t, pgtest.AdminURL(), mode)
		for _, p := range []string{"jit", "synchronous_commit"} {
			_, err := connect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol, map[string]string{p: "off"})
			code, msg := pgCode(err)
			if want := "FATAL: unsupported startup parameter: " + p; code != pgerrcode.ProtocolViolation || msg != want {
				t.Errorf("%s mode, startup %s=off: got %s %q (%v), want 08P01 %q", mode, p, code, msg, err, want)
			}
		}
		tracked := map[string]string{"application_name": "x", "client_encoding": "UTF8", "DateStyle": "ISO, DMY", "TimeZone": "UTC", "standard_conforming_strings": "on"}
		if _, err := connect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol, tracked); err != nil {
			t.Errorf("%s mode, the tracked startup parameters: %v", mode, err)
		}
	}
}

// TestPgBouncerSetsTrackedSettings finds which settings pgbouncer SETs
// itself, as source 'session', when a client's startup values differ from
// those its server connection was opened or last set with.
func TestPgBouncerSetsTrackedSettings(t *testing.T) {
	db := pgtest.NewDB(t)
	b := pgtest.StartPgBouncer(t, pgtest.AdminURL(), pgtest.PoolTransaction)
	a, err := connect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol, map[string]string{
		"application_name": "a", "client_encoding": "UTF8", "DateStyle": "ISO, MDY", "TimeZone": "UTC", "standard_conforming_strings": "on"})
	if err != nil {
		t.Fatal(err)
	}
	backendPID(t, a)
	a.Close(t.Context())
	// Not the simple protocol: pgx refuses it with standard_conforming_strings off.
	c, err := connect(t, b.URL(db.Name), pgx.QueryExecModeExec, map[string]string{
		"application_name": "c", "client_encoding": "LATIN1", "DateStyle": "ISO, DMY", "TimeZone": "Europe/Paris", "standard_conforming_strings": "off"})
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := c.Query(t.Context(), "SELECT name FROM pg_settings WHERE source = 'session' ORDER BY name")
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(pgtest.PoolerTrackedSettings))
	if !slices.Equal(got, want) {
		t.Fatalf("settings pgbouncer SET: %v, want %v", got, want)
	}
}

func TestPgBouncerStatementModeRefusesTransactionBlocks(t *testing.T) {
	db := pgtest.NewDB(t)
	b := pgtest.StartPgBouncer(t, pgtest.AdminURL(), pgtest.PoolStatement)
	c := mustConnect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol)
	_, err := c.Exec(t.Context(), "BEGIN")
	code, msg := pgCode(err)
	if want := "FATAL: transaction blocks not allowed in statement pooling mode"; code != pgerrcode.ProtocolViolation || msg != want {
		t.Fatalf("BEGIN: got %s %q (%v), want 08P01 %q", code, msg, err, want)
	}
	if _, err := c.Exec(t.Context(), "SELECT 1"); err == nil {
		t.Fatal("the connection still runs statements after the FATAL")
	}
	// One simple-protocol message is one statement to pgbouncer.
	c = mustConnect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol)
	if _, err := c.Exec(t.Context(), "BEGIN; SELECT 1; SELECT 2; COMMIT"); err != nil {
		t.Fatalf("a transaction in one message: %v", err)
	}
}

func TestPgBouncerHandsOutTheLastIdleServerConnection(t *testing.T) {
	for _, mode := range []string{pgtest.PoolTransaction, pgtest.PoolSession} {
		db := pgtest.NewDB(t)
		b := pgtest.StartPgBouncer(t, pgtest.AdminURL(), mode)
		a := mustConnect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol)
		other := mustConnect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol)
		p1 := backendPID(t, a)
		if _, err := other.Exec(t.Context(), "BEGIN"); err != nil {
			t.Fatal(err)
		}
		q := backendPID(t, other)
		p2 := backendPID(t, a)
		t.Logf("%s mode: p1 %d, q %d, p2 %d", mode, p1, q, p2)
		switch mode {
		case pgtest.PoolTransaction:
			if q != p1 || p2 == p1 {
				t.Errorf("transaction mode: p1 %d, q %d, p2 %d: want q = p1 (the idle one, last used) and p2 a new backend", p1, q, p2)
			}
		case pgtest.PoolSession:
			if q == p1 || p2 != p1 {
				t.Errorf("session mode: p1 %d, q %d, p2 %d: want A to keep p1 and B a backend of its own", p1, q, p2)
			}
		}
	}
}

// leaveSessionState has clients, one after another, each leave one kind of
// session state behind and disconnect.
func leaveSessionState(t *testing.T, url string) {
	for _, sql := range []string{
		"SET jit = off",
		"SELECT pg_advisory_lock(42)",
		"PREPARE leftover AS SELECT 1",
		"CREATE TEMP TABLE leftover (id int)",
		"LISTEN leftover",
		"DECLARE leftover CURSOR WITH HOLD FOR SELECT 1",
	} {
		c := mustConnect(t, url, pgx.QueryExecModeSimpleProtocol)
		if _, err := c.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if err := c.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSessionLeftoversInTransactionMode(t *testing.T) {
	db := pgtest.NewDB(t)
	b := pgtest.StartPgBouncer(t, pgtest.AdminURL(), pgtest.PoolTransaction)
	clean, err := pgtest.SessionLeftovers(t.Context(), b.URL(db.Name), 3)
	if err != nil || len(clean) > 0 {
		t.Fatalf("a fresh pool: %v %v", clean, err)
	}
	leaveSessionState(t, b.URL(db.Name))
	got, err := pgtest.SessionLeftovers(t.Context(), b.URL(db.Name), 3)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(got, "\n")
	t.Logf("findings:\n%s", text)
	for _, want := range []string{
		"session setting jit = off",
		"advisory lock 42 ExclusiveLock",
		"prepared statement leftover: PREPARE leftover AS SELECT 1",
		"temporary relation leftover (relkind r)",
		"LISTEN channel leftover",
		"cursor leftover: DECLARE leftover CURSOR WITH HOLD FOR SELECT 1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in the findings:\n%s", want, text)
		}
	}
	idle, err := pgtest.IdleAdvisoryLocks(t.Context(), pgtest.AdminURL(), db.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(idle) != 1 || !strings.HasSuffix(idle[0], "(db "+db.Name+"): advisory lock 42 ExclusiveLock") {
		t.Fatalf("idle advisory locks: %q", idle)
	}
}

func TestSessionLeftoversInSessionMode(t *testing.T) {
	db := pgtest.NewDB(t)
	b := pgtest.StartPgBouncer(t, pgtest.AdminURL(), pgtest.PoolSession)
	leaveSessionState(t, b.URL(db.Name))
	// The reset runs as the client goes, not when the next one comes: wait
	// until every server connection of the database has run it.
	admin := mustConnect(t, pgtest.AdminURL(), pgx.QueryExecModeSimpleProtocol)
	for deadline := time.Now().Add(10 * time.Second); ; {
		var pending int
		err := admin.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE query <> 'DISCARD ALL' OR state <> 'idle')
			FROM pg_stat_activity WHERE datname = $1`, db.Name).Scan(&pending)
		if err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d server connections have not run DISCARD ALL", pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := pgtest.SessionLeftovers(t.Context(), b.URL(db.Name), 3)
	if err != nil || len(got) > 0 {
		t.Fatalf("session mode left %q (%v): want DISCARD ALL to have cleared it all", got, err)
	}
	if idle, err := pgtest.IdleAdvisoryLocks(t.Context(), pgtest.AdminURL(), db.Name); err != nil || len(idle) > 0 {
		t.Fatalf("idle advisory locks: %q %v", idle, err)
	}
}

// TestPgBouncerTransactionModeBreaksNamedPreparedStatements: pgx's default
// exec mode names its statements (stmtcache_...) and keeps them per client
// connection; transaction mode gives each transaction whichever server
// connection is free, which knows other clients' statements, or not this
// one's. Made deterministic with two server connections at most and the
// last idle one handed out first.
func TestPgBouncerTransactionModeBreaksNamedPreparedStatements(t *testing.T) {
	for _, mode := range []string{pgtest.PoolTransaction, pgtest.PoolSession} {
		db := pgtest.NewDB(t)
		b := pgtest.StartPgBouncer(t, pgtest.AdminURL(), mode)
		url := b.URL(db.Name)
		query := func(c *pgx.Conn) error {
			var n int
			return c.QueryRow(t.Context(), "SELECT $1::int", 1).Scan(&n)
		}
		a := mustConnect(t, url, pgx.QueryExecModeCacheStatement)
		c := mustConnect(t, url, pgx.QueryExecModeCacheStatement)
		if err := query(a); err != nil {
			t.Fatalf("%s mode, the first client: %v", mode, err)
		}
		// c lands on a's server connection, which has c's statement name.
		errExists := query(c)
		// A holder takes that server connection; a's next one is new and
		// lacks the statement a prepared.
		holder := mustConnect(t, url, pgx.QueryExecModeSimpleProtocol)
		if _, err := holder.Exec(t.Context(), "BEGIN"); err != nil {
			t.Fatal(err)
		}
		errMissing := query(a)
		if mode == pgtest.PoolSession {
			if errExists != nil || errMissing != nil {
				t.Errorf("session mode: %v; %v: want no error", errExists, errMissing)
			}
			continue
		}
		for _, e := range []struct {
			err        error
			code, text string
		}{
			{errExists, pgerrcode.DuplicatePreparedStatement, "already exists"},
			{errMissing, pgerrcode.InvalidSQLStatementName, "does not exist"},
		} {
			code, msg := pgCode(e.err)
			if code != e.code || !strings.Contains(msg, `prepared statement "stmtcache_`) || !strings.HasSuffix(msg, e.text) {
				t.Errorf("transaction mode: got %s %q (%v), want %s prepared statement \"stmtcache_...\" %s", code, msg, e.err, e.code, e.text)
			}
			t.Logf("transaction mode: %s %s", code, msg)
		}
	}
}

func TestPgBouncerRestart(t *testing.T) {
	db := pgtest.NewDB(t)
	b := pgtest.StartPgBouncer(t, pgtest.AdminURL(), pgtest.PoolTransaction)
	port := b.Port
	c := mustConnect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol)
	backendPID(t, c)
	if err := b.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(t.Context(), "SELECT 1"); err == nil {
		t.Fatal("a client connection survived the restart")
	}
	if b.Port != port {
		t.Fatalf("port %d after the restart, was %d", b.Port, port)
	}
	backendPID(t, mustConnect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol))
	if n := strings.Count(b.Log(), "process up: "+b.Version); n != 2 {
		t.Fatalf("%q %d times in the log, want 2:\n%s", "process up", n, b.Log())
	}
	b.Stop()
	if _, err := connect(t, b.URL(db.Name), pgx.QueryExecModeSimpleProtocol, nil); err == nil {
		t.Fatal("connected after Stop")
	}
}
