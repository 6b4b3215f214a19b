package e2e

// The bad-input corpus against a running `idem serve`: every bad event ends
// in the dead-letter stream exactly once, after one delivery, with an
// Idem-Error naming the field and the reason, its body and headers intact,
// on idem.dlq.<dataset> or idem.dlq._invalid; hostile but valid values load
// as data and never as SQL; the consumer keeps going. The corpus is also the
// table of docs/RELIABILITY.md: testdata/badinput.md is generated from it
// (go test ./e2e -run TestBadInputDoc -update).

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/schemas"
)

var update = flag.Bool("update", false, "rewrite testdata/badinput.md from the corpus")

// badInput is one kind of input and what idem must do with it.
type badInput struct {
	kind    string
	subject string // "" means idem.ready.orders
	body    string
	header  nats.Header
	// example shows the input in the doc table; "" means the body, quoted.
	example string
	// dlq is the dead-letter subject; "" means the event is valid and loads.
	dlq string
	// reason is a part of Idem-Error naming the field and what is wrong.
	reason string
	// omitted: the dead letter is too big for max_payload with its body, so
	// it goes without (Idem-Body-Omitted); the original stays in the stream.
	omitted bool
	// db marks an event that decodes and fails in PostgreSQL, for a data
	// reason: one audit row, failed and fatal.
	db bool
	// runID and partition of a valid event, to find its success.
	runID, partition string
}

func (b badInput) subj() string {
	if b.subject == "" {
		return "idem.ready.orders"
	}
	return b.subject
}

