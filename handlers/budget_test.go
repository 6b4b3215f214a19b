package handlers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/testkit/audittest"
)

// loadSeq handles the event as the consumer does for message seq with a
// budget of max attempts.
func (e *env) loadSeq(partition, runID string, seq uint64, max int) (handlers.Outcome, error) {
	body, err := schemas.PartitionReady{Dataset: "ds", Partition: partition, RunID: runID}.Marshal()
	require.NoError(e.t, err)
	return e.h.HandleMessage(context.Background(), "idem.ready.ds", body, handlers.Meta{StreamSeq: seq, MaxAttempts: max})
}

// failLoads makes every load of the dataset fail with SQLSTATE code until
// undone, through the gate function every source calls.
func (e *env) failLoads(code string) {
	e.t.Helper()
	e.db.Exec(e.t, `CREATE OR REPLACE FUNCTION staging.gate() RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '`+code+`'; END $$`)
}

func TestBudgetCountsLoadsThatRan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	e.stage("2026-11-28", 1, 10, 1, 1)
	e.failLoads("40001") // serialization failure: transient

	for want := 1; want <= 3; want++ {
		_, err := e.loadSeq("2026-11-28", "r1", 7, 3)
		var a *handlers.AttemptError
		require.ErrorAs(t, err, &a)
		require.Equal(t, want, a.Attempt(), "the handler numbers the attempts that ran")
		require.False(t, handlers.IsFatal(err))
		require.False(t, handlers.IsUnavailable(err))
	}
	_, err := e.loadSeq("2026-11-28", "r1", 7, 3)
	var spent *handlers.BudgetSpentError
	require.ErrorAs(t, err, &spent, "a fourth delivery runs nothing")
	require.Equal(t, 3, spent.Attempt())
	require.False(t, spent.Crashed(), "the last attempt failed, it did not die")
	require.EqualValues(t, 3, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"), "no row for a delivery that ran nothing")
	require.EqualValues(t, 3, e.db.Int(t, "SELECT max(attempt) FROM idem.pipeline_audit"))

	// Another message of the same run (a replay from the dead-letter stream
	// is a new message) has a budget of its own.
	_, err = e.loadSeq("2026-11-28", "r1", 8, 3)
	var a *handlers.AttemptError
	require.ErrorAs(t, err, &a)
	require.Equal(t, 1, a.Attempt())
}

func TestBudgetSeesAttemptsThatDied(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	e.stage("2026-11-28", 1, 10, 1, 1)
	ctx := context.Background()
	day, err := time.Parse(time.DateOnly, "2026-11-28")
	require.NoError(t, err)
	attempt := func(seq uint64) int64 {
		id, err := audittest.Start(ctx, e.db.Pool, audit.Attempt{
			RunKey:      audit.RunKey{Pipeline: "test", Dataset: "ds", Partition: "2026-11-28", RunID: "r1"},
			LogicalDate: &day, StreamSeq: seq,
		})
		require.NoError(t, err)
		return id
	}
	// Two attempts whose process died in the load: their rows stay `started`.
	attempt(5)
	attempt(5)
	// Rows that never count: another message, a skip, the warehouse going
	// away, a shutdown.
	attempt(4)
	require.NoError(t, audit.Skip(ctx, e.db.Pool, attempt(5)))
	require.NoError(t, audit.Fail(ctx, e.db.Pool, attempt(5), errors.New("read-only"), audit.KindUnavailable))
	require.NoError(t, audit.Fail(ctx, e.db.Pool, attempt(5), errors.New("shutdown"), audit.KindInterrupted))
	require.EqualValues(t, 6, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"))

	_, err = e.loadSeq("2026-11-28", "r1", 5, 2)
	var spent *handlers.BudgetSpentError
	require.ErrorAs(t, err, &spent)
	require.Equal(t, 2, spent.Attempt())
	require.True(t, spent.Crashed(), "the last attempt died: the consumer dead-letters it as crashed")

	out, err := e.loadSeq("2026-11-28", "r1", 5, 3)
	require.NoError(t, err, "a third attempt is within a budget of three")
	require.Equal(t, "success", out.Status)
	require.EqualValues(t, 3, e.db.Int(t, "SELECT attempt FROM idem.pipeline_audit WHERE status = 'success'"))
}

func TestWarehouseErrorsAreUnavailableAndNotCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	e.stage("2026-11-28", 1, 10, 1, 1)
	e.failLoads("25006") // read-only after a failover, met inside the load
	for range 3 {
		_, err := e.loadSeq("2026-11-28", "r1", 9, 1)
		require.True(t, handlers.IsUnavailable(err), "%v", err)
		require.False(t, handlers.IsFatal(err))
	}
	require.EqualValues(t, 3, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE error_kind = 'unavailable'"))
	e.db.Exec(t, "CREATE OR REPLACE FUNCTION staging.gate() RETURNS boolean LANGUAGE sql AS 'SELECT true'")
	out, err := e.loadSeq("2026-11-28", "r1", 9, 1)
	require.NoError(t, err, "a budget of one attempt is still whole")
	require.Equal(t, "success", out.Status)
}
