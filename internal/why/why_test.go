package why_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/reverify"
	"github.com/idem-data/idem/internal/service"
	"github.com/idem-data/idem/internal/why"
	"github.com/idem-data/idem/strategies"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/natstest"
	"github.com/idem-data/idem/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.MainNoLeaks(m) }

// The stories below are made the way they happen: events published on a
// real JetStream, loaded by a real `idem serve` (in this process) into a
// real PostgreSQL, refused by a real check, dead-lettered by the consumer,
// and loaded again by a real re-verification pass.

const storyYAML = `pipeline: shop
nats:
  url: %s
  ack_wait: 5s
postgres:
  url: %s
http:
  addr: 127.0.0.1:0
datasets:
  orders:
    strategy: delete_insert
    target: analytics.orders
    partition_column: event_date
    source: SELECT id, event_date, amount FROM staging.orders WHERE event_date = @partition
    retries: 1
    retry_delay: 100ms
    checks:
      - unique: [id]
    then: [totals]
  totals:
    strategy: delete_insert
    target: analytics.totals
    partition_column: event_date
    source: SELECT event_date, sum(amount) AS amount FROM analytics.orders WHERE event_date = @partition GROUP BY event_date
    retries: 1
    retry_delay: 100ms
  daily:
    strategy: delete_insert
    target: analytics.daily
    partition_column: event_date
    source: SELECT id, event_date, amount FROM staging.orders WHERE event_date = @partition
    expect: {every: day, from: 2026-03-01, deadline: 1h}
  notes:
    strategy: delete_insert
    target: analytics.notes
    partition_column: event_date
    source: SELECT * FROM staging.notes WHERE event_date = @partition
    on_schema_change: append_new_columns
    checks:
      - unique: [id]
  strict:
    strategy: delete_insert
    target: analytics.strict
    partition_column: event_date
    source: SELECT * FROM staging.notes WHERE event_date = @partition
    on_schema_change: fail
  counts:
    strategy: delete_insert
    target: analytics.counts
    partition_column: event_date
    source: SELECT * FROM staging.counts WHERE event_date = @partition
    on_schema_change: sync_all_columns
`

const storySQL = `
CREATE SCHEMA staging; CREATE SCHEMA analytics;
CREATE TABLE staging.orders (id bigint, event_date date, amount numeric);
CREATE TABLE analytics.orders (id bigint, event_date date NOT NULL, amount numeric);
CREATE TABLE analytics.totals (event_date date NOT NULL, amount numeric);
CREATE TABLE analytics.daily (id bigint, event_date date NOT NULL, amount numeric);
INSERT INTO staging.orders SELECT d * 100 + i, date '2026-03-01' + d, i FROM generate_series(0, 9) d, generate_series(1, 10) i;
CREATE TABLE staging.notes (id bigint, event_date date, amount numeric);
CREATE TABLE analytics.notes (id bigint, event_date date NOT NULL, amount numeric);
CREATE TABLE analytics.strict (id bigint, event_date date NOT NULL, amount numeric);
INSERT INTO staging.notes SELECT * FROM staging.orders;
CREATE TABLE staging.counts (id bigint, event_date date, amount integer);
CREATE TABLE analytics.counts (id bigint, event_date date NOT NULL, amount integer);
INSERT INTO staging.counts SELECT id, event_date, amount FROM staging.orders;
`

type world struct {
	t    *testing.T
	js   jetstream.JetStream
	db   *pgtest.DB
	cfg  *config.Config
	addr string
}

func newWorld(t *testing.T, serve bool) *world {
	t.Helper()
	ctx := context.Background()
	ns := natstest.RunServer(t)
	nc := natstest.Connect(t, ns)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	db := audittest.NewDB(t)
	_, err = audit.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	db.Exec(t, storySQL)
	cfg, err := config.Parse([]byte(fmt.Sprintf(storyYAML, ns.ClientURL(), db.URL)), nil)
	require.NoError(t, err)
	require.NoError(t, consumer.EnsureStreams(ctx, js, service.StreamsConfig(cfg)))
	w := &world{t: t, js: js, db: db, cfg: cfg}
	if serve {
		w.serve(ns.ClientURL())
	}
	return w
}

func (w *world) serve(url string) {
	nc, err := nats.Connect(url)
	require.NoError(w.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		done <- service.Run(ctx, service.Options{Config: w.cfg, Log: zerolog.Nop(), Grace: 5 * time.Second,
			Pool: w.db.Pool, NATS: nc, Ready: func(addr string) { ready <- addr }})
	}()
	select {
	case w.addr = <-ready:
	case err := <-done:
		w.t.Fatalf("serve: %v", err)
	}
	w.t.Cleanup(func() {
		cancel()
		require.NoError(w.t, <-done)
		nc.Close()
	})
}

