package handlers_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/testkit/audittest"
)

// warehouseEnv is an env on a PostgreSQL server of the test's own, which
// it may kill and start again, with loads that wait in the gate until
// released so the server can go away under one.
func warehouseEnv(t *testing.T) (*env, *localpg.Server) {
	t.Helper()
	ctx := context.Background()
	srv, err := localpg.Start(ctx, localpg.Options{Copy: true, Durable: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(srv.LogFile)
			t.Logf("the warehouse's log:\n%s", log)
		}
		_ = srv.Close()
	})
	e := newEnvOn(t, audittest.NewDBAt(t, srv.URL("")), fixtures[0])
	e.stage("2026-11-28", 1, 10, 1, 1)
	e.db.Exec(t, "CREATE OR REPLACE FUNCTION staging.gate() RETURNS boolean LANGUAGE sql AS 'SELECT pg_sleep(600) IS NOT NULL'")
	return e, srv
}

// inTheGate waits until the load that reports to done sleeps in the
// gate, and returns its backend's process id.
func inTheGate(t *testing.T, srv *localpg.Server, done <-chan error) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, srv.URL("postgres"))
	require.NoError(t, err)
	defer func() { _ = c.Close(ctx) }()
	for {
		var pid int
		err = c.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE query LIKE '%staging.gate()%' AND wait_event = 'PgSleep'`).Scan(&pid)
		if err == nil {
			return pid
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		select {
		case err := <-done:
			t.Fatalf("the load ended before the gate: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// answering waits until the warehouse takes connections again.
func answering(t *testing.T, srv *localpg.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, srv.URL("postgres"))
		if err == nil {
			_ = c.Close(ctx)
			return
		}
		require.NoError(t, ctx.Err(), "the warehouse did not come back: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
}

// loadUntilBegun is loadSeq again while nothing began: the pool's first
// tries after an outage may meet connections the outage closed.
func (e *env) loadUntilBegun(seq uint64, max int) (handlers.Outcome, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := e.loadSeq("2026-11-28", "r1", seq, max)
		var a *handlers.AttemptError
		if err == nil || !handlers.IsUnavailable(err) || errors.As(err, &a) || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A load the warehouse took away with it (killed under the load, as in a
// crash of the whole site) cannot even be recorded: the message is held
// for the warehouse, not counted, and once the warehouse is back the
// failure is recorded `unavailable`, and the event loads as attempt 1 with
// a budget of one. Decided at once on the attempt's number instead, the
// last allowed attempt cut by a site crash dead-lettered a valid event as
// exhausted.
func TestALoadTheWarehouseTookAwayCostsNoRetry(t *testing.T) {
	t.Parallel()
	e, srv := warehouseEnv(t)
	done := make(chan error, 1)
	go func() {
		_, err := e.loadUntilBegun(7, 1)
		done <- err
	}()
	inTheGate(t, srv, done)
	require.NoError(t, srv.Kill())
	err := <-done
	var a *handlers.AttemptError
	require.ErrorAs(t, err, &a)
	require.Equal(t, 1, a.Attempt())
	require.True(t, handlers.IsUnavailable(err), "held for the warehouse, not counted: %v", err)
	require.False(t, handlers.IsFatal(err))

	require.NoError(t, srv.StartAfterKill(context.Background()))
	answering(t, srv)
	e.db.Exec(t, "CREATE OR REPLACE FUNCTION staging.gate() RETURNS boolean LANGUAGE sql AS 'SELECT true'")
	out, err := e.loadUntilBegun(7, 1)
	require.NoError(t, err, "a budget of one attempt is still whole")
	require.Equal(t, "success", out.Status)
	require.EqualValues(t, 1, e.db.Int(t, "SELECT attempt FROM idem.pipeline_audit WHERE status = 'success'"))
	require.EqualValues(t, 1, e.db.Int(t, `SELECT count(*) FROM idem.pipeline_audit
		WHERE status = 'failed' AND error_kind = 'unavailable' AND error LIKE 'the warehouse restarted under this attempt: %'`),
		"the cut attempt is recorded, as the warehouse's doing")
}

// The crash-loop guard holds: a load whose statement crashes its backend
// while the warehouse lives on (the server recovers without a restart)
// is counted whether its failure is recorded at once or once the server
// is back, and after its budget nothing more runs.
func TestALoadThatCrashesTheServerSpendsItsBudget(t *testing.T) {
	t.Parallel()
	e, srv := warehouseEnv(t)
	for want := 1; want <= 2; want++ {
		done := make(chan error, 1)
		go func() {
			_, err := e.loadUntilBegun(7, 2)
			done <- err
		}()
		pid := inTheGate(t, srv, done)
		// As a statement that crashes its backend would: the server
		// recovers without a restart.
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		err := <-done
		var a *handlers.AttemptError
		require.ErrorAs(t, err, &a)
		require.Equal(t, want, a.Attempt(), "the crashed attempt before it counted")
		answering(t, srv)
	}
	_, err := e.loadUntilBegun(7, 2)
	var spent *handlers.BudgetSpentError
	require.ErrorAs(t, err, &spent, "a third delivery runs nothing")
	require.Equal(t, 2, spent.Attempt())
	require.Zero(t, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE error_kind = 'unavailable'"))
}
