package cli

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/natstest"
)

func TestPublishConfirmsAndReportsDuplicates(t *testing.T) {
	w := newCLIWorld(t)
	r := w.run("publish", "orders", "2026-03-01", "--run-id", "r1")
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "published orders 2026-03-01 run_id=r1 to idem.ready.orders: stream IDEM_EVENTS seq 1")

	r = w.run("publish", "orders", "2026-03-01", "--run-id", "r1")
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "duplicate")
	require.EqualValues(t, 1, w.streamMsgs("IDEM_EVENTS"), "the duplicate was stored")

	r = w.run("publish", "orders", "2026-03-02", "--json")
	require.NoError(t, r.e, r.err)
	var p published
	require.NoError(t, json.Unmarshal([]byte(r.out), &p))
	require.True(t, strings.HasPrefix(p.RunID, "manual__"), p.RunID)
	require.Equal(t, "orders:2026-03-02:"+p.RunID, p.MsgID)
	require.EqualValues(t, 2, p.Seq)

	// Refused before anything is sent, with the field named.
	for _, args := range [][]string{
		{"publish", "orders", "2026-02-30"},
		{"publish", "nope", "2026-03-01"},
		{"publish", "orders", "2026-03-01", "--run-id", "bad\x01id"},
	} {
		r = w.run(args...)
		require.Error(t, r.e, "%v", args)
	}
	require.EqualValues(t, 2, w.streamMsgs("IDEM_EVENTS"))

	var usage *UsageError
	require.True(t, errors.As(w.run("publish", "orders").e, &usage))

	// A full events stream: the publisher is told why, and nothing is stored.
	natstest.FillStream(t, w.js, "IDEM_EVENTS", 0)
	r = w.run("publish", "orders", "2026-03-03")
	require.Error(t, r.e)
	require.False(t, errors.As(r.e, &usage), "not a usage error: exit 1")
	require.Contains(t, r.e.Error(), "stream IDEM_EVENTS refused the event, nothing was published: the stream is full")
	require.EqualValues(t, 2, w.streamMsgs("IDEM_EVENTS"))
}

func TestAuditStatusAndMissing(t *testing.T) {
	w := newCLIWorld(t)
	w.serve()
	for _, p := range []string{"2026-03-01", "2026-03-03"} {
		require.NoError(t, w.run("publish", "orders", p, "--run-id", "r1").e)
	}
	w.db.Exec(t, "DELETE FROM staging.src WHERE event_date = '2026-03-04'")
	require.NoError(t, w.run("publish", "orders", "2026-03-04", "--run-id", "r1").e)
	w.waitCount(2, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'failed'")

	r := w.run("audit", "missing", "orders", "--from", "2026-03-01", "--to", "2026-03-04")
	require.ErrorIs(t, r.e, ErrReported)
	require.Equal(t, "2026-03-02\n2026-03-04\n2 of 4 partition(s) missing for orders from 2026-03-01 to 2026-03-04\n", r.out)

	r = w.run("audit", "missing", "orders", "--from", "2026-03-01", "--to", "2026-03-01")
	require.NoError(t, r.e)

	r = w.run("audit", "missing", "orders", "--from", "2026-03-01", "--to", "2026-03-04", "--json")
	var m struct{ Missing []string }
	require.NoError(t, json.Unmarshal([]byte(r.out), &m))
	require.Equal(t, []string{"2026-03-02", "2026-03-04"}, m.Missing)

	r = w.run("audit", "status", "orders", "--from", "2026-03-01", "--to", "2026-03-04")
	require.ErrorIs(t, r.e, ErrReported)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Len(t, lines, 6)
	require.Regexp(t, `^PARTITION\s+STATUS\s+RUN_ID\s+ROWS\s+ATTEMPTS\s+FINISHED_AT\s+TRIGGERED_BY\s+ERROR$`, lines[0])
	require.Regexp(t, `^2026-03-01\s+success\s+r1\s+10\s+1\s+\S+Z\s+-\s+-$`, lines[1])
	require.Regexp(t, `^2026-03-02\s+missing\s+-\s+-\s+0\s+-\s+-\s+-$`, lines[2])
	require.Regexp(t, `^2026-03-04\s+failed\s+r1\s+-\s+1\s+\S+Z\s+-\s+empty_source: `, lines[4])
	require.Equal(t, "4 partition(s), 2 not loaded", lines[5])

	r = w.run("audit", "status", "orders", "--from", "2026-03-01", "--to", "2026-03-01", "--json")
	require.NoError(t, r.e)
	var st []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &st))
	require.Equal(t, "success", st[0]["status"])

	var usage *UsageError
	for _, args := range [][]string{
		{"audit", "missing", "orders", "--from", "2026-03-04", "--to", "2026-03-01"},
		{"audit", "missing", "orders", "--from", "March", "--to", "2026-03-01"},
		{"audit", "missing", "nope", "--from", "2026-03-01", "--to", "2026-03-01"},
		{"audit", "status", "orders"},
	} {
		require.True(t, errors.As(w.run(args...).e, &usage), "%v", args)
	}
}
