package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
)

// handDeadLetter is a dead letter written the way the consumer writes them,
// with fixed values, so listings are reproducible.
type handDeadLetter struct {
	dataset, partition, runID, kind, err, failedAt string
	reason                                         string // Idem-Error-Reason; "" as an older release wrote them
	deliveries, replays                            int
	origSubject, body                              string
	extra                                          nats.Header
}

// putDeadLetter stores d in the dead-letter stream and returns its sequence.
func (w *cliWorld) putDeadLetter(d handDeadLetter) uint64 {
	w.t.Helper()
	h := nats.Header{}
	for k, vs := range d.extra {
		h[k] = vs
	}
	set := func(k, v string) {
		if v != "" {
			h.Set(k, v)
		}
	}
	set(deadletter.HeaderError, d.err)
	set(deadletter.HeaderErrorKind, d.kind)
	set(deadletter.HeaderErrorReason, d.reason)
	set(deadletter.HeaderOriginalSubject, d.origSubject)
	set(deadletter.HeaderOriginalStream, "IDEM_EVENTS")
	set(deadletter.HeaderOriginalSeq, "7")
	set(deadletter.HeaderDeliveries, strconv.Itoa(d.deliveries))
	set(deadletter.HeaderFailedAt, d.failedAt)
	set(deadletter.HeaderDataset, d.dataset)
	set(deadletter.HeaderPartition, d.partition)
	set(deadletter.HeaderRunID, d.runID)
	if d.replays > 0 {
		set("Idem-Original-Idem-Replay-Count", strconv.Itoa(d.replays))
	}
	token := d.dataset
	if token == "" {
		token = deadletter.InvalidSubjectToken
	}
	ack, err := w.js.PublishMsg(context.Background(), &nats.Msg{Subject: "idem.dlq." + token, Header: h, Data: []byte(d.body)},
		jetstream.WithExpectStream("IDEM_DLQ"))
	require.NoError(w.t, err)
	return ack.Sequence
}

func orderEvent(partition, runID string) string {
	return fmt.Sprintf(`{"dataset":"orders","partition":%q,"run_id":%q}`, partition, runID)
}

// fourDeadLetters: one of each kind, an unreadable event, a dataset no
// longer configured, and an error too long for the table.
func (w *cliWorld) fourDeadLetters() {
	w.t.Helper()
	w.putDeadLetter(handDeadLetter{dataset: "orders", partition: "2026-11-27", runID: "scheduled__2026-11-27", kind: "fatal",
		err:      "empty_source: the source query returned no rows for partition 2026-11-27 (allow_empty is false)",
		failedAt: "2026-11-28T03:00:00.000Z", deliveries: 1, origSubject: "idem.ready.orders",
		body: orderEvent("2026-11-27", "scheduled__2026-11-27"),
		extra: nats.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			deadletter.HeaderOriginalPrefix + "Nats-Msg-Id":                 {"orders:2026-11-27:scheduled__2026-11-27"},
			deadletter.HeaderOriginalPrefix + "Nats-Expected-Last-Sequence": {"1"},
			deadletter.HeaderOriginalPrefix + "Idem-Note":                   {"from the scheduler"},
			"Nats-Msg-Id": {"dlq:IDEM_EVENTS:7"}}})
	w.putDeadLetter(handDeadLetter{dataset: "orders", partition: "2026-11-28", runID: "scheduled__2026-11-28", kind: "exhausted",
		err:      "transient: serialization_failure (40001): could not serialize access due to concurrent update; retried 4 times over 3m0s",
		failedAt: "2026-11-28T04:10:00.000Z", deliveries: 4, replays: 1, origSubject: "idem.ready.orders",
		body: orderEvent("2026-11-28", "scheduled__2026-11-28")})
	w.putDeadLetter(handDeadLetter{kind: "fatal", err: "invalid event: body is not JSON",
		failedAt: "2026-11-28T05:00:00.000Z", deliveries: 1, origSubject: "idem.ready.Orders", body: "not json"})
	w.putDeadLetter(handDeadLetter{dataset: "customers", partition: "2026-11-28", runID: "manual__20261128T230000.000Z", kind: "crashed",
		err: "the process stopped on every delivery", failedAt: "2026-11-29T01:00:00.000Z", deliveries: 3,
		origSubject: "idem.ready.customers", body: `{"dataset":"customers","partition":"2026-11-28","run_id":"manual__20261128T230000.000Z"}`})
}

// deadLetters is `idem dlq ls --json` with args.
func (w *cliWorld) deadLetters(args ...string) []deadletter.Letter {
	w.t.Helper()
	r := w.run(append([]string{"dlq", "ls", "--json"}, args...)...)
	require.NoError(w.t, r.e, r.err)
	var dls []deadletter.Letter
	require.NoError(w.t, json.Unmarshal([]byte(r.out), &dls), r.out)
	return dls
}