// evt builds a body with the three required fields and extra raw members.
func evt(dataset, partition, runID string, extra ...string) string {
	q := func(s string) string {
		if !utf8.ValidString(s) {
			return `"` + s + `"`
		}
		return strconv.Quote(s) // also valid JSON for these test strings
	}
	s := `{"dataset":` + q(dataset) + `,"partition":` + q(partition) + `,"run_id":` + q(runID)
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

func good(extra ...string) string { return evt("orders", "2026-11-28", "r1", extra...) }

// jsonEsc is s as a JSON string, with every non-ASCII or control character
// escaped, for values Go's strconv.Quote would escape differently.
func jsonEsc(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteString(`\` + string(r))
		case r < 0x20 || r > 0x7e:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String() + `"`
}

const (
	dlqOrders  = "idem.dlq.orders"
	dlqInvalid = "idem.dlq._invalid"
	// pwned is the file a shell would create if a value ever reached one.
	pwned = "/tmp/idem-e2e-pwned"
)

var (
	sqlRunID   = `'; DROP TABLE analytics.t; DELETE FROM idem.pipeline_audit; --`
	shellRunID = "$(touch " + pwned + ") `touch " + pwned + "` ; touch " + pwned + " | cat /etc/passwd && ${IFS}"
	quoteRunID = `\"; TRUNCATE idem.run_ledger; -- \\ %s %n {{.}} ../../etc/passwd`
	sqlPart    = `x'); DROP TABLE analytics.tags; --`
	shellPart  = "$(touch " + pwned + ")"
	orPart     = `' OR '1'='1`
)

// corpus is every kind of input, bad first, then hostile but valid.
var corpus = func() []badInput {
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	big := good(`"attributes":{"pad":"` + strings.Repeat("x", 70<<10) + `"}`)
	huge := good(`"attributes":{"pad":"` + strings.Repeat("x", (1<<20)-300) + `"}`)
	attrs33 := make([]string, 33)
	for i := range attrs33 {
		attrs33[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	repeated := nats.Header{"X-Trace": {"a", "b", "c"}}
	bigHeader := nats.Header{"X-Blob": {strings.Repeat("h", 60<<10)}}
	forged := nats.Header{
		"Idem-Error":           {"forged by the publisher"},
		"Idem-Error-Kind":      {"none"},
		"Nats-Msg-Id":          {"publisher-id-1"},
		"Nats-Expected-Stream": {"IDEM_EVENTS"},
		"idem-run-id":          {"forged, lower case"},
	}
	return []badInput{
		// The body as a whole.
		{kind: "empty body", body: "", dlq: dlqOrders, reason: "body: is empty"},
		{kind: "only whitespace", body: " \r\n\t", dlq: dlqOrders, reason: "body: is empty"},
		{kind: "UTF-8 byte order mark", body: "\xef\xbb\xbf" + good(), dlq: dlqOrders, reason: "body: starts with a UTF-8 byte order mark"},
		{kind: "invalid UTF-8", body: evt("orders", "2026-11-28", "r\xff1"), dlq: dlqOrders, reason: "body: is not valid UTF-8 at byte 56"},
		{kind: "not JSON", body: "abc", dlq: dlqOrders, reason: "body: is not valid JSON at byte 1"},
		{kind: "truncated JSON", body: `{"dataset":"orders","partition":"2026-11-28"`, dlq: dlqOrders, reason: "body: is truncated JSON"},
		{kind: "truncated inside a string", body: `{"dataset":"orders","partition":"2026-`, dlq: dlqOrders, reason: "body: is truncated JSON"},
		{kind: "trailing comma", body: `{"dataset":"orders","partition":"2026-11-28","run_id":"r1",}`, dlq: dlqOrders, reason: "body: is not valid JSON"},
		{kind: "single quotes", body: `{'dataset':'orders'}`, dlq: dlqOrders, reason: "body: is not valid JSON"},
		{kind: "raw control character in a string", body: "{\"dataset\":\"orders\",\"partition\":\"2026-11-28\",\"run_id\":\"a\x01b\"}", dlq: dlqOrders, reason: "body: is not valid JSON"},
		{kind: "data after the object", body: good() + "x", dlq: dlqOrders, reason: "body: has data after the JSON object"},
		{kind: "two objects", body: good() + "\n" + good(), dlq: dlqOrders, reason: "body: has data after the JSON object"},
		{kind: "null", body: "null", dlq: dlqOrders, reason: "body: must be a JSON object, got null"},
		{kind: "array", body: "[" + good() + "]", dlq: dlqOrders, reason: "body: must be a JSON object, got an array"},
		{kind: "string", body: `"orders"`, dlq: dlqOrders, reason: "body: must be a JSON object, got a string"},
		{kind: "number", body: "42", dlq: dlqOrders, reason: "body: must be a JSON object, got a number"},
		{kind: "over 64 KiB", body: big, example: `{... "attributes":{"pad":"xxx…"}} (70 KiB)`, dlq: dlqOrders, reason: "the limit is 65536 (64 KiB)"},
		{kind: "near max_payload (1 MiB): dead letter without its body", body: huge, example: `{... "pad":"xxx…"}} (1 MiB - 220 B)`, dlq: dlqOrders,
			reason: "the limit is 65536 (64 KiB)", omitted: true},
		{kind: "deeply nested JSON (20,000 levels)", body: good(`"deep":` + deep), example: `{..., "deep":[[[[…]]]]}`, dlq: dlqOrders, reason: "deep: is not a field"},
		{kind: "deeply nested value", body: `{"dataset":"orders","partition":` + deep + `,"run_id":"r1"}`, example: `{"partition":[[[[…]]]], ...}`, dlq: dlqOrders,
			reason: "partition: must be a string, got an array"},

		// Keys.
		{kind: "duplicate key", body: `{"dataset":"orders","partition":"2026-11-28","run_id":"a","run_id":"b"}`, dlq: dlqOrders, reason: "run_id: appears twice"},
		{kind: "duplicate key through an escape", body: `{"dataset":"orders","partition":"2026-11-28","run_id":"a","run_\u0069d":"b"}`, dlq: dlqOrders, reason: "run_id: appears twice"},
		{kind: "case-variant key beside the real one", body: good(`"RUN_ID":"r2"`), dlq: dlqOrders, reason: `RUN_ID: is not a field; names are case-sensitive, did you mean "run_id"?`},
		{kind: "case-variant key alone", body: `{"Dataset":"orders","partition":"2026-11-28","run_id":"r1"}`, dlq: dlqOrders, reason: `Dataset: is not a field; names are case-sensitive`},
		{kind: "unknown field", body: good(`"table":"analytics.t"`), dlq: dlqOrders, reason: "table: is not a field of partition_ready.v1"},
		{kind: "empty field name", body: good(`"":"x"`), dlq: dlqOrders, reason: "body: has a field with an empty name"},
		{kind: "missing field", body: `{"dataset":"orders","partition":"2026-11-28"}`, dlq: dlqOrders, reason: "run_id: is required"},
		{kind: "empty object", body: `{}`, dlq: dlqOrders, reason: "dataset: is required"},

		// Types.
		{kind: "null field", body: `{"dataset":"orders","partition":null,"run_id":"r1"}`, dlq: dlqOrders, reason: "partition: must be a string, got null"},
		{kind: "number for a string", body: `{"dataset":"orders","partition":20261128,"run_id":"r1"}`, dlq: dlqOrders, reason: "partition: must be a string, got a number"},
		{kind: "huge number", body: `{"dataset":"orders","partition":"2026-11-28","run_id":1e999999}`, dlq: dlqOrders, reason: "run_id: must be a string, got a number"},
		{kind: "array for a string", body: `{"dataset":["orders"],"partition":"2026-11-28","run_id":"r1"}`, dlq: dlqOrders, reason: "dataset: must be a string, got an array"},
		{kind: "string for a boolean", body: good(`"force":"true"`), dlq: dlqOrders, reason: "force: must be true or false, got a string"},
		{kind: "400-digit integer for a boolean", body: good(`"force":` + strings.Repeat("9", 400)), example: `{..., "force":999…9}`, dlq: dlqOrders,
			reason: "force: must be true or false, got a number"},
		{kind: "array for the attributes", body: good(`"attributes":["a"]`), dlq: dlqOrders, reason: "attributes: must be an object of string values, got an array"},
		{kind: "number in the attributes", body: good(`"attributes":{"n":1}`), dlq: dlqOrders, reason: "attributes.n: must be a string, got a number"},
		{kind: "33 attributes", body: good(`"attributes":{` + strings.Join(attrs33, ",") + `}`), example: `{..., "attributes":{"k0":"v", … "k32":"v"}}`,
			dlq: dlqOrders, reason: "attributes: has more than 32 entries"},

		// Dates, hours and text.
		{kind: "February 30", body: evt("orders", "2026-02-30", "r1"), dlq: dlqOrders, reason: `partition: "2026-02-30" is not a calendar date`},
		{kind: "month 13", body: evt("orders", "2026-13-01", "r1"), dlq: dlqOrders, reason: `partition: "2026-13-01" is not a calendar date`},
		{kind: "timestamp for a date", body: evt("orders", "2026-11-28T00:00:00Z", "r1"), dlq: dlqOrders, reason: "is not a calendar date"},
		{kind: "relative date", body: evt("orders", "today", "r1"), dlq: dlqOrders, reason: `partition: "today" is not a calendar date`},
		{kind: "SQL in a date", body: evt("orders", "2026-11-28' OR 1=1 --", "r1"), dlq: dlqOrders, reason: "is not a calendar date"},
		{kind: "hour 24", subject: "idem.ready.hourly", body: evt("hourly", "2026-11-28T24", "r1"), dlq: "idem.dlq.hourly", reason: `partition: "2026-11-28T24" is not an hour`},
		{kind: "hour not on the hour", subject: "idem.ready.hourly", body: evt("hourly", "2026-11-28T13:30:00Z", "r1"), dlq: "idem.dlq.hourly",
			reason: "minutes, seconds and fractions must be zero"},
		{kind: "NUL in a text partition", subject: "idem.ready.tags", body: `{"dataset":"tags","partition":"a\u0000b","run_id":"r1"}`, dlq: "idem.dlq.tags",
			reason: `partition: contains the non-printable character '\x00'`},
		{kind: "empty run_id", body: evt("orders", "2026-11-28", ""), dlq: dlqOrders, reason: "run_id: is empty"},
		{kind: "run_id of 201 characters", body: evt("orders", "2026-11-28", strings.Repeat("r", 201)), example: `{..., "run_id":"rrr…"} (201)`, dlq: dlqOrders,
			reason: "run_id: has 201 characters; the limit is 200"},
		{kind: "CR LF in run_id (header injection)", body: `{"dataset":"orders","partition":"2026-11-28","run_id":"a\r\nIdem-Error: forged"}`, dlq: dlqOrders,
			reason: `run_id: contains the non-printable character '\r'`},
		{kind: "NUL in run_id", body: `{"dataset":"orders","partition":"2026-11-28","run_id":"a\u0000b"}`, dlq: dlqOrders, reason: `run_id: contains the non-printable character '\x00'`},
		{kind: "terminal escape in run_id", body: `{"dataset":"orders","partition":"2026-11-28","run_id":"\u001b[31mred"}`, dlq: dlqOrders,
			reason: `run_id: contains the non-printable character '\x1b'`},
		{kind: "bidi override in run_id", body: `{"dataset":"orders","partition":"2026-11-28","run_id":"abc\u202edef"}`, dlq: dlqOrders,
			reason: `run_id: contains the non-printable character '\u202e'`},
		{kind: "newline in an attribute key", body: good(`"attributes":{"a\nb":"v"}`), dlq: dlqOrders, reason: "attributes: key"},

		// Dataset and subject.
		{kind: "subject and body disagree", body: evt("tags", "x", "r1"), dlq: dlqOrders,
			reason: `subject: "idem.ready.orders" is for dataset "orders" but the body says "tags"`},
		{kind: "unknown dataset", subject: "idem.ready.nosuch", body: evt("nosuch", "2026-11-28", "r1"), dlq: dlqInvalid,
			reason: `dataset: "nosuch" is not a configured dataset`},
		{kind: "SQL in the dataset and subject", subject: "idem.ready.orders';DROP_TABLE_x;--", body: evt("orders';DROP_TABLE_x;--", "2026-11-28", "r1"),
			dlq: dlqInvalid, reason: "must match ^[a-z][a-z0-9_]{0,62}$"},
		{kind: "shell in the dataset and subject", subject: "idem.ready.$(reboot)", body: evt("$(reboot)", "2026-11-28", "r1"), dlq: dlqInvalid,
			reason: `dataset: "$(reboot)" must match`},
		{kind: "uppercase dataset", subject: "idem.ready.Orders", body: evt("Orders", "2026-11-28", "r1"), dlq: dlqInvalid, reason: `dataset: "Orders" must match`},
		{kind: "dataset of 64 characters", subject: "idem.ready.d" + strings.Repeat("x", 63), body: evt("d"+strings.Repeat("x", 63), "2026-11-28", "r1"),
			example: `idem.ready.dxxx… (64)`, dlq: dlqInvalid, reason: "must match ^[a-z][a-z0-9_]{0,62}$"},
		{kind: "extra subject token", subject: "idem.ready.orders.extra", body: good(), dlq: dlqInvalid,
			reason: `subject: "idem.ready.orders.extra" is for dataset "extra" but the body says "orders"`},

		// Headers, on a bad body: kept whole in the dead letter.
		{kind: "repeated header key", body: "abc", header: repeated, example: "X-Trace: a, b, c; body abc", dlq: dlqOrders, reason: "body: is not valid JSON"},
		{kind: "60 KiB header", body: "abc", header: bigHeader, example: "X-Blob: hhh… (60 KiB); body abc", dlq: dlqOrders, reason: "body: is not valid JSON"},
		{kind: "forged Idem-* and Nats-* headers", body: good(`"x":1`), header: forged,
			example: "Idem-Error: forged…, Nats-Msg-Id, Nats-Expected-Stream", dlq: dlqOrders, reason: "x: is not a field"},

		// Valid events that fail in PostgreSQL, for a data reason.
		{kind: "empty source partition", body: evt("orders", "2030-01-01", "r1"), dlq: dlqOrders, reason: "empty_source", db: true},
		{kind: "check constraint", subject: "idem.ready.strict", body: evt("strict", "2026-11-05", "r1"), dlq: "idem.dlq.strict",
			reason: `constraint_violation: ERROR: new row for relation "strict" violates check constraint "strict_amount_check" (SQLSTATE 23514)`, db: true},
		{kind: "numeric overflow", subject: "idem.ready.strict", body: evt("strict", "2026-11-06", "r1"), dlq: "idem.dlq.strict",
			reason: "data_exception: ERROR: numeric field overflow (SQLSTATE 22003)", db: true},
		{kind: "NULL merge key", subject: "idem.ready.kv", body: evt("kv", "nullkey", "r1"), dlq: "idem.dlq.kv",
			reason: `constraint_violation: ERROR: null value in column "k"`, db: true},

		// Hostile but valid: loaded, the values stored as data.
		{kind: "SQL in run_id", body: evt("orders", "2026-11-20", sqlRunID), runID: sqlRunID, partition: "2026-11-20"},
		{kind: "shell in run_id", body: evt("orders", "2026-11-21", shellRunID), runID: shellRunID, partition: "2026-11-21"},
		{kind: "quotes, backslashes, format verbs in run_id", body: `{"dataset":"orders","partition":"2026-11-22","run_id":` + jsonEsc(quoteRunID) + `}`,
			runID: quoteRunID, partition: "2026-11-22"},
		{kind: "non-ASCII run_id", body: evt("orders", "2026-11-23", "nächtlich 夜間 🌙"), runID: "nächtlich 夜間 🌙", partition: "2026-11-23"},
		{kind: "SQL in a text partition", subject: "idem.ready.tags", body: evt("tags", sqlPart, "r1"), runID: "r1", partition: sqlPart},
		{kind: "shell in a text partition", subject: "idem.ready.tags", body: evt("tags", shellPart, "r1"), runID: "r1", partition: shellPart},
		{kind: "SQL in a merge partition", subject: "idem.ready.kv", body: evt("kv", orPart, "r1"), runID: "r1", partition: orPart},
		{kind: "SQL in an append_dedupe run_id", subject: "idem.ready.events", body: evt("events", "2026-11-28", sqlRunID), runID: sqlRunID, partition: "2026-11-28"},
		{kind: "SQL and shell in attributes", body: evt("orders", "2026-11-24", "attrs", `"attributes":{"'; DROP TABLE x; --":"$(reboot)","note":`+jsonEsc(quoteRunID)+`}`),
			runID: "attrs", partition: "2026-11-24"},
	}
}()

// badInputSQL adds the datasets' tables to the harness's, with rows for the
// hostile partitions and rows that break the targets' constraints.
const badInputSQL = `
CREATE SCHEMA raw;
CREATE TABLE staging.tags (part text, id int, note text);
CREATE TABLE analytics.tags (part text NOT NULL, id int, note text);
CREATE TABLE staging.kv (grp text, k text, v text);
CREATE TABLE analytics.kv (k text PRIMARY KEY, v text);
CREATE TABLE staging.events (event_id text, event_date date, note text);
CREATE TABLE raw.events (event_id text, event_date date, note text, run_id text, load_seq bigint);
CREATE TABLE staging.strict (id int, event_date date, amount numeric);
CREATE TABLE analytics.strict (id int, event_date date NOT NULL, amount numeric(5,2) CHECK (amount >= 0));
CREATE TABLE staging.hourly (hour timestamptz, n int);
CREATE TABLE analytics.hourly (hour timestamptz NOT NULL, n int);
INSERT INTO staging.tags VALUES ($$x'); DROP TABLE analytics.tags; --$$, 1, 'sql'), ('$(touch /tmp/idem-e2e-pwned)', 2, 'shell'), ('plain', 3, 'plain');
INSERT INTO staging.kv VALUES ($$' OR '1'='1$$, 'k1', 'hostile group'), ('other', 'k2', 'must not load'), ('nullkey', NULL, 'x');
INSERT INTO staging.events VALUES ('e1', '2026-11-28', 'one'), ('e2', '2026-11-28', 'two');
INSERT INTO staging.strict VALUES (1, '2026-11-05', -1), (2, '2026-11-06', 1e9);
`

const badInputYAML = `  tags:
    strategy: delete_insert
    target: analytics.tags
    partition_column: part
    partition_type: text
    source: SELECT part, id, note FROM staging.tags WHERE part = @partition
  kv:
    strategy: merge
    target: analytics.kv
    key: [k]
    partition_type: text
    source: SELECT k, v FROM staging.kv WHERE grp = @partition
  events:
    strategy: append_dedupe
    target: raw.events
    key: [event_id]
    view: raw.latest_events
    source: SELECT event_id, event_date, note FROM staging.events WHERE event_date = @partition
  strict:
    strategy: delete_insert
    target: analytics.strict
    partition_column: event_date
    source: SELECT id, event_date, amount FROM staging.strict WHERE event_date = @partition
  hourly:
    strategy: delete_insert
    target: analytics.hourly
    partition_column: hour
    partition_type: timestamp
    source: SELECT hour, n FROM staging.hourly WHERE hour = @partition::timestamptz
`

const (
	relationsSQL = `SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	                 WHERE n.nspname IN ('idem', 'staging', 'analytics', 'raw', 'public')`
	stagingCountSQL = "SELECT (SELECT count(*) FROM staging.src), (SELECT count(*) FROM staging.tags), (SELECT count(*) FROM staging.kv)"
)

func TestBadInputCorpus(t *testing.T) {
	t.Parallel()
	_ = os.Remove(pwned)
	// Events for datasets no replica knows wait this grace for a rollout.
	w := newWorld(t, opts{extraYAML: badInputYAML, unknownGrace: "1s"})
	w.db.Exec(t, badInputSQL)
	p := w.serve() // which creates raw.latest_events and its index
	relations := w.db.Checksum(t, relationsSQL)
	staging := w.db.Checksum(t, stagingCountSQL)
	ctx := context.Background()

	// Over max_payload the publisher is refused: nothing reaches idem.
	_, err := w.js.Publish(ctx, "idem.ready.orders", bytes.Repeat([]byte("x"), int(w.nc.MaxPayload())+1))
	require.ErrorIs(t, err, nats.ErrMaxPayload)
	code, out := runIdem(t, nil, "publish", "--config", w.cfg, "orders", "2026-11-28", "--run-id", strings.Repeat("r", 201))
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "run_id: has 201 characters")

	seqs := map[uint64]badInput{}
	bad, dbFailures := 0, 0
	for _, b := range corpus {
		msg := &nats.Msg{Subject: b.subj(), Data: []byte(b.body), Header: b.header}
		ack, err := w.js.PublishMsg(ctx, msg)
		require.NoError(t, err, b.kind)
		seqs[ack.Sequence] = b
		if b.dlq != "" {
			bad++
		}
		if b.db {
			dbFailures++
		}
	}
	// The consumer keeps going: an event published after the corpus loads.
	w.publish("2026-11-29", "after-the-corpus", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE run_id = 'after-the-corpus' AND status = 'success'")
	dl := w.waitDeadLetters(bad)
	w.waitSettled()
	require.Len(t, w.deadLetters(), bad, "a dead letter was published twice")

	seen := map[uint64]bool{}
	for _, m := range dl {
		h := m.Header
		seq, err := strconv.ParseUint(h.Get(deadletter.HeaderOriginalSeq), 10, 64)
		require.NoError(t, err)
		b, ok := seqs[seq]
		require.True(t, ok, "dead letter of unknown seq %d", seq)
		require.False(t, seen[seq], "%s: dead-lettered twice", b.kind)
		seen[seq] = true
		require.NotEmpty(t, b.dlq, "%s: valid, yet dead-lettered: %s", b.kind, h.Get(deadletter.HeaderError))
		require.Equal(t, b.dlq, m.Subject, b.kind)
		require.Contains(t, h.Get(deadletter.HeaderError), b.reason, b.kind)
		require.Equal(t, "fatal", h.Get(deadletter.HeaderErrorKind), b.kind)
		if b.kind == "unknown dataset" {
			// It waited the fleet's grace for a replica that knows it first.
			require.Contains(t, h.Get(deadletter.HeaderError), "no live replica knows it after 1s", b.kind)
		} else {
			require.Equal(t, "1", h.Get(deadletter.HeaderDeliveries), b.kind)
		}
		require.Equal(t, b.subj(), h.Get(deadletter.HeaderOriginalSubject), b.kind)
		if tok := strings.TrimPrefix(b.subj(), "idem.ready."); schemas.ValidDataset(tok) {
			require.Equal(t, tok, h.Get(deadletter.HeaderDataset), b.kind)
		} else {
			require.Empty(t, h.Get(deadletter.HeaderDataset), b.kind)
		}
		if b.db { // decoded: the dead letter says which run failed
			require.Equal(t, "r1", h.Get(deadletter.HeaderRunID), b.kind)
			require.NotEmpty(t, h.Get(deadletter.HeaderPartition), b.kind)
		}
		if omitted := h.Get(deadletter.HeaderBodyOmitted); b.omitted || omitted != "" {
			require.True(t, b.omitted, "%s: body omitted: %s", b.kind, omitted)
			require.NotEmpty(t, omitted, b.kind)
			require.Empty(t, m.Data, b.kind)
			raw, err := w.js.Stream(ctx, "IDEM_EVENTS")
			require.NoError(t, err)
			orig, err := raw.GetMsg(ctx, seq)
			require.NoError(t, err)
			require.True(t, bytes.Equal([]byte(b.body), orig.Data), "%s: the original is not in the events stream", b.kind)
		} else {
			require.True(t, bytes.Equal([]byte(b.body), m.Data), "%s: body changed", b.kind)
		}
		for k, vs := range b.header {
			key := k
			if l := strings.ToLower(k); strings.HasPrefix(l, "idem-") || strings.HasPrefix(l, "nats-") {
				key = deadletter.HeaderOriginalPrefix + k
			}
			require.Equal(t, vs, h.Values(key), "%s: header %s", b.kind, k)
		}
	}
	for seq, b := range seqs {
		if b.dlq != "" {
			require.True(t, seen[seq], "%s: no dead letter", b.kind)
		}
	}
	// The forged headers did not pass for idem's.
	for _, m := range dl {
		require.NotEqual(t, "forged by the publisher", m.Header.Get(deadletter.HeaderError))
		require.NotEqual(t, "none", m.Header.Get(deadletter.HeaderErrorKind))
		require.Empty(t, m.Header.Values("idem-run-id"))
	}

	// Invalid events never reached the database; data failures once each.
	require.EqualValues(t, dbFailures, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'failed' AND error_kind = 'fatal' AND attempt = 1"))
	require.EqualValues(t, dbFailures, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status <> 'success'"))
	// Hostile values are data: stored exactly, matched exactly.
	for _, b := range corpus {
		if b.dlq == "" {
			require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success' AND run_id = $1 AND partition_key = $2", b.runID, b.partition), b.kind)
		}
	}
	require.EqualValues(t, 2, w.count("SELECT count(*) FROM analytics.tags WHERE part = $1 OR part = $2", sqlPart, shellPart))
	require.EqualValues(t, 1, w.count("SELECT count(*) FROM analytics.kv"), "the hostile merge partition widened the source's WHERE")
	require.EqualValues(t, 2, w.count("SELECT count(*) FROM raw.events WHERE run_id = $1", sqlRunID))
	require.EqualValues(t, 1, w.count(`SELECT count(*) FROM idem.pipeline_audit WHERE attributes @> jsonb_build_object($1::text, $2::text, 'note', $3::text)`,
		"'; DROP TABLE x; --", "$(reboot)", quoteRunID))
	_, err = os.Stat(pwned)
	require.True(t, os.IsNotExist(err), "a value reached a shell")
	// Nothing was dropped or created, the sources are untouched.
	require.Equal(t, relations, w.db.Checksum(t, relationsSQL))
	require.Equal(t, staging, w.db.Checksum(t, stagingCountSQL))
	require.NotRegexp(t, `(?i)panic|goroutine \d+ \[`, p.output())
}

// TestBadInputDoc keeps testdata/badinput.md, the table for
// docs/RELIABILITY.md, equal to the corpus.
func TestBadInputDoc(t *testing.T) {
	var b strings.Builder
	b.WriteString("| # | kind | example | expected Idem-Error (part) | dead-letter subject |\n|---|---|---|---|---|\n")
	row := func(n int, kind, example, reason, subject string) {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", n, cell(kind), code(example), code(reason), cell(subject))
	}
	n := 0
	for _, c := range corpus {
		n++
		ex := c.example
		if ex == "" {
			if ds := datasetOf(c.body); ds != "" && c.subj() != "idem.ready."+ds {
				ex = c.subj() + " " + quoteBody(c.body)
			} else {
				ex = quoteBody(c.body)
			}
		}
		switch {
		case c.dlq == "":
			row(n, c.kind, ex, "none: loads, the value stored as data", "none")
		default:
			row(n, c.kind, ex, c.reason, "`"+c.dlq+"`")
		}
	}
	row(n+1, "over max_payload (1 MiB)", "1 MiB + 1 byte", "none: the publisher gets nats: maximum payload exceeded", "none (never stored)")
	row(n+2, "run_id too long, through idem publish", "idem publish orders 2026-11-28 --run-id rrr… (201)", "refused before publishing: run_id: has 201 characters", "none (never stored)")
	got := b.String()
	path := filepath.Join("testdata", "badinput.md")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run: go test ./e2e -run TestBadInputDoc -update")
	require.Equal(t, string(want), got, "the corpus changed: go test ./e2e -run TestBadInputDoc -update")
	require.GreaterOrEqual(t, n, 30)
}

func datasetOf(body string) string {
	i := strings.Index(body, `"dataset":"`)
	if i < 0 {
		return ""
	}
	rest := body[i+len(`"dataset":"`):]
	return rest[:max(strings.IndexByte(rest, '"'), 0)]
}

// quoteBody shows a body on one line, at most 70 characters: printable
// characters as they are, the others escaped as Go would.
func quoteBody(s string) string {
	if s == "" {
		return "(0 bytes)"
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	q := b.String()
	if utf8.RuneCountInString(q) > 70 {
		q = string([]rune(q)[:67]) + "…"
	}
	return q
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// code is s in a markdown code span, pipes escaped, backticks doubled up.
func code(s string) string {
	s = cell(s)
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

// TestDeadLetterOfHeadersNearTheLimit: JetStream stores a message whose
// header block is up to 65,535 bytes; its dead letter, the same headers plus
// idem's, must still reach the dead-letter stream.
func TestDeadLetterOfHeadersNearTheLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{retries: 1})
	p := w.serve()
	blob := strings.Repeat("h", 65400)
	ack, err := w.js.PublishMsg(context.Background(), &nats.Msg{Subject: "idem.ready.orders", Data: []byte("abc"),
		Header: nats.Header{"X-Blob": {blob}}})
	require.NoError(t, err, "the events stream takes it")
	dl := w.waitDeadLetters(1)
	w.waitSettled()
	require.Equal(t, fmt.Sprint(ack.Sequence), dl[0].Header.Get(deadletter.HeaderOriginalSeq))
	require.Equal(t, "fatal", dl[0].Header.Get(deadletter.HeaderErrorKind))
	require.Equal(t, "1", dl[0].Header.Get(deadletter.HeaderDeliveries))
	require.Equal(t, "abc", string(dl[0].Data))
	require.Empty(t, dl[0].Header.Get("X-Blob"), "the oversized original header is dropped from the dead letter")
	require.Contains(t, dl[0].Header.Get(deadletter.HeaderHeadersOmitted), "64 KiB header limit")
	require.NotContains(t, p.output(), "dead letter not published")
}
