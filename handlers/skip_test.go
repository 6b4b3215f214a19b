package handlers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/schemas"
)

// TestSkipDoneRecordsOnlyDoneRuns: asked about a batch, SkipDone skips the
// runs already loaded (a replay with new sequences, a forced event's own
// message delivered again), each with its `skipped` row and its result,
// and leaves the others untouched for their loads: a new run, a forced
// event not yet loaded, a dataset this replica does not know.
func TestSkipDoneRecordsOnlyDoneRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, fixtures[0])
	e.h.Results = true
	parts := []string{"2026-11-01", "2026-11-02"}
	for i, p := range parts {
		e.stage(p, (i+1)*100, 10, i, 1)
	}
	evs, ms := groupEvents(t, e, "r1", 1, parts...)
	loadGroup(t, e, evs, ms, 10)
	forced, fms := groupEvents(t, e, "r2", 5, parts[1])
	forced[0].Force = true
	out, err := e.h.Handle(ctx, forced[0], fms[0])
	require.NoError(t, err)
	require.Equal(t, "success", out.Status)
	before := e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit")

	replay, rms := groupEvents(t, e, "r1", 10, parts...) // done: skipped
	fresh, xms := groupEvents(t, e, "r3", 20, parts[0])  // a new run: left
	forcedNew, nms := groupEvents(t, e, "r4", 30, parts[0])
	forcedNew[0].Force = true // forced, never loaded: left
	unknown := schemas.Event{PartitionReady: schemas.PartitionReady{Dataset: "nope", Partition: parts[0], RunID: "r1"}}
	batch := []schemas.Event{replay[0], fresh[0], forced[0], forcedNew[0], unknown, replay[1]}
	metas := []handlers.Meta{rms[0], xms[0], fms[0], nms[0], {StreamSeq: 40}, rms[1]}

	skips := e.h.SkipDone(ctx, batch, metas)
	require.Len(t, skips, len(batch))
	require.Positive(t, skips[0], "a replay of a loaded run")
	require.Zero(t, skips[1], "a new run loads")
	require.Positive(t, skips[2], "a forced event's own message, loaded, delivered again")
	require.Zero(t, skips[3], "a forced event not yet loaded")
	require.Zero(t, skips[4], "an unknown dataset is the load's to refuse")
	require.Positive(t, skips[5])
	require.EqualValues(t, before+3, e.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit"), "one row per skip, none for the others")
	require.EqualValues(t, 3, e.auditCount("skipped"))
	require.EqualValues(t, 3, e.db.Int(t, `SELECT count(*) FROM idem.outbox o JOIN idem.pipeline_audit a ON a.id = o.audit_id
		WHERE a.status = 'skipped' AND o.result ->> 'status' = 'skipped' AND o.xmin = a.xmin`), "each skip's result, committed with it")
	require.EqualValues(t, 3, e.db.Int(t, "SELECT count(*) FROM idem.run_ledger"), "the ledger unchanged")

	// Asked again (the acks were lost): skipped again, as Handle would.
	again := e.h.SkipDone(ctx, batch[:1], metas[:1])
	require.Positive(t, again[0])
	require.EqualValues(t, 4, e.auditCount("skipped"))
}