// publish stores an event as a scheduler would: its Nats-Msg-Id and a
// traceparent.
func (w *world) publish(dataset, partition, runID string) uint64 {
	w.t.Helper()
	m := &nats.Msg{Subject: "idem.ready." + dataset, Header: nats.Header{},
		Data: []byte(fmt.Sprintf(`{"dataset":%q,"partition":%q,"run_id":%q}`, dataset, partition, runID))}
	m.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ack, err := w.js.PublishMsg(context.Background(), m, jetstream.WithMsgID(dataset+":"+partition+":"+runID))
	require.NoError(w.t, err)
	return ack.Sequence
}

func (w *world) tell(dataset, partition string, at time.Time) why.Report {
	w.t.Helper()
	ctx := context.Background()
	s, err := why.OpenJetStream(ctx, w.js, w.cfg)
	require.NoError(w.t, err)
	r, err := why.Tell(ctx, why.Sources{Pipeline: w.cfg.Pipeline, DB: w.db.Pool, Audit: w.db.Pool, Streams: s,
		Now: func() time.Time { return at }}, why.DatasetOf(w.cfg, dataset), partition)
	require.NoError(w.t, err)
	return r
}

// until tells the story until its verdict is state.
// replay replays dead letter seq as idem dlq replay SEQ does.
func (w *world) replay(seq uint64) {
	w.t.Helper()
	s, err := why.OpenJetStream(context.Background(), w.js, w.cfg)
	require.NoError(w.t, err)
	l, err := s.DLQ.Get(context.Background(), seq)
	require.NoError(w.t, err)
	rr := s.DLQ.Replay(context.Background(), l, deadletter.ReplayOptions{})
	require.Equal(w.t, deadletter.ActionReplayed, rr.Action, rr.Reason)
}

func (w *world) until(dataset, partition, state string) why.Report {
	w.t.Helper()
	var r why.Report
	require.Eventually(w.t, func() bool {
		r = w.tell(dataset, partition, time.Now())
		return r.Verdict.State == state
	}, 60*time.Second, 50*time.Millisecond, "want %s for %s %s", state, dataset, partition)
	return r
}

func TestStoryOfALoadedPartitionAndItsDownstream(t *testing.T) {
	w := newWorld(t, true)
	seq := w.publish("orders", "2026-03-01", "r-7")
	r := w.until("orders", "2026-03-01", why.StateLoaded)
	// Its downstream event is published by the relay after the commit.
	require.Eventually(t, func() bool {
		r = w.tell("orders", "2026-03-01", time.Now())
		return len(r.Downstream) == 1 && r.Downstream[0].SentAt != nil
	}, 30*time.Second, 50*time.Millisecond)

	require.Equal(t, 0, r.Verdict.Exit)
	require.Regexp(t, `^loaded by run r-7 at 2026-\d\d-\d\d \d\d:\d\d:\d\dZ, 10 rows, checks passed; nothing pending$`, r.Verdict.Line)
	require.Empty(t, r.Verdict.Next)
	require.Len(t, r.Events, 1)
	require.Equal(t, seq, r.Events[0].Seq)
	require.Equal(t, "orders:2026-03-01:r-7", r.Events[0].MsgID)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", r.Events[0].TraceID)
	require.Len(t, r.Attempts, 1)
	require.Equal(t, audit.StatusSuccess, r.Attempts[0].Status)
	require.NotNil(t, r.Winner)
	require.Equal(t, "r-7", r.Winner.RunID)
	require.Len(t, r.Checks, 1)
	require.Equal(t, "pass", r.Checks[0].Status)
	require.Equal(t, "totals", r.Downstream[0].Dataset)

	// The downstream tells which upstream load triggered it.
	d := w.until("totals", "2026-03-01", why.StateLoaded)
	require.Len(t, d.Upstreams, 1)
	require.Equal(t, "orders", d.Upstreams[0].Dataset)
	require.True(t, d.Upstreams[0].Triggered)
	require.Equal(t, audit.StatusSuccess, d.Upstreams[0].Status)
	require.Equal(t, "orders:2026-03-01:r-7", d.Attempts[0].TriggeredBy)
	require.Equal(t, "idem, after orders:2026-03-01:r-7", d.Events[0].Publisher)

	// The same story over the HTTP API.
	resp, err := http.Get("http://" + w.addr + "/api/v1/datasets/orders/partitions/2026-03-01")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var api why.Report
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&api))
	require.Equal(t, why.StateLoaded, api.Verdict.State)
	require.Equal(t, r.Attempts[0].ID, api.Attempts[0].ID)
	resp2, err := http.Get("http://" + w.addr + "/api/v1/datasets/orders/partitions/not-a-date")
	require.NoError(t, err)
	resp2.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp2.StatusCode)
}

