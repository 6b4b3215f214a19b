package localpg

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Two failovers in a row on the same two places, as the chaos campaign
// does them: the primary killed, its standby promoted, and the dead
// primary's port and data directory made the new primary's standby, which
// streams what the new primary writes and is promoted in turn.
func TestFailoverTwiceOnTheSamePorts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx := context.Background()
	a, err := Start(ctx, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	sqlExec(t, a, "CREATE TABLE t (n int)")
	began := time.Now()
	b, err := a.Standby(ctx, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	t.Logf("standby made in %s", time.Since(began).Round(time.Millisecond))

	primary, standby := a, b
	for round := 1; round <= 2; round++ {
		sqlExec(t, primary, "INSERT INTO t VALUES ($1)", round)
		require.Eventually(t, func() bool { return count(t, standby) == round }, 30*time.Second, 20*time.Millisecond,
			"round %d: the standby did not receive the row", round)
		require.False(t, writable(t, standby))

		began = time.Now()
		require.NoError(t, primary.Kill())
		require.False(t, primary.Running(), "killed")
		require.NoError(t, standby.Promote(ctx))
		promoted := time.Since(began)
		require.True(t, writable(t, standby))
		began = time.Now()
		require.NoError(t, primary.Follow(ctx, standby))
		t.Logf("round %d: killed and promoted in %s, new standby in %s", round, promoted.Round(time.Millisecond),
			time.Since(began).Round(time.Millisecond))
		require.True(t, primary.Running())
		require.False(t, writable(t, primary), "the old primary's place holds a standby")
		require.Error(t, standby.Follow(ctx, primary), "a running server is not replaced")
		primary, standby = standby, primary
	}
	require.Same(t, a, primary, "two failovers bring the first place back to primary")
	require.Equal(t, 2, count(t, primary))
}

func sqlExec(t *testing.T, s *Server, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.URL(""))
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql, args...)
	require.NoError(t, err)
}

func count(t *testing.T, s *Server) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.URL(""))
	require.NoError(t, err)
	defer c.Close(ctx)
	var n int
	require.NoError(t, c.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n))
	return n
}

func writable(t *testing.T, s *Server) bool {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.URL(""))
	require.NoError(t, err)
	defer c.Close(ctx)
	var ro string
	require.NoError(t, c.QueryRow(ctx, "SHOW transaction_read_only").Scan(&ro))
	return ro == "off"
}

// A copied cluster works as one initdb made, keeps its own writes, and
// shares its system identifier with every other copy: why Copy is for a
// test binary's shared cluster only.
func TestCopiedClustersAreIndependentButShareTheirIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx := context.Background()
	start := func(fromPristine bool) *Server {
		s, err := Start(ctx, Options{Copy: fromPristine})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b, fresh := start(true), start(true), start(false)
	sqlExec(t, a, "CREATE TABLE t (n int)")
	sqlExec(t, a, "INSERT INTO t VALUES (1)")
	require.Equal(t, 1, count(t, a))
	require.False(t, hasTable(t, b), "a copy never sees another copy's writes")
	require.Equal(t, systemID(t, a), systemID(t, b), "copies share the pristine cluster's identity")
	require.NotEqual(t, systemID(t, a), systemID(t, fresh), "initdb gives a cluster its own")
}

func systemID(t *testing.T, s *Server) string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.URL(""))
	require.NoError(t, err)
	defer c.Close(ctx)
	var id string
	require.NoError(t, c.QueryRow(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&id))
	return id
}

func hasTable(t *testing.T, s *Server) bool {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.URL(""))
	require.NoError(t, err)
	defer c.Close(ctx)
	var ok bool
	require.NoError(t, c.QueryRow(ctx, "SELECT to_regclass('public.t') IS NOT NULL").Scan(&ok))
	return ok
}

// takenFirstDraw makes the next port drawn one that a listener of the
// test holds until it ends, and the draws after it free ones; draws counts
// them.
func takenFirstDraw(t *testing.T) (port int, draws *int) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })
	port = taken.Addr().(*net.TCPAddr).Port
	return port, drawFirst(t, port)
}

// drawFirst makes the next port drawn port, and those after it free ones;
// it counts the draws.
func drawFirst(t *testing.T, port int) (draws *int) {
	draws = new(int)
	freePort = func() (int, error) {
		*draws++
		if *draws == 1 {
			return port, nil
		}
		return FreePort()
	}
	t.Cleanup(func() { freePort = FreePort })
	return draws
}

