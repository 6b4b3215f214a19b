package handlers_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/schemas"
)

// groupEvents decodes events of dataset ds, one per partition, run runID,
// with their stream sequences from seq.
func groupEvents(t *testing.T, e *env, runID string, seq uint64, parts ...string) ([]schemas.Event, []handlers.Meta) {
	t.Helper()
	var evs []schemas.Event
	var ms []handlers.Meta
	for i, p := range parts {
		body, err := schemas.PartitionReady{Dataset: "ds", Partition: p, RunID: runID}.Marshal()
		require.NoError(t, err)
		ev, err := schemas.Decode("idem.ready.ds", body, e.h.Lookup)
		require.NoError(t, err)
		evs = append(evs, ev)
		ms = append(ms, handlers.Meta{StreamSeq: seq + uint64(i), MaxAttempts: 3})
	}
	return evs, ms
}

// loadGroup loads evs as one group and requires every event to succeed
// with rows inserted, each with its own audit row.
func loadGroup(t *testing.T, e *env, evs []schemas.Event, ms []handlers.Meta, rows int64) []handlers.Outcome {
	t.Helper()
	outs, errs := e.h.HandleGroup(context.Background(), evs, ms)
	for i := range evs {
		require.NoError(t, errs[i], evs[i].Key.Key)
		require.Equal(t, audit.StatusSuccess, outs[i].Status)
		require.EqualValues(t, rows, outs[i].Rows.Inserted)
		require.NotZero(t, outs[i].AuditID)
	}
	return outs
}

// TestGroupLoadsEachEventOnce: a group of five loads every partition in one
// transaction, each event with its own audit row, ledger entry and outcome.
func TestGroupLoadsEachEventOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	parts := []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05"}
	for i, p := range parts {
		e.stage(p, (i+1)*100, 10, i, 1)
	}
	require.Equal(t, handlers.DefaultMaxGroup, e.h.GroupSize(schemas.Event{PartitionReady: schemas.PartitionReady{Dataset: "ds"}}))
	evs, ms := groupEvents(t, e, "r1", 1, parts...)
	loadGroup(t, e, evs, ms, 10)
	require.Equal(t, e.expected(parts...), e.visible())
	require.EqualValues(t, 5, e.auditCount("success"))
	require.EqualValues(t, 5, e.db.Int(t, "SELECT count(*) FROM idem.run_ledger"))
	// One transaction: every success row was written by the same one.
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(DISTINCT xmin::text) FROM idem.pipeline_audit WHERE status = 'success'"))

	// The same group again, the runs loaded: every event skipped.
	outs, errs := e.h.HandleGroup(context.Background(), evs, ms)
	for i := range parts {
		require.NoError(t, errs[i])
		require.Equal(t, audit.StatusSkipped, outs[i].Status)
	}
	require.EqualValues(t, 5, e.auditCount("success"))
}