func TestStoryOfAPartitionItsChecksRefused(t *testing.T) {
	w := newWorld(t, true)
	// Loaded once, then the source gains three duplicated ids.
	w.publish("orders", "2026-03-02", "r1")
	w.until("orders", "2026-03-02", why.StateLoaded)
	w.db.Exec(t, "INSERT INTO staging.orders SELECT id, event_date, amount FROM staging.orders WHERE event_date = '2026-03-02' AND id % 100 <= 3")
	w.publish("orders", "2026-03-02", "r2")
	r := w.until("orders", "2026-03-02", why.StateDeadLettered)

	require.Equal(t, 1, r.Verdict.Exit)
	require.Len(t, r.DeadLetters, 1)
	dl := r.DeadLetters[0]
	require.Regexp(t, `^dead-lettered \S+ \S+Z: check unique\S* failed \(\d+ of \d+ rows\); run r1's rows of \S+ \S+Z stay; fix the source's rows, then:$`, r.Verdict.Line)
	require.Equal(t, fmt.Sprintf("idem dlq replay %d", dl.Seq), r.Verdict.Next)
	require.Equal(t, "r1", r.Winner.RunID, "the ledger still names the load that stands")
	require.Equal(t, audit.StatusFailed, r.Attempts[0].Status)
	require.Equal(t, "check", r.Attempts[0].ErrorKind)
	var failed int
	for _, c := range r.Checks {
		if c.AuditID == r.Attempts[0].ID && c.Status == "fail" {
			failed++
		}
	}
	require.Equal(t, 1, failed)
	require.EqualValues(t, 10, w.db.Int(t, "SELECT count(*) FROM analytics.orders WHERE event_date = '2026-03-02'"), "the previous rows stay")
}

func TestStoryOfADeadLetteredPartition(t *testing.T) {
	w := newWorld(t, true)
	w.db.Exec(t, "DELETE FROM staging.orders WHERE event_date = '2026-03-03'")
	w.publish("orders", "2026-03-03", "scheduled__2026-03-03")
	r := w.until("orders", "2026-03-03", why.StateDeadLettered)
	require.Equal(t, 1, r.Verdict.Exit)
	require.Contains(t, r.Verdict.Line, "empty_source")
	require.Nil(t, r.Winner)
	require.Equal(t, fmt.Sprintf("idem dlq replay %d", r.DeadLetters[0].Seq), r.Verdict.Next)
	require.Equal(t, "Airflow", r.Events[0].Publisher)

	// Replayed once the source is fixed, the story ends loaded.
	w.db.Exec(t, "INSERT INTO staging.orders SELECT 900 + i, date '2026-03-03', i FROM generate_series(1, 4) i")
	w.replay(r.DeadLetters[0].Seq)
	after := w.until("orders", "2026-03-03", why.StateLoaded)
	require.Contains(t, after.Verdict.Line, "4 rows")
	require.Len(t, after.Events, 2, "the original event and its replay")
	require.Contains(t, after.Events[0].Publisher, "idem dlq replay")
}

func TestStoryOfAMissingPartition(t *testing.T) {
	w := newWorld(t, false)
	// daily expects 2026-03-05 by 2026-03-06 01:00Z.
	late := w.tell("daily", "2026-03-05", time.Date(2026, 3, 6, 2, 0, 0, 0, time.UTC))
	require.Equal(t, why.StateMissing, late.Verdict.State)
	require.Equal(t, 3, late.Verdict.Exit)
	require.Equal(t, "expected by 2026-03-06 01:00:00Z, no event yet; to load it now:", late.Verdict.Line)
	require.Equal(t, "idem backfill daily --from 2026-03-05 --to 2026-03-05", late.Verdict.Next)
	require.True(t, late.Expected.Late)

	early := w.tell("daily", "2026-03-05", time.Date(2026, 3, 6, 0, 30, 0, 0, time.UTC))
	require.Equal(t, "due by 2026-03-06 01:00:00Z, no event yet; to load it now:", early.Verdict.Line)

	// A downstream no upstream load has reached says so.
	d := w.tell("totals", "2026-03-05", time.Now())
	require.Equal(t, why.StateMissing, d.Verdict.State)
	require.Equal(t, "no event has named this partition: upstream orders has not loaded it either; to load it now:", d.Verdict.Line)
}

