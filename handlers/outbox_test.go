package handlers_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/strategies"
)

func TestDownstreamEventsAreQueuedInTheLoadTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("delete_insert"))
	e.ds.Then = []string{"daily", "weekly"}
	woken := 0
	e.h.Enqueued = func() { woken++ }
	e.stage("2026-11-28", 1, 5, 0, 1)

	e.mustLoad("2026-11-28", "r1", false)
	require.Equal(t, 1, woken)
	require.EqualValues(t, 2, e.db.Int(t, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL"))
	// Forced, so it brings the downstream up to date even for a run_id it
	// already loaded; its message id names the upstream attempt.
	require.EqualValues(t, 1, e.db.Int(t, `SELECT count(*) FROM idem.outbox o JOIN idem.pipeline_audit a ON a.id = o.audit_id
		WHERE o.dataset = 'daily' AND o.partition_key = '2026-11-28' AND o.run_id = 'r1' AND o.force AND a.status = 'success'
		  AND o.attributes = '{"triggered_by":"ds:2026-11-28:r1"}'::jsonb`))

	// A redelivery does no work and queues nothing.
	e.mustLoad("2026-11-28", "r1", false)
	require.EqualValues(t, 2, e.db.Int(t, "SELECT count(*) FROM idem.outbox"))
	require.Equal(t, 1, woken)

	// A failed load queues nothing: the outbox rows roll back with it.
	e.db.Exec(t, "DELETE FROM staging.src")
	_, err := e.load("2026-11-28", "r2", false)
	require.ErrorIs(t, err, strategies.ErrEmptySource)
	require.EqualValues(t, 2, e.db.Int(t, "SELECT count(*) FROM idem.outbox"))

	// A forced rerun of the same run is a new upstream commit: new events,
	// with message ids of their own, or JetStream's duplicate window would
	// swallow the downstream rerun.
	e.stage("2026-11-28", 1, 5, 1, 2)
	e.mustLoad("2026-11-28", "r1", true)
	require.EqualValues(t, 4, e.db.Int(t, "SELECT count(*) FROM idem.outbox"))
	require.EqualValues(t, 2, e.db.Int(t, `SELECT count(*) FROM idem.outbox o JOIN idem.pipeline_audit a ON a.id = o.audit_id
		WHERE o.partition_key = '2026-11-28' AND o.run_id = 'r1' AND a.force AND o.force`))
	require.EqualValues(t, 4, e.db.Int(t, "SELECT count(DISTINCT (audit_id, dataset)) FROM idem.outbox"))
}

func TestTriggeredByIsRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fixtureNamed("merge"))
	e.stage("2026-11-28", 1, 3, 0, 1)
	body := `{"dataset":"ds","partition":"2026-11-28","run_id":"r1","attributes":{"triggered_by":"orders:2026-11-28:r1","team":"finance"}}`
	_, err := e.h.HandleMessage(t.Context(), "idem.ready.ds", []byte(body), handlersMeta())
	require.NoError(t, err)
	require.EqualValues(t, 1, e.db.Int(t, `SELECT count(*) FROM idem.pipeline_audit
		WHERE triggered_by = 'orders:2026-11-28:r1' AND attributes ->> 'team' = 'finance' AND status = $1`, audit.StatusSuccess))
	require.EqualValues(t, 1, e.db.Int(t, "SELECT count(*) FROM idem.partition_status WHERE triggered_by = 'orders:2026-11-28:r1'"))
}