// A port Start drew can be taken before the server binds it (another test
// binary starting its own server at that moment): Start moves to another
// free port. A port its caller named is never changed.
func TestStartMovesOffAPortTakenAfterItWasDrawn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx := context.Background()
	port, draws := takenFirstDraw(t)
	s, err := Start(ctx, Options{Copy: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NotEqual(t, port, s.Port)
	require.Equal(t, 2, *draws, "one port taken, one more drawn")
	sqlExec(t, s, "SELECT 1")

	_, err = Start(ctx, Options{Port: port, Copy: true})
	require.ErrorContains(t, err, "Address already in use", "a named port is not changed")
}

// The same for pgbouncer: a drawn port taken before pgbouncer binds it
// (by another test's server starting at that moment) moves it to another.
func TestPgBouncerMovesOffAPortTakenAfterItWasDrawn(t *testing.T) {
	ctx := context.Background()
	s := serverForBouncer(t)

	port, draws := takenFirstDraw(t)
	b, err := StartPgBouncer(ctx, s.URL("postgres"), PoolTransaction, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NotEqual(t, port, b.Port)
	require.Equal(t, 2, *draws, "one port taken, one more drawn")
	require.NoError(t, ping(ctx, b.URL("postgres")))
}

// Another pgbouncer already on the port drawn answers the readiness query
// too: pgbouncer is ready only once its own log says it listens on its
// port, and one that could not bind moves to another.
func TestPgBouncerIsNotFooledByAnotherOnItsPort(t *testing.T) {
	ctx := context.Background()
	s := serverForBouncer(t)
	first, err := StartPgBouncer(ctx, s.URL("postgres"), PoolSession, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Close() })

	draws := drawFirst(t, first.Port)
	b, err := StartPgBouncer(ctx, s.URL("postgres"), PoolTransaction, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NotEqual(t, first.Port, b.Port, "it moved off the port the other holds")
	require.Equal(t, 2, *draws)
	require.NotZero(t, b.Pid(), "and runs")
	require.Contains(t, b.Log(), fmt.Sprintf("listening on 127.0.0.1:%d", b.Port))
}

// serverForBouncer is a server for a pgbouncer test; it skips the test in
// -short and without pgbouncer.
func serverForBouncer(t *testing.T) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL and pgbouncer")
	}
	if _, err := PgBouncerVersion(); err != nil {
		t.Skipf("no pgbouncer: %v", err)
	}
	s, err := Start(context.Background(), Options{Copy: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A server killed while clients connect and run queries leaves no process
// attached to its shared memory, so a new one can start on its data
// directory. Before the postmaster was stopped ahead of the list of
// its children, a backend forked while the list was read outlived the kill,
// and the next start failed ("pre-existing shared memory block is still in
// use") until it ended.
func TestKillLeavesNothingAttached(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx := context.Background()
	s, err := Start(ctx, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	for round := range 3 {
		key := s.shmKey()
		require.NotEmpty(t, key, "postmaster.pid names a shared memory key")
		c, err := pgx.Connect(ctx, s.URL(""))
		require.NoError(t, err)
		var backend int
		require.NoError(t, c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend))
		require.Contains(t, attachedTo(key), backend, "a backend maps the server's segment")

		// Clients that connect and run a query in a loop keep the
		// postmaster forking while it is killed.
		stop := make(chan struct{})
		done := make(chan struct{})
		for range 6 {
			go func() {
				defer func() { done <- struct{}{} }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					if conn, err := pgx.Connect(cctx, s.URL("")); err == nil {
						_, _ = conn.Exec(cctx, "SELECT count(*) FROM generate_series(1, 200000)")
						_ = conn.Close(cctx)
					}
					cancel()
				}
			}()
		}
		time.Sleep(300 * time.Millisecond)
		pid, err := s.postmaster()
		require.NoError(t, err)
		segments := dsmSegments([]int{pid})
		require.NotEmpty(t, segments, "the postmaster maps its dynamic shared memory control segment")
		require.NoError(t, s.Kill())
		require.Empty(t, attachedTo(key), "round %d: a process of the killed server still maps its memory", round)
		for _, f := range segments {
			require.NoFileExists(t, f, "round %d: the killed server's dynamic shared memory is left in /dev/shm", round)
		}
		close(stop)
		for range 6 {
			<-done
		}
		_ = c.Close(ctx)
		require.NoError(t, s.StartAfterKill(ctx), "round %d: start after the kill", round)
	}
}