func TestStoryOfAReverifiedPartition(t *testing.T) {
	w := newWorld(t, false)
	ctx := context.Background()
	seq := w.publish("daily", "2026-03-04", "r1")
	// The consumer acknowledged the event, and the warehouse that has
	// been promoted since has no trace of its load: a re-verification
	// pass loads it again.
	c, err := w.js.Consumer(ctx, w.cfg.NATS.Stream, w.cfg.NATS.Consumer)
	require.NoError(t, err)
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	for m := range batch.Messages() {
		require.NoError(t, m.DoubleAck(ctx))
	}
	dss, err := service.Datasets(w.cfg)
	require.NoError(t, err)
	h := &handlers.Handler{DB: w.db.Pool, Pipeline: w.cfg.Pipeline, Datasets: dss, Log: zerolog.Nop()}
	for name, err := range h.Prepare(ctx) {
		require.NoError(t, err, name)
	}
	rv := reverify.New(reverify.Config{JS: w.js, Stream: w.cfg.NATS.Stream, Consumer: w.cfg.NATS.Consumer,
		SubjectPrefix: w.cfg.NATS.SubjectPrefix, DLQStream: w.cfg.NATS.DLQStream, DLQSubjectPrefix: w.cfg.NATS.DLQSubjectPrefix,
		DB: w.db.Pool, Pipeline: w.cfg.Pipeline, Loader: h, Log: zerolog.Nop()})
	res := rv.Pass(ctx, "test")
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.Reloaded)

	r := w.tell("daily", "2026-03-04", time.Now())
	require.Equal(t, why.StateLoaded, r.Verdict.State)
	require.True(t, r.Attempts[0].Reverify)
	require.Equal(t, uint64(seq), uint64(*r.Attempts[0].StreamSeq))
	require.Regexp(t, `^loaded by run r1 at \S+ \S+Z, 10 rows, loaded again after a warehouse failover, no checks; nothing pending$`, r.Verdict.Line)
}