func dlqSeqs(dls []deadletter.Letter) []uint64 {
	seqs := []uint64{}
	for _, dl := range dls {
		seqs = append(seqs, dl.Seq)
	}
	return seqs
}

// waitDeadLetter waits for a dead letter stored after seq after.
func (w *cliWorld) waitDeadLetter(after uint64) deadletter.Letter {
	w.t.Helper()
	var got deadletter.Letter
	require.Eventually(w.t, func() bool {
		for _, dl := range w.deadLetters() {
			if dl.Seq > after {
				got = dl
				return true
			}
		}
		return false
	}, 60*time.Second, 20*time.Millisecond, "no dead letter after seq %d", after)
	return got
}

func dlqGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "dlq", name)
	if os.Getenv("IDEM_UPDATE_GOLDEN") != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with IDEM_UPDATE_GOLDEN=1 to write %s", path)
	require.Equal(t, string(want), got)
}

func requireUsage(t *testing.T, r result, args ...string) {
	t.Helper()
	var usage *UsageError
	require.True(t, errors.As(r.e, &usage), "%v: want a usage error, got %v", args, r.e)
}

// An operator's scenario: a dead letter caused by a schema mismatch,
// replayed once the table is fixed, loads and leaves the DLQ.
func TestDLQSchemaMismatchReplayedAfterFix(t *testing.T) {
	w := newCLIWorld(t)
	w.serve()

	require.NoError(t, w.run("publish", "orders", "2027-01-01", "--run-id", "r-empty").e)
	empty := w.waitDeadLetter(0)
	w.db.Exec(t, "ALTER TABLE analytics.t DROP COLUMN note")
	require.NoError(t, w.run("publish", "orders", "2026-03-01", "--run-id", "r-schema").e)
	schema := w.waitDeadLetter(empty.Seq)

	require.Equal(t, "r-empty", empty.RunID)
	require.Equal(t, deadletter.KindFatal, empty.Kind)
	require.Contains(t, empty.Error, "empty_source")
	require.Equal(t, "empty_source", empty.Reason)
	require.Equal(t, deadletter.Letter{Seq: schema.Seq, Subject: "idem.dlq.orders", Kind: "fatal", Dataset: "orders",
		Partition: "2026-03-01", RunID: "r-schema", Deliveries: 1, Attempts: 1, Error: schema.Error, Reason: "schema_mismatch", OriginalSubject: "idem.ready.orders",
		OriginalStream: "IDEM_EVENTS", OriginalSeq: 2, StoredAt: schema.StoredAt, FailedAt: schema.FailedAt}, schema)
	require.Contains(t, schema.Error, "schema_mismatch")
	require.Contains(t, schema.Error, "note")
	require.WithinDuration(t, time.Now(), schema.FailedAt, time.Minute)

	r := w.run("dlq", "ls")
	require.NoError(t, r.e)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Len(t, lines, 4, r.out)
	require.Regexp(t, `^SEQ\s+FAILED_AT\s+DATASET\s+PARTITION\s+RUN_ID\s+KIND\s+DELIVERIES\s+REPLAYS\s+ERROR$`, lines[0])
	require.Regexp(t, `^\d+\s+\S+Z\s+orders\s+2026-03-01\s+r-schema\s+fatal\s+1\s+0\s+\S`, lines[2])
	require.Equal(t, "2 dead letter(s)", lines[3])

	seq := strconv.FormatUint(schema.Seq, 10)
	r = w.run("dlq", "show", seq)
	require.NoError(t, r.e)
	for _, want := range []string{
		"dead letter " + seq + " of stream IDEM_DLQ",
		"Idem-Error-Kind: fatal",
		"  reason      schema_mismatch\n", // strategies' refusal names it in its text only
		"Idem-Original-Subject: idem.ready.orders",
		"Idem-Original-Nats-Msg-Id: orders:2026-03-01:r-schema",
		"body (JSON, ",
		"{\n  \"dataset\": \"orders\",\n  \"partition\": \"2026-03-01\",\n  \"run_id\": \"r-schema\"",
	} {
		require.Contains(t, r.out, want)
	}

	w.db.Exec(t, "ALTER TABLE analytics.t ADD COLUMN note text")
	r = w.run("dlq", "replay", seq)
	require.NoError(t, r.e, r.out)
	require.Contains(t, r.out, "replayed "+seq+" orders 2026-03-01 run_id=r-schema to idem.ready.orders: stream IDEM_EVENTS seq 3 (replay 1)")
	require.Contains(t, r.out, "replayed 1, skipped 0, failed 0 of 1 dead letter(s)")
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'r-schema' AND status = 'success'")
	require.EqualValues(t, 10, w.count("SELECT count(*) FROM analytics.t WHERE event_date = '2026-03-01'"))

	require.Equal(t, []uint64{empty.Seq}, dlqSeqs(w.deadLetters()), "the replayed dead letter is gone, the other stays")
	r = w.run("dlq", "show", seq)
	require.Error(t, r.e)
	require.NotErrorIs(t, r.e, ErrReported)
	var usage *UsageError
	require.False(t, errors.As(r.e, &usage))
	require.Contains(t, r.err, "no dead letter "+seq+" in stream IDEM_DLQ")
}

