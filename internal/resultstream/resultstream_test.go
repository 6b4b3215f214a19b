package resultstream

import (
	"github.com/idem-data/idem/internal/results"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/internal/deadletter"
)

func TestFromDeadLetter(t *testing.T) {
	failed := time.Date(2026, 11, 5, 3, 0, 0, 0, time.UTC)
	l := deadletter.Letter{Seq: 7, Kind: deadletter.KindFatal, Dataset: "orders", Partition: "2026-11-05", RunID: "r",
		Attempts: 1, OriginalStream: "IDEM_EVENTS", OriginalSeq: 42, FailedAt: failed,
		Header: nats.Header{"Idem-Original-Nats-Msg-Id": []string{"orders:2026-11-05:r"}}}

	// A refusal of the checks, as package checks words it.
	refused := &checks.Error{Failed: []checks.Outcome{
		{Name: "unique", Failing: 3, Threshold: "failing <= 0"},
		{Name: "row_count_change", Failing: 10, Threshold: "drop <= 50%", Note: "10 row(s) replace 100 (-90.0%)"}}}
	l.Error = refused.Error()
	r := FromDeadLetter("shop", l)
	require.Equal(t, results.StatusRejected, r.Status)
	require.Equal(t, "check", r.ErrorKind)
	require.Equal(t, []string{"unique", "row_count_change"}, r.FailedChecks)
	require.False(t, r.Done())

	l.Error = (&checks.Error{Broken: "positive", Err: errDiv{}}).Error()
	require.Equal(t, []string{"positive"}, FromDeadLetter("shop", l).FailedChecks)

	l.Error = "empty_source: the source returned no rows"
	r = FromDeadLetter("shop", l)
	require.Equal(t, results.Result{Pipeline: "shop", Dataset: "orders", Partition: "2026-11-05", RunID: "r", Status: results.StatusDeadLettered,
		Attempts: 1, ErrorKind: "fatal", Error: l.Error, Stream: "IDEM_EVENTS", StreamSeq: 42, MsgID: "orders:2026-11-05:r",
		DeadLetterSeq: 7, FinishedAt: failed}, r)
}

type errDiv struct{}

func (errDiv) Error() string { return "ERROR: division by zero" }

func TestMsg(t *testing.T) {
	at := time.Date(2026, 11, 5, 3, 0, 0, 0, time.UTC)
	r := results.Result{Dataset: "orders", Partition: "2026-11-05", RunID: "r", Status: results.StatusLoaded, Stream: "IDEM_EVENTS", StreamSeq: 42, AuditID: 9,
		PublishedAt: &at, Rows: &results.Rows{Inserted: 10, Deleted: -1}}
	r.Finish(at.Add(1500 * time.Millisecond))
	require.InDelta(t, 1.5, r.Seconds, 1e-9)
	m := Msg("idem.result", r)
	require.Equal(t, "idem.result.orders", m.Subject)
	require.Equal(t, "idem-result:IDEM_EVENTS:42:9", m.Header.Get(nats.MsgIdHdr))
	require.Equal(t, "42", m.Header.Get(results.HeaderEventSeq))
	back, err := results.Parse(m.Data)
	require.NoError(t, err)
	require.Equal(t, r, back)
	require.NotEqual(t, results.MsgID("IDEM_EVENTS", 42, 0, ""), results.MsgID("IDEM_EVENTS", 42, 9, ""), "a dead letter's result has its own id")
	// The ids are part of the wire contract (docs): JetStream's duplicate
	// window relies on them never changing for one outbox row.
	require.Equal(t, "idem-result:IDEM_EVENTS:42:9", results.MsgID("IDEM_EVENTS", 42, 9, ""))
	const token = "0b7e6f4c-3a51-4f7e-9d2a-6c1e2f3a4b5c"
	require.Equal(t, "idem-result:IDEM_EVENTS:42:9:"+token, results.MsgID("IDEM_EVENTS", 42, 9, token))
	require.NotEqual(t, results.MsgID("IDEM_EVENTS", 42, 9, token), results.MsgID("IDEM_EVENTS", 42, 9, "5d0c2a7e-0000-4000-8000-000000000001"),
		"two attempts given one audit id (a failover lost the first) have two ids")
	require.Equal(t, "idem-result:IDEM_EVENTS:18446744073709551615:dead-letter", results.MsgID("IDEM_EVENTS", 1<<64-1, 0, token))
	_, err = results.Parse([]byte("{"))
	require.Error(t, err)
}