// TestGroupFailingPartitionFailsAlone: one partition of the group has no
// staging rows (fatal), one is locked by another load, one's run already
// loaded: the group rolls back and falls back; the good events load once,
// the empty one fails alone on its first attempt, the locked one waits
// for the lock and loads, the loaded run is skipped.
func TestGroupFailingPartitionFailsAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	parts := []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05", "2026-11-06"}
	for i, p := range parts {
		if p != "2026-11-03" { // empty
			e.stage(p, (i+1)*100, 10, i, 1)
		}
	}
	e.mustLoad("2026-11-05", "r1", false) // that run already loaded 11-05

	// Another load holds 11-04's lock for a while.
	ctx := context.Background()
	conn, err := e.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, audit.LockSQL, audit.PartitionLockKey("test", "ds", "2026-11-04"))
	require.NoError(t, err)
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(500 * time.Millisecond)
		_ = tx.Rollback(ctx)
		conn.Release()
	}()
	defer func() { <-released }()

	var logs strings.Builder
	e.h.Log = zerolog.New(&syncWriter{w: &logs})
	evs, ms := groupEvents(t, e, "r1", 10, parts...)
	outs, errs := e.h.HandleGroup(ctx, evs, ms)
	require.Contains(t, logs.String(), "group load rolled back", "the empty partition failed the group")
	for i, p := range parts {
		switch p {
		case "2026-11-03":
			require.True(t, handlers.IsFatal(errs[i]), "%v", errs[i])
			var ae *handlers.AttemptError
			require.True(t, errors.As(errs[i], &ae))
			require.Equal(t, 1, ae.N, "the empty partition's attempt is counted once")
		case "2026-11-05":
			require.NoError(t, errs[i])
			require.Equal(t, audit.StatusSkipped, outs[i].Status)
		default:
			require.NoError(t, errs[i], p)
			require.Equal(t, audit.StatusSuccess, outs[i].Status, p)
		}
	}
	require.Equal(t, e.expected("2026-11-01", "2026-11-02", "2026-11-04", "2026-11-05", "2026-11-06"), e.visible())
	require.EqualValues(t, 5, e.db.Int(t, "SELECT count(*) FROM idem.run_ledger"))
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = '2026-11-03'"),
		"one attempt for the empty partition: its `started` row was reused alone")
	require.EqualValues(t, 0, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'started'"))
	for _, p := range []string{"2026-11-01", "2026-11-02", "2026-11-04", "2026-11-06"} {
		require.EqualValues(t, 1, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = $1 AND status = 'success'", p), p)
		require.EqualValues(t, 1, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = $1", p), "%s: one attempt", p)
	}
}

// TestGroupSizeOne: a strategy that cannot group, or MaxGroup 1.
func TestGroupSize(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[2]) // merge
	require.Equal(t, 1, e.h.GroupSize(schemas.Event{PartitionReady: schemas.PartitionReady{Dataset: "ds"}}))
	e = newEnv(t, fixtures[0])
	e.h.MaxGroup = 1
	require.Equal(t, 1, e.h.GroupSize(schemas.Event{PartitionReady: schemas.PartitionReady{Dataset: "ds"}}))
	e.h.MaxGroup = 32
	require.Equal(t, 32, e.h.GroupSize(schemas.Event{PartitionReady: schemas.PartitionReady{Dataset: "ds"}}))
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestGroupKilledMidLoad: the group's backend is killed while its loads
// run: nothing of the group commits, and every event then loads alone,
// once, on the attempt the group counted.
func TestGroupKilledMidLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	parts := []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"}
	for i, p := range parts {
		e.stage(p, (i+1)*100, 10, i, 1)
	}
	e.db.Exec(t, "INSERT INTO staging.gate_on VALUES (5000)")
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var pid int64
		require.Eventually(t, func() bool {
			return e.db.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`).Scan(&pid) == nil
		}, 10*time.Second, 10*time.Millisecond)
		e.db.Exec(t, "DELETE FROM staging.gate_on")
		e.db.Exec(t, "SELECT pg_terminate_backend($1)", pid)
	}()
	evs, ms := groupEvents(t, e, "k1", 1, parts...)
	outs, errs := e.h.HandleGroup(ctx, evs, ms)
	<-done
	for i, p := range parts {
		require.NoError(t, errs[i], p)
		require.Equal(t, audit.StatusSuccess, outs[i].Status, p)
	}
	require.Equal(t, e.expected(parts...), e.visible())
	require.EqualValues(t, 4, e.auditCount("success"))
	require.EqualValues(t, 4, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"), "one attempt each: the group's")
}

// TestGroupResults: with results on, a group's loads write one result
// each, set-based with their successes; the same events again are skipped
// by the audit statement, which writes each skip's result in the same
// statement (the same transaction as the skipped row), naming the load.
func TestGroupResults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	e.h.Results = true
	parts := []string{"2026-11-01", "2026-11-02", "2026-11-03"}
	for i, p := range parts {
		e.stage(p, (i+1)*100, 10, i, 1)
	}
	evs, ms := groupEvents(t, e, "r1", 1, parts...)
	for i := range ms {
		ms[i].Stream = "IDEM_EVENTS"
	}
	outs := loadGroup(t, e, evs, ms, 10)
	loaded := map[string]int64{}
	for i, p := range parts {
		loaded[p] = outs[i].AuditID
	}
	type res struct {
		status, part    string
		audit, loadedBy int64
		inserted        int64
		sameTx          bool
	}
	read := func(status string) map[string]res {
		rows, err := e.db.Pool.Query(context.Background(), `
			SELECT o.result ->> 'status', o.partition_key, (o.result ->> 'audit_id')::bigint,
			       coalesce((o.result ->> 'loaded_by_audit_id')::bigint, 0), (o.result -> 'rows' ->> 'inserted')::bigint,
			       o.xmin = a.xmin
			  FROM idem.outbox o JOIN idem.pipeline_audit a ON a.id = o.audit_id
			 WHERE o.result IS NOT NULL AND o.result ->> 'status' = $1`, status)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]res{}
		for rows.Next() {
			var r res
			require.NoError(t, rows.Scan(&r.status, &r.part, &r.audit, &r.loadedBy, &r.inserted, &r.sameTx))
			out[r.part] = r
		}
		require.NoError(t, rows.Err())
		return out
	}
	got := read("loaded")
	require.Len(t, got, 3)
	for _, p := range parts {
		require.Equal(t, loaded[p], got[p].audit, p)
		require.EqualValues(t, 10, got[p].inserted, p)
		require.True(t, got[p].sameTx, "a load's result commits with it")
	}

	// Delivered again (a replay, new stream sequences): skipped before the
	// load, each skip's result written by its audit statement.
	evs, ms = groupEvents(t, e, "r1", 10, parts...)
	for i := range ms {
		ms[i].Stream = "IDEM_EVENTS"
	}
	outs, errs := e.h.HandleGroup(context.Background(), evs, ms)
	for i := range parts {
		require.NoError(t, errs[i])
		require.Equal(t, audit.StatusSkipped, outs[i].Status)
	}
	got = read("skipped")
	require.Len(t, got, 3)
	for i, p := range parts {
		require.Equal(t, outs[i].AuditID, got[p].audit, p)
		require.Equal(t, loaded[p], got[p].loadedBy, "the skip names the run's load")
		require.EqualValues(t, 10, got[p].inserted, "with the load's rows")
		require.True(t, got[p].sameTx, "the skip and its result commit together")
	}

	// One event alone, the same way.
	evs, ms = groupEvents(t, e, "r1", 20, parts[0])
	ms[0].Stream = "IDEM_EVENTS"
	out, err := e.h.Handle(context.Background(), evs[0], ms[0])
	require.NoError(t, err)
	require.Equal(t, audit.StatusSkipped, out.Status)
	require.EqualValues(t, 1, e.db.Int(t, `SELECT count(*) FROM idem.outbox o JOIN idem.pipeline_audit a ON a.id = o.audit_id
		WHERE o.audit_id = $1 AND o.xmin = a.xmin AND (o.result ->> 'loaded_by_audit_id')::bigint = $2`, out.AuditID, loaded[parts[0]]))
}

// TestGroupAppendDedupe: append_dedupe loads group too, each partition
// with its own load_seq, and a second load of the group's runs is skipped.
func TestGroupAppendDedupe(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("append_dedupe"))
	parts := []string{"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"}
	for i, p := range parts {
		e.stage(p, (i+1)*100, 10, i, 1)
	}
	require.Equal(t, handlers.DefaultMaxGroup, e.h.GroupSize(schemas.Event{PartitionReady: schemas.PartitionReady{Dataset: "ds"}}))
	evs, ms := groupEvents(t, e, "r1", 1, parts...)
	loadGroup(t, e, evs, ms, 10)
	require.Equal(t, e.expected(parts...), e.visible())
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(DISTINCT xmin::text) FROM idem.pipeline_audit WHERE status = 'success'"), "one transaction")
	require.EqualValues(t, 4, e.db.Int(t, "SELECT count(DISTINCT load_seq) FROM "+fixtureNamed("append_dedupe").raw), "a load_seq per partition")

	// Staged again, new runs: each partition appended once more, the view
	// shows the latest.
	for i, p := range parts {
		e.stage(p, (i+1)*100, 10, i+7, 1)
	}
	evs, ms = groupEvents(t, e, "r2", 10, parts...)
	loadGroup(t, e, evs, ms, 10)
	require.Equal(t, e.expected(parts...), e.visible())
}

// TestGroupAsksReadyWhenOfEachEvent: a dataset with ready_when is never
// loaded as a group past its readiness check: each event asks it before
// its attempt, so the partition not ready waits (no attempt, no row) while
// the ready ones load.
func TestGroupAsksReadyWhenOfEachEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtures[0])
	parts := []string{"2026-11-01", "2026-11-02", "2026-11-03"}
	for i, p := range parts {
		e.stage(p, (i+1)*100, 10, i, 1)
	}
	e.ds.Ready = &handlers.ReadyWhen{SQL: "SELECT @partition::date <= '2026-11-02'", WaitUpTo: time.Hour}
	evs, ms := groupEvents(t, e, "r1", 1, parts...)
	outs, errs := e.h.HandleGroup(context.Background(), evs, ms)
	for i := range 2 {
		require.NoError(t, errs[i], parts[i])
		require.Equal(t, audit.StatusSuccess, outs[i].Status)
	}
	var wait *handlers.WaitError
	require.True(t, errors.As(errs[2], &wait), "%v", errs[2])
	require.Contains(t, wait.Reason, "ready_when is not true yet")
	require.Zero(t, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = '2026-11-03'"), "a wait is no attempt")
	require.Equal(t, e.expected(parts[:2]...), e.visible())
}