// The replay count goes through the consumer and back: a dead letter that
// keeps failing is replayed deadletter.MaxReplays times, then refused without --force.
func TestDLQReplayCountGuard(t *testing.T) {
	w := newCLIWorld(t)
	w.serve()
	require.NoError(t, w.run("publish", "orders", "2027-01-01", "--run-id", "r-poison").e)

	var dl deadletter.Letter
	for i := range deadletter.MaxReplays {
		dl = w.waitDeadLetter(dl.Seq)
		require.Equal(t, i, dl.Replays)
		r := w.run("dlq", "replay", fmt.Sprint(dl.Seq))
		require.NoError(t, r.e, r.out)
		require.Contains(t, r.out, fmt.Sprintf("(replay %d)", i+1))
	}
	dl = w.waitDeadLetter(dl.Seq)
	require.Equal(t, deadletter.MaxReplays, dl.Replays)
	seq := fmt.Sprint(dl.Seq)
	r := w.run("dlq", "show", seq)
	require.Contains(t, r.out, "Idem-Original-Idem-Replay-Count: 3")
	require.Regexp(t, `Idem-Original-Idem-Replay-Of: \d+`, r.out)

	events := w.streamMsgs("IDEM_EVENTS")
	r = w.run("dlq", "replay", seq)
	require.ErrorIs(t, r.e, ErrReported)
	require.Contains(t, r.out, "skipped "+seq+" orders 2027-01-01 run_id=r-poison: already replayed 3 times")
	require.Contains(t, r.out, "--force")
	require.Contains(t, r.out, "replayed 0, skipped 1, failed 0 of 1 dead letter(s)")
	require.Equal(t, events, w.streamMsgs("IDEM_EVENTS"), "a refused replay publishes nothing")
	require.Equal(t, []uint64{dl.Seq}, dlqSeqs(w.deadLetters()), "and deletes nothing")

	r = w.run("dlq", "replay", seq, "--force")
	require.NoError(t, r.e, r.out)
	require.Contains(t, r.out, "(replay 4)")
	require.Equal(t, 4, w.waitDeadLetter(dl.Seq).Replays)
	w.waitCount(5, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'r-poison' AND status = 'failed'")
}

func TestDLQLsFiltersJSONAndGolden(t *testing.T) {
	w := newCLIWorld(t)
	r := w.run("dlq", "ls")
	require.NoError(t, r.e, "an empty DLQ is not a failure")
	require.Equal(t, "0 dead letter(s)\n", r.out)
	require.Equal(t, "[]\n", w.run("dlq", "ls", "--json").out)

	w.fourDeadLetters()
	r = w.run("dlq", "ls")
	require.NoError(t, r.e)
	dlqGolden(t, "ls.golden", r.out)

	for _, c := range []struct {
		args []string
		want []uint64
	}{
		{nil, []uint64{1, 2, 3, 4}},
		{[]string{"--dataset", "orders"}, []uint64{1, 2}},
		{[]string{"--dataset", "_invalid"}, []uint64{3}},
		{[]string{"--dataset", "nope"}, []uint64{}},
		{[]string{"--kind", "fatal"}, []uint64{1, 3}},
		{[]string{"--dataset", "orders", "--kind", "exhausted"}, []uint64{2}},
		{[]string{"--reason", "empty_source"}, []uint64{1}},
		{[]string{"--reason", "empty"}, []uint64{}},
		{[]string{"--reason", "transient"}, []uint64{}}, // an exhausted dead letter's text names no reason
		{[]string{"--since", "2026-11-28T04:00:00Z"}, []uint64{2, 3, 4}},
		{[]string{"--since", "2026-11-29"}, []uint64{4}},
		{[]string{"--since", "1h"}, []uint64{}},
	} {
		require.Equal(t, c.want, dlqSeqs(w.deadLetters(c.args...)), "%v", c.args)
	}
	recent := w.putDeadLetter(handDeadLetter{dataset: "orders", kind: "fatal", err: "x",
		failedAt: time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339Nano), origSubject: "idem.ready.orders"})
	require.Equal(t, []uint64{recent}, dlqSeqs(w.deadLetters("--since", "1h")))
	// A window that reaches back past the oldest hand-made dead letter
	// (2026-11-28T03:00Z) whenever the test runs.
	back := fmt.Sprintf("%dh", int(time.Since(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)).Hours())+1)
	require.Equal(t, []uint64{1, 2, 3, 4, recent}, dlqSeqs(w.deadLetters("--since", back)))

	r = w.run("dlq", "ls", "--json", "--dataset", "orders")
	var raw []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &raw))
	keys := []string{}
	for k := range raw[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	require.Equal(t, []string{"body_omitted", "dataset", "deliveries", "error", "failed_at", "kind", "original_seq", "original_stream",
		"original_subject", "partition", "reason", "replays", "run_id", "seq", "stored_at", "subject"}, keys)
	require.Equal(t, "empty_source", raw[0]["reason"], "read from the text of a dead letter without Idem-Error-Reason")
	require.NotContains(t, raw[1], "reason", "exhausted: none")
	require.Equal(t, "2026-11-28T04:10:00Z", raw[1]["failed_at"])
	require.EqualValues(t, 1, raw[1]["replays"])
	require.EqualValues(t, 4, raw[1]["deliveries"])

	for _, args := range [][]string{
		{"dlq", "ls", "--kind", "bogus"},
		{"dlq", "ls", "--since", "yesterday"},
		{"dlq", "ls", "--since", "-1h"},
		{"dlq", "ls", "--dataset", "orders.>"},
		{"dlq", "ls", "--reason", "Schema-Mismatch"},
		{"dlq", "ls", "extra"},
	} {
		requireUsage(t, w.run(args...), args...)
	}
}