// The source of notes and strict gains a column: notes
// (append_new_columns) adds it to its target in the load, strict (fail)
// refuses it. Each change is in the story beside its attempt, in the
// verdict, and in the API's JSON; strict's verdict names the fix, which
// works.
func TestStoryOfASourceThatGainedAColumn(t *testing.T) {
	w := newWorld(t, true)
	w.publish("notes", "2026-03-01", "r1")
	before := w.until("notes", "2026-03-01", why.StateLoaded)
	require.Empty(t, before.SchemaChanges)
	require.Regexp(t, `^loaded by run r1 at \S+ \S+Z, 10 rows, checks passed; nothing pending$`, before.Verdict.Line)

	w.db.Exec(t, "ALTER TABLE staging.notes ADD COLUMN note text; UPDATE staging.notes SET note = 'n' || id")
	w.publish("notes", "2026-03-02", "r1")
	r := w.until("notes", "2026-03-02", why.StateLoaded)
	require.Regexp(t, `^loaded by run r1 at \S+ \S+Z, 10 rows, checks passed; added column note text \(append_new_columns\); nothing pending$`, r.Verdict.Line)
	require.Len(t, r.SchemaChanges, 1)
	c := r.SchemaChanges[0]
	require.Equal(t, r.Attempts[0].ID, c.AuditID, "beside the attempt that made it")
	require.Equal(t, "r1", c.RunID)
	require.Equal(t, "note", c.Column)
	require.Equal(t, strategies.ChangeNew, c.Change)
	require.Equal(t, strategies.ActionAdded, c.Action)
	require.Equal(t, "text", c.NewType)
	require.Empty(t, c.OldType)
	require.Equal(t, strategies.OnSchemaChangeAppend, c.Policy)
	require.Regexp(t, `^ALTER TABLE \S+ ADD COLUMN \S+ text$`, c.DDL)
	require.False(t, c.At.IsZero())
	// The story is the audit's: what idem audit schema reads.
	listed, err := audit.SchemaChanges(context.Background(), w.db.Pool, w.cfg.Pipeline, "notes", "2026-03-02", 10)
	require.NoError(t, err)
	require.Equal(t, listed, r.SchemaChanges)
	require.EqualValues(t, 10, w.db.Int(t, "SELECT count(*) FROM analytics.notes WHERE event_date = '2026-03-02' AND note IS NOT NULL"))
	// The partition loaded before the change has none.
	require.Empty(t, w.tell("notes", "2026-03-01", time.Now()).SchemaChanges)

	// The API's JSON carries it under the documented names.
	var api struct {
		SchemaChanges []map[string]any `json:"schema_changes"`
		Verdict       why.Verdict      `json:"verdict"`
	}
	getJSON(t, "http://"+w.addr+"/api/v1/datasets/notes/partitions/2026-03-02", &api)
	require.Equal(t, r.Verdict.Line, api.Verdict.Line)
	require.Len(t, api.SchemaChanges, 1)
	got := api.SchemaChanges[0]
	for k, v := range map[string]any{"column": "note", "change": "new_column", "action": "added", "new_type": "text",
		"policy": "append_new_columns", "ddl": c.DDL, "audit_id": float64(c.AuditID), "run_id": "r1"} {
		require.Equal(t, v, got[k], k)
	}
	require.Contains(t, got, "at")
	require.NotContains(t, got, "old_type", "a new column has no target type")

	// strict runs on_schema_change fail: its load is refused and
	// dead-lettered, and the verdict names the difference and its fix.
	w.publish("strict", "2026-03-02", "r1")
	d := w.until("strict", "2026-03-02", why.StateDeadLettered)
	require.Len(t, d.DeadLetters, 1)
	require.Len(t, d.SchemaChanges, 1)
	rc := d.SchemaChanges[0]
	require.Equal(t, d.Attempts[0].ID, rc.AuditID)
	require.Equal(t, audit.StatusFailed, d.Attempts[0].Status)
	require.Equal(t, strategies.ActionRefused, rc.Action)
	require.Equal(t, strategies.OnSchemaChangeFail, rc.Policy)
	require.Equal(t, "on_schema_change is fail", rc.Reason)
	require.Regexp(t, `^ALTER TABLE \S+ ADD COLUMN \S+ text$`, rc.DDL)
	require.Equal(t, "dead-lettered "+stampOf(d.DeadLetters[0].FailedAt)+": schema_mismatch: new column note text (on_schema_change: fail); fix the target with "+
		rc.DDL+" or set on_schema_change: append_new_columns on strict, then:", d.Verdict.Line)
	require.NotContains(t, d.Verdict.Line, "\n")
	require.Equal(t, fmt.Sprintf("idem dlq replay %d", d.DeadLetters[0].Seq), d.Verdict.Next)
	var strictAPI struct {
		SchemaChanges []map[string]any `json:"schema_changes"`
	}
	getJSON(t, "http://"+w.addr+"/api/v1/datasets/strict/partitions/2026-03-02", &strictAPI)
	require.Len(t, strictAPI.SchemaChanges, 1)
	require.Equal(t, "refused", strictAPI.SchemaChanges[0]["action"])
	require.Equal(t, "on_schema_change is fail", strictAPI.SchemaChanges[0]["reason"])

	// The fix it names, then the replay it names, load it.
	w.db.Exec(t, rc.DDL)
	w.replay(d.DeadLetters[0].Seq)
	after := w.until("strict", "2026-03-02", why.StateLoaded)
	require.Regexp(t, `^loaded by run r1 at \S+ \S+Z, 10 rows, no checks; nothing pending$`, after.Verdict.Line, "the column was there: no change")
	require.Len(t, after.SchemaChanges, 1, "the refusal stays in the story")
}

// counts runs sync_all_columns: a source column widened from integer to
// bigint widens the target's, and the verdict says so.
func TestStoryOfASourceColumnWidened(t *testing.T) {
	w := newWorld(t, true)
	w.db.Exec(t, "ALTER TABLE staging.counts ALTER COLUMN amount TYPE bigint")
	w.publish("counts", "2026-03-04", "r1")
	r := w.until("counts", "2026-03-04", why.StateLoaded)
	require.Regexp(t, `^loaded by run r1 at \S+ \S+Z, 10 rows, no checks; widened column amount from integer to bigint \(sync_all_columns\); nothing pending$`, r.Verdict.Line)
	require.Len(t, r.SchemaChanges, 1)
	require.Equal(t, strategies.ActionWidened, r.SchemaChanges[0].Action)
	require.Equal(t, "integer", r.SchemaChanges[0].OldType)
	require.Equal(t, "bigint", r.SchemaChanges[0].NewType)
	require.Equal(t, r.Attempts[0].ID, r.SchemaChanges[0].AuditID)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

func stampOf(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