func TestDLQShow(t *testing.T) {
	w := newCLIWorld(t)
	w.fourDeadLetters()
	omitted := w.putDeadLetter(handDeadLetter{dataset: "orders", kind: "fatal", err: "too big", failedAt: "2026-11-28T06:00:00.000Z",
		origSubject: "idem.ready.orders",
		extra:       nats.Header{deadletter.HeaderBodyOmitted: {"70000 bytes omitted: the dead letter would exceed the server's max_payload; the original is message 7 of stream IDEM_EVENTS"}}})

	r := w.run("dlq", "show", "1")
	require.NoError(t, r.e)
	want := []string{
		"dead letter 1 of stream IDEM_DLQ\n",
		"  subject     idem.dlq.orders\n",
		"  failed_at   2026-11-28T03:00:00Z\n",
		"  kind        fatal\n",
		"  reason      empty_source\n",
		"  error       empty_source: the source query returned no rows",
		"  deliveries  1\n",
		"  replays     0\n",
		"  run_id      scheduled__2026-11-27\n",
		"  original    idem.ready.orders (stream IDEM_EVENTS seq 7)\n",
		"headers\n",
		"  Idem-Deliveries: 1\n",
		"  Idem-Original-Nats-Msg-Id: orders:2026-11-27:scheduled__2026-11-27\n",
		"  Nats-Msg-Id: dlq:IDEM_EVENTS:7\n",
		"  Traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
		"body (JSON, 78 bytes)\n{\n  \"dataset\": \"orders\",\n  \"partition\": \"2026-11-27\",\n  \"run_id\": \"scheduled__2026-11-27\"\n}\n",
	}
	for _, s := range want {
		require.Contains(t, r.out, s)
	}

	r = w.run("dlq", "show", "3")
	require.NoError(t, r.e)
	require.Contains(t, r.out, "  dataset     _invalid\n")
	require.Contains(t, r.out, "  partition   -\n")
	require.True(t, strings.HasSuffix(r.out, "body (not JSON, 8 bytes)\nnot json\n"), r.out)

	r = w.run("dlq", "show", fmt.Sprint(omitted))
	require.NoError(t, r.e)
	require.Contains(t, r.out, "body omitted: 70000 bytes omitted: the dead letter would exceed the server's max_payload; the original is message 7 of stream IDEM_EVENTS\n")

	r = w.run("dlq", "show", "1", "--json")
	require.NoError(t, r.e)
	var d struct {
		Seq      uint64              `json:"seq"`
		Stream   string              `json:"stream"`
		Kind     string              `json:"kind"`
		Headers  map[string][]string `json:"headers"`
		Body     string              `json:"body"`
		BodyJSON map[string]any      `json:"body_json"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &d), r.out)
	require.Equal(t, uint64(1), d.Seq)
	require.Equal(t, "IDEM_DLQ", d.Stream)
	require.Equal(t, "fatal", d.Kind)
	require.Equal(t, []string{"from the scheduler"}, d.Headers["Idem-Original-Idem-Note"])
	require.Equal(t, orderEvent("2026-11-27", "scheduled__2026-11-27"), d.Body)
	require.Equal(t, "scheduled__2026-11-27", d.BodyJSON["run_id"])

	r = w.run("dlq", "show", "3", "--json")
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &raw))
	require.Nil(t, raw["body_json"])
	require.Equal(t, "not json", raw["body"])

	r = w.run("dlq", "show", "99")
	require.Error(t, r.e)
	require.Contains(t, r.err, "no dead letter 99 in stream IDEM_DLQ")
	var usage *UsageError
	require.False(t, errors.As(r.e, &usage))
	for _, args := range [][]string{{"dlq", "show"}, {"dlq", "show", "x"}, {"dlq", "show", "0"}, {"dlq", "show", "1", "2"}} {
		requireUsage(t, w.run(args...), args...)
	}
}

func TestDLQReplay(t *testing.T) {
	w := newCLIWorld(t) // no consumer: replays stay in the events stream to be read back
	w.fourDeadLetters()
	guarded := w.putDeadLetter(handDeadLetter{dataset: "orders", partition: "2026-11-20", runID: "r-guard", kind: "fatal", err: "x",
		failedAt: "2026-11-28T06:00:00.000Z", deliveries: 1, replays: 3, origSubject: "idem.ready.orders", body: orderEvent("2026-11-20", "r-guard")})
	omitted := w.putDeadLetter(handDeadLetter{dataset: "orders", kind: "fatal", err: "too big", failedAt: "2026-11-28T06:00:00.000Z",
		origSubject: "idem.ready.orders", extra: nats.Header{deadletter.HeaderBodyOmitted: {"70000 bytes omitted"}}})
	nowhere := w.putDeadLetter(handDeadLetter{dataset: "orders", kind: "fatal", err: "x", failedAt: "2026-11-28T06:00:00.000Z",
		origSubject: "elsewhere.orders", body: "{}"})
	loop := w.putDeadLetter(handDeadLetter{dataset: "orders", kind: "fatal", err: "x", failedAt: "2026-11-28T06:00:00.000Z",
		origSubject: "idem.dlq.orders", body: "{}"})
	const dlqTotal = 8

	for _, args := range [][]string{
		{"dlq", "replay"},
		{"dlq", "replay", "1", "--all"},
		{"dlq", "replay", "1", "--dataset", "orders"},
		{"dlq", "replay", "--all", "--kind", "bogus"},
		{"dlq", "replay", "x"},
		{"dlq", "replay", "1", "2"},
	} {
		requireUsage(t, w.run(args...), args...)
	}
	r := w.run("dlq", "replay", "99")
	require.Error(t, r.e)
	require.Contains(t, r.err, "no dead letter 99 in stream IDEM_DLQ")

	// A dry run says what would happen and changes nothing.
	r = w.run("dlq", "replay", "--all", "--dry-run")
	require.NoError(t, r.e, r.out)
	require.Contains(t, r.out, "would replay 1 orders 2026-11-27 run_id=scheduled__2026-11-27 to idem.ready.orders (replay 1)\n")
	require.Contains(t, r.out, "would replay 2 orders 2026-11-28 run_id=scheduled__2026-11-28 to idem.ready.orders (replay 2)\n")
	require.Contains(t, r.out, fmt.Sprintf("skipped %d orders 2026-11-20 run_id=r-guard: already replayed 3 times", guarded))
	require.Contains(t, r.out, fmt.Sprintf("skipped %d orders - run_id=-: its body was not kept (70000 bytes omitted)", omitted))
	require.Contains(t, r.out, "dry run: would replay 6, skip 2 of 8 dead letter(s); nothing was published or deleted\n")
	require.EqualValues(t, 0, w.streamMsgs("IDEM_EVENTS"))
	require.EqualValues(t, dlqTotal, w.streamMsgs("IDEM_DLQ"))

	// --all with filters replays exactly what they select.
	r = w.run("dlq", "replay", "--all", "--dataset", "orders", "--kind", "fatal", "--since", "2026-11-28T03:00:00Z", "--json")
	require.ErrorIs(t, r.e, ErrReported, "the guarded, omitted and unroutable ones were not replayed")
	var rep replayReport
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep), r.out)
	require.Equal(t, replayReport{Matched: 5, Replayed: 1, Skipped: 2, Failed: 2, Messages: rep.Messages}, rep)
	actions := map[uint64]string{}
	for _, m := range rep.Messages {
		actions[m.Seq] = string(m.Action)
	}
	require.Equal(t, map[uint64]string{1: "replayed", guarded: "skipped", omitted: "skipped", nowhere: "failed", loop: "failed"}, actions)
	first := rep.Messages[0]
	require.Equal(t, deadletter.ReplayResult{Seq: 1, Dataset: "orders", Partition: "2026-11-27", RunID: "scheduled__2026-11-27", Kind: "fatal",
		Action: "replayed", Subject: "idem.ready.orders", ReplayCount: 1, Stream: "IDEM_EVENTS", StreamSeq: 1}, first)
	require.Contains(t, rep.Messages[3].Reason, "the dead letter is kept")
	require.EqualValues(t, 1, w.streamMsgs("IDEM_EVENTS"))
	require.Equal(t, []uint64{2, 3, 4, guarded, omitted, nowhere, loop}, dlqSeqs(w.deadLetters()))

	// The replay carries the original body (package deadletter tests its headers).
	events, err := w.js.Stream(context.Background(), "IDEM_EVENTS")
	require.NoError(t, err)
	m, err := events.GetMsg(context.Background(), 1)
	require.NoError(t, err)
	require.Equal(t, "idem.ready.orders", m.Subject)
	require.Equal(t, orderEvent("2026-11-27", "scheduled__2026-11-27"), string(m.Data))
	require.Equal(t, "1", m.Header.Get("Idem-Replay-Of"))

	// The guard yields to --force; the count keeps rising.
	r = w.run("dlq", "replay", fmt.Sprint(guarded), "--force")
	require.NoError(t, r.e, r.out)
	require.Contains(t, r.out, fmt.Sprintf("replayed %d orders 2026-11-20 run_id=r-guard to idem.ready.orders: stream IDEM_EVENTS seq 2 (replay 4)", guarded))
	m, err = events.GetMsg(context.Background(), 2)
	require.NoError(t, err)
	require.Equal(t, "4", m.Header.Get("Idem-Replay-Count"))
	require.Equal(t, fmt.Sprint(guarded), m.Header.Get("Idem-Replay-Of"))

	// The rest, by the human output.
	r = w.run("dlq", "replay", "--all", "--dataset", "customers")
	require.NoError(t, r.e, r.out)
	require.Equal(t, "replayed 4 customers 2026-11-28 run_id=manual__20261128T230000.000Z to idem.ready.customers: stream IDEM_EVENTS seq 3 (replay 1)\n"+
		"replayed 1, skipped 0, failed 0 of 1 dead letter(s)\n", r.out)
	r = w.run("dlq", "replay", "--all", "--dataset", "nope")
	require.NoError(t, r.e)
	require.Equal(t, "replayed 0, skipped 0, failed 0 of 0 dead letter(s)\n", r.out)
	require.EqualValues(t, 3, w.streamMsgs("IDEM_EVENTS"))
	require.Equal(t, []uint64{2, 3, omitted, nowhere, loop}, dlqSeqs(w.deadLetters()))
}

// `idem dlq replay --reason R DATASET`: once the target is fixed, the
// dataset's dead letters of that reason go back, oldest first; the rest stay.
func TestDLQReplayByReason(t *testing.T) {
	w := newCLIWorld(t) // no consumer: replays stay in the events stream to be read back
	schema := func(partition, runID, failedAt, reason string, replays int) handDeadLetter {
		return handDeadLetter{dataset: "orders", partition: partition, runID: runID, kind: "fatal", reason: reason,
			err:      `schema_mismatch: ERROR: column "note" is of type integer but expression is of type text (SQLSTATE 42804)`,
			failedAt: failedAt, deliveries: 1, replays: replays, origSubject: "idem.ready.orders", body: orderEvent(partition, runID)}
	}
	older := w.putDeadLetter(schema("2026-11-27", "r-first", "2026-11-28T03:00:00.000Z", "schema_mismatch", 0))
	check := w.putDeadLetter(handDeadLetter{dataset: "orders", partition: "2026-11-26", runID: "r-check", kind: "fatal",
		err: "check_failed: row_count: 0 failing (>= 1)", failedAt: "2026-11-28T03:10:00.000Z", deliveries: 1,
		origSubject: "idem.ready.orders", body: orderEvent("2026-11-26", "r-check")})
	customers := w.putDeadLetter(handDeadLetter{dataset: "customers", partition: "2026-11-27", runID: "r-customers", kind: "fatal",
		reason: "schema_mismatch", err: "schema_mismatch: x", failedAt: "2026-11-28T03:20:00.000Z", deliveries: 1,
		origSubject: "idem.ready.customers", body: `{"dataset":"customers","partition":"2026-11-27","run_id":"r-customers"}`})
	// Same partition, failed later, stored by an older release (no
	// Idem-Error-Reason: the reason is read from the text).
	newer := w.putDeadLetter(schema("2026-11-27", "r-second", "2026-11-28T04:00:00.000Z", "", 0))
	guarded := w.putDeadLetter(schema("2026-11-25", "r-guard", "2026-11-28T05:00:00.000Z", "schema_mismatch", deadletter.MaxReplays))
	exhausted := w.putDeadLetter(handDeadLetter{dataset: "orders", partition: "2026-11-24", runID: "r-retry", kind: "exhausted",
		err: "transient: serialization_failure", failedAt: "2026-11-28T06:00:00.000Z", deliveries: 4,
		origSubject: "idem.ready.orders", body: orderEvent("2026-11-24", "r-retry")})
	require.Equal(t, []uint64{older, newer, guarded}, dlqSeqs(w.deadLetters("--dataset", "orders", "--reason", "schema_mismatch")))

	r := w.run("dlq", "replay", "--help")
	require.NoError(t, r.e)
	require.Contains(t, r.out, "idem dlq replay SEQ | --all [--dataset D] [--kind K] [--reason R] [--since T] | --reason R DATASET")
	require.Contains(t, r.out, "  idem dlq replay --reason schema_mismatch orders\n")
	require.Contains(t, r.out, "oldest first")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--reason", "schema_mismatch", "1"}, "give DATASET, not SEQ 1"},
		{[]string{"orders"}, `"orders" is a dataset, not a SEQ: to replay its dead letters of one reason, name the reason (idem dlq replay --reason schema_mismatch orders`},
		{[]string{"_invalid"}, `"_invalid" is a dataset, not a SEQ`},
		{[]string{"--reason", "schema_mismatch"}, "name it (idem dlq replay --reason schema_mismatch DATASET)"},
		{[]string{"--reason", "schema_mismatch", "--all", "orders"}, "give DATASET or --all, not both"},
		{[]string{"--reason", "schema_mismatch", "--dataset", "orders", "orders"}, "the dataset is given twice"},
		{[]string{"--reason", "schema_mismatch", "orders.>"}, `DATASET "orders.>": want one dataset name`},
		{[]string{"--reason", "Schema Mismatch", "orders"}, `--reason "Schema Mismatch": want one reason word`},
		{[]string{"--reason", "schema_mismatch", "orders", "customers"}, "accepts at most 1 arg"},
	} {
		args := append([]string{"dlq", "replay"}, c.args...)
		r := w.run(args...)
		requireUsage(t, r, args...)
		require.Equal(t, 2, ExitCode(r.e), "%v", args)
		require.Contains(t, r.err, c.want, "%v", args)
	}
	require.EqualValues(t, 0, w.streamMsgs("IDEM_EVENTS"), "a usage error publishes nothing")

	what := func(seq uint64, partition, runID string) string {
		return fmt.Sprintf("%d orders %s run_id=%s", seq, partition, runID)
	}
	r = w.run("dlq", "replay", "--reason", "schema_mismatch", "orders", "--dry-run")
	require.NoError(t, r.e, r.out)
	require.Equal(t, "would replay "+what(older, "2026-11-27", "r-first")+" to idem.ready.orders (replay 1)\n"+
		"would replay "+what(newer, "2026-11-27", "r-second")+" to idem.ready.orders (replay 1)\n"+
		"skipped "+what(guarded, "2026-11-25", "r-guard")+fmt.Sprintf(": already replayed 3 times and failed again each time; read 'idem dlq show %d', fix the cause, then replay with --force (or purge it)\n", guarded)+
		"dry run: would replay 2, skip 1 of 3 dead letter(s) of orders with reason schema_mismatch; nothing was published or deleted\n", r.out)
	require.EqualValues(t, 0, w.streamMsgs("IDEM_EVENTS"))

	r = w.run("dlq", "replay", "--reason", "schema_mismatch", "orders")
	require.ErrorIs(t, r.e, ErrReported, "the one at the replay limit was not replayed")
	require.Equal(t, 1, ExitCode(r.e))
	require.Equal(t, "replayed "+what(older, "2026-11-27", "r-first")+" to idem.ready.orders: stream IDEM_EVENTS seq 1 (replay 1)\n"+
		"replayed "+what(newer, "2026-11-27", "r-second")+" to idem.ready.orders: stream IDEM_EVENTS seq 2 (replay 1)\n"+
		"skipped "+what(guarded, "2026-11-25", "r-guard")+fmt.Sprintf(": already replayed 3 times and failed again each time; read 'idem dlq show %d', fix the cause, then replay with --force (or purge it)\n", guarded)+
		"replayed 2, skipped 1, failed 0 of 3 dead letter(s) of orders with reason schema_mismatch\n", r.out)

	// Stream order: the partition's older dead letter is the older event
	// on the original stream.
	events, err := w.js.Stream(context.Background(), "IDEM_EVENTS")
	require.NoError(t, err)
	for i, want := range []struct {
		replayOf uint64
		body     string
	}{{older, orderEvent("2026-11-27", "r-first")}, {newer, orderEvent("2026-11-27", "r-second")}} {
		m, err := events.GetMsg(context.Background(), uint64(i+1))
		require.NoError(t, err)
		require.Equal(t, "idem.ready.orders", m.Subject)
		require.Equal(t, want.body, string(m.Data), "event %d", i+1)
		require.Equal(t, fmt.Sprint(want.replayOf), m.Header.Get("Idem-Replay-Of"), "event %d", i+1)
	}
	require.EqualValues(t, 2, w.streamMsgs("IDEM_EVENTS"))
	require.Equal(t, []uint64{check, customers, guarded, exhausted}, dlqSeqs(w.deadLetters()),
		"the check_failed one, the other dataset's and the exhausted one stay; so does the guarded one")

	// The guard yields to --force.
	r = w.run("dlq", "replay", "--reason", "schema_mismatch", "orders", "--force", "--json")
	require.NoError(t, r.e, r.out)
	var rep replayReport
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep), r.out)
	require.Equal(t, replayReport{Matched: 1, Replayed: 1, Messages: rep.Messages}, rep)
	require.Equal(t, deadletter.ReplayResult{Seq: guarded, Dataset: "orders", Partition: "2026-11-25", RunID: "r-guard", Kind: "fatal",
		Action: "replayed", Subject: "idem.ready.orders", ReplayCount: deadletter.MaxReplays + 1, Stream: "IDEM_EVENTS", StreamSeq: 3}, rep.Messages[0])

	r = w.run("dlq", "replay", "--reason", "schema_mismatch", "orders")
	require.NoError(t, r.e, "nothing left of that reason is not a failure")
	require.Equal(t, "replayed 0, skipped 0, failed 0 of 0 dead letter(s) of orders with reason schema_mismatch\n", r.out)

	// --reason is a filter of --all as well.
	r = w.run("dlq", "replay", "--all", "--reason", "check_failed", "--dry-run")
	require.NoError(t, r.e, r.out)
	require.Equal(t, "would replay "+what(check, "2026-11-26", "r-check")+" to idem.ready.orders (replay 1)\n"+
		"dry run: would replay 1, skip 0 of 1 dead letter(s); nothing was published or deleted\n", r.out)
	require.Equal(t, []uint64{check, customers, exhausted}, dlqSeqs(w.deadLetters()))
	require.EqualValues(t, 3, w.streamMsgs("IDEM_EVENTS"))
}

func TestDLQPurge(t *testing.T) {
	w := newCLIWorld(t)
	w.fourDeadLetters()

	r := w.run("dlq", "purge")
	requireUsage(t, r)
	require.Contains(t, r.err, "purge would delete 4 dead letter(s) of IDEM_DLQ; add --yes")
	r = w.run("dlq", "purge", "--dataset", "orders")
	requireUsage(t, r)
	require.Contains(t, r.err, "purge would delete 2 dead letter(s)")
	requireUsage(t, w.run("dlq", "purge", "--kind", "bogus", "--yes"))
	requireUsage(t, w.run("dlq", "purge", "--reason", "empty source", "--yes"))
	r = w.run("dlq", "purge", "--reason", "empty_source")
	requireUsage(t, r)
	require.Contains(t, r.err, "purge would delete 1 dead letter(s)")
	require.EqualValues(t, 4, w.streamMsgs("IDEM_DLQ"))

	r = w.run("dlq", "purge", "--kind", "fatal", "--dry-run")
	require.NoError(t, r.e)
	require.Equal(t, "would delete 1 orders 2026-11-27 run_id=scheduled__2026-11-27 fatal\n"+
		"would delete 3 _invalid - run_id=- fatal\n"+
		"dry run: would delete 2 dead letter(s); nothing was deleted\n", r.out)
	require.EqualValues(t, 4, w.streamMsgs("IDEM_DLQ"))

	r = w.run("dlq", "purge", "--dataset", "orders", "--kind", "fatal", "--yes")
	require.NoError(t, r.e)
	require.Equal(t, "deleted 1 orders 2026-11-27 run_id=scheduled__2026-11-27 fatal\ndeleted 1 of 1 dead letter(s)\n", r.out)
	require.Equal(t, []uint64{2, 3, 4}, dlqSeqs(w.deadLetters()))

	r = w.run("dlq", "purge", "--since", "2026-11-28T04:30:00Z", "--yes", "--json")
	require.NoError(t, r.e)
	var rep struct {
		DryRun  bool                `json:"dry_run"`
		Deleted int                 `json:"deleted"`
		Matched []deadletter.Letter `json:"matched"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep), r.out)
	require.Equal(t, 2, rep.Deleted)
	require.Equal(t, []uint64{3, 4}, dlqSeqs(rep.Matched))
	require.Equal(t, []uint64{2}, dlqSeqs(w.deadLetters()))

	r = w.run("dlq", "purge", "--yes")
	require.NoError(t, r.e)
	require.Equal(t, "0 dead letter(s)\n", w.run("dlq", "ls").out)
	require.NoError(t, w.run("dlq", "purge", "--yes").e, "purging an empty DLQ is fine")
}
