package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/backfill"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/schemas"
)

// lastSeq is the events stream's last sequence: it only grows, so the
// difference counts what a command published.
func (w *cliWorld) bfLastSeq() uint64 {
	w.t.Helper()
	s, err := w.js.Stream(context.Background(), "IDEM_EVENTS")
	require.NoError(w.t, err)
	info, err := s.Info(context.Background())
	require.NoError(w.t, err)
	return info.State.LastSeq
}

// events reads the events stream's messages after sequence after, in stream
// order.
func (w *cliWorld) bfEvents(after uint64) []*jetstream.RawStreamMsg {
	w.t.Helper()
	s, err := w.js.Stream(context.Background(), "IDEM_EVENTS")
	require.NoError(w.t, err)
	var out []*jetstream.RawStreamMsg
	for seq := after + 1; seq <= w.bfLastSeq(); seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		require.NoError(w.t, err)
		out = append(out, m)
	}
	return out
}

// partitionsOf decodes the events' partitions, checking each carries runID
// and the Nats-Msg-Id idem publish would give it, on the backfill lane.
func bfPartitionsOf(t *testing.T, msgs []*jetstream.RawStreamMsg, runID string, force bool) []string {
	t.Helper()
	var out []string
	for _, m := range msgs {
		var ev schemas.PartitionReady
		require.NoError(t, json.Unmarshal(m.Data, &ev))
		require.Equal(t, runID, ev.RunID)
		require.Equal(t, force, ev.Force)
		require.Equal(t, "idem.backfill.orders", m.Subject, "the backfill lane")
		if force { // a forced event's id is its own: the duplicate window must not swallow it
			require.True(t, strings.HasPrefix(m.Header.Get(jetstream.MsgIDHeader), ev.MsgID()+":force:"), m.Header.Get(jetstream.MsgIDHeader))
		} else {
			require.Equal(t, ev.MsgID(), m.Header.Get(jetstream.MsgIDHeader))
		}
		out = append(out, ev.Partition)
	}
	return out
}

// auditRow records an attempt of orders as the handler would have, finished
// (or started) ago.
func (w *cliWorld) bfAuditRow(partition, runID, status string, attempt int, kind string, ago time.Duration) {
	w.t.Helper()
	errText := ""
	if status == audit.StatusFailed {
		errText = "boom: " + kind
	}
	w.db.Exec(w.t, `
		INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt,
		                                 error, error_kind, started_at, finished_at)
		VALUES ('shop', 'orders', $1::date, $1, $2, $3, $4, nullif($5, ''), nullif($6, ''),
		        clock_timestamp() - $7::interval,
		        CASE WHEN $3 = 'started' THEN NULL ELSE clock_timestamp() - $7::interval END)`,
		partition, runID, status, attempt, errText, kind, fmt.Sprintf("%d milliseconds", ago.Milliseconds()))
}

func bfDecode(t *testing.T, r result) backfill.Result {
	t.Helper()
	var res backfill.Result
	require.NoError(t, json.Unmarshal([]byte(r.out), &res), "stdout: %s\nstderr: %s", r.out, r.err)
	return res
}

func bfActions(res backfill.Result) (publish, skip []string) {
	for _, p := range res.Partitions {
		if p.Action == "publish" {
			publish = append(publish, p.Partition)
		} else {
			skip = append(skip, p.Partition)
		}
	}
	return publish, skip
}

func bfDays(from string, n int) []string {
	d, _ := time.Parse(time.DateOnly, from)
	out := make([]string, n)
	for i := range out {
		out[i] = d.AddDate(0, 0, i).Format(time.DateOnly)
	}
	return out
}

// The dry run prints one line per partition with its state and the action,
// and sends nothing. The table is compared whole: it is what an operator
// reads at 3 a.m.
func TestBackfillDryRunPublishesNothing(t *testing.T) {
	w := newCLIWorld(t)
	w.bfAuditRow("2026-03-01", "r1", audit.StatusSuccess, 1, "", time.Hour)
	w.bfAuditRow("2026-03-02", "r1", audit.StatusFailed, 1, "fatal", time.Hour)
	w.bfAuditRow("2026-03-04", "r1", audit.StatusSuccess, 1, "", 2*time.Hour)
	w.bfAuditRow("2026-03-04", "r2", audit.StatusFailed, 2, "transient", time.Hour) // retries: 1, so 2 is the last
	before := w.bfLastSeq()

	r := w.run("backfill", "orders", "--from", "2026-03-01", "--to", "2026-03-05", "--dry-run", "--run-id", "backfill__t")
	require.NoError(t, r.e, r.err)
	require.Equal(t, `PARTITION   STATUS   LAST_RUN_ID  ATTEMPT  ACTION   REASON
2026-03-01  success  r1           1        skip     loaded by run r1
2026-03-02  failed   r1           1        publish  fatal error on attempt 1: dead-lettered
2026-03-03  missing  -            -        publish  never attempted
2026-03-04  failed   r2           2        publish  failed attempt 2 of 2: dead-lettered
2026-03-05  missing  -            -        publish  never attempted
dry run: 5 partition(s) of orders from 2026-03-01 to 2026-03-05: 4 to publish (2 missing, 2 failed), 1 skipped (1 success) (--reprocess missing,failed); would publish with run_id backfill__t; nothing was published
`, r.out)

	r = w.run("backfill", "orders", "--from", "2026-03-01", "--to", "2026-03-05", "--dry-run", "--json", "--reprocess", "missing")
	require.NoError(t, r.e, r.err)
	res := bfDecode(t, r)
	require.True(t, res.DryRun)
	require.Regexp(t, `^backfill__\d{8}T\d{6}\.\d{3}Z$`, res.RunID)
	pub, skip := bfActions(res)
	require.Equal(t, []string{"2026-03-03", "2026-03-05"}, pub)
	require.Equal(t, []string{"2026-03-01", "2026-03-02", "2026-03-04"}, skip)
	require.Equal(t, "boom: fatal", res.Partitions[1].Error)
	require.Zero(t, res.Published)

	require.Equal(t, before, w.bfLastSeq(), "a dry run publishes nothing")
}

// The plan never duplicates a load that is running, however long it runs
// (its lock is seen), nor a transient failure JetStream will redeliver; it
// republishes what is stale or failed for good.
func TestBackfillPlanStates(t *testing.T) {
	w := newCLIWorld(t)
	w.serve()
	// A load that cannot finish: it takes the partition's lock, then waits for
	// the table. Its `started` row is made to look an hour old.
	ctx := context.Background()
	tx, err := w.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "LOCK TABLE analytics.t IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	require.NoError(t, w.run("publish", "orders", "2026-06-01", "--run-id", "slow").e)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = '2026-06-01' AND status = 'started'")
	w.db.Exec(t, "UPDATE idem.pipeline_audit SET started_at = started_at - interval '1 hour' WHERE partition_key = '2026-06-01'")

	w.bfAuditRow("2026-06-02", "r1", audit.StatusStarted, 1, "", time.Hour)           // died long ago: stale
	w.bfAuditRow("2026-06-03", "r1", audit.StatusStarted, 1, "", 0)                   // just started: running
	w.bfAuditRow("2026-06-04", "r1", audit.StatusFailed, 1, "transient", 0)           // redelivery due: retrying
	w.bfAuditRow("2026-06-05", "r1", audit.StatusFailed, 1, "transient", 2*time.Hour) // redelivery overdue: failed
	w.bfAuditRow("2026-06-06", "r1", audit.StatusSuccess, 1, "", time.Hour)

	want := map[string][2]string{ // status, action with --reprocess all
		"2026-06-01": {backfill.StatusRunning, "skip"},
		"2026-06-02": {backfill.StatusStale, "publish"},
		"2026-06-03": {backfill.StatusRunning, "skip"},
		"2026-06-04": {backfill.StatusRetrying, "skip"},
		"2026-06-05": {backfill.StatusFailed, "publish"},
		"2026-06-06": {backfill.StatusSuccess, "publish"},
	}
	r := w.run("backfill", "orders", "--from", "2026-06-01", "--to", "2026-06-06", "--dry-run", "--json", "--reprocess", "all")
	require.NoError(t, r.e, r.err)
	res := bfDecode(t, r)
	for _, p := range res.Partitions {
		require.Equal(t, want[p.Partition], [2]string{p.Status, p.Action}, "%s: %s", p.Partition, p.Reason)
	}
	require.Equal(t, "a load holds the partition now", res.Partitions[0].Reason)

	r = w.run("backfill", "orders", "--from", "2026-06-01", "--to", "2026-06-06", "--dry-run", "--json")
	require.NoError(t, r.e, r.err)
	pub, _ := bfActions(bfDecode(t, r))
	require.Equal(t, []string{"2026-06-02", "2026-06-05"}, pub, "stale counts as failed")

	require.NoError(t, tx.Rollback(ctx))
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE partition_key = '2026-06-01' AND status = 'success'")
}

// A first backfill publishes only what is missing or failed; once all of it
// loaded, a second publishes nothing; --reprocess all republishes every
// partition, with force only when asked.
func TestBackfillRepublishesOnlyMissingAndFailed(t *testing.T) {
	w := newCLIWorld(t)
	w.serve()
	for _, p := range []string{"2026-03-01", "2026-03-02"} {
		require.NoError(t, w.run("publish", "orders", p, "--run-id", "r1").e)
	}
	w.db.Exec(t, "CREATE TABLE staging.saved AS SELECT * FROM staging.src WHERE event_date = '2026-03-03'")
	w.db.Exec(t, "DELETE FROM staging.src WHERE event_date = '2026-03-03'")
	require.NoError(t, w.run("publish", "orders", "2026-03-03", "--run-id", "r1").e)
	w.waitCount(2, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'")
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'failed'")
	w.db.Exec(t, "INSERT INTO staging.src SELECT * FROM staging.saved")

	before := w.bfLastSeq()
	r := w.run("backfill", "orders", "--from", "2026-03-01", "--to", "2026-03-06", "--json")
	require.NoError(t, r.e, r.err)
	res := bfDecode(t, r)
	pub, skip := bfActions(res)
	require.Equal(t, []string{"2026-03-03", "2026-03-04", "2026-03-05", "2026-03-06"}, pub)
	require.Equal(t, []string{"2026-03-01", "2026-03-02"}, skip)
	require.Equal(t, 4, res.Published)
	require.Zero(t, res.Duplicates)
	for _, p := range res.Partitions {
		if p.Action == "publish" {
			require.NotZero(t, p.Seq, "%s confirmed with its stream sequence", p.Partition)
		}
	}
	require.Equal(t, pub, bfPartitionsOf(t, w.bfEvents(before), res.RunID, false))

	w.waitCount(6, "SELECT count(*) FROM idem.partition_status WHERE status = 'success'")
	before = w.bfLastSeq()
	r = w.run("backfill", "orders", "--from", "2026-03-01", "--to", "2026-03-06")
	require.NoError(t, r.e, r.err)
	require.Equal(t, "plan: 6 partition(s) of orders from 2026-03-01 to 2026-03-06: 0 to publish, 6 skipped (6 success) (--reprocess missing,failed)\n"+
		"nothing to publish (--reprocess missing,failed)\n", r.out)
	require.Equal(t, before, w.bfLastSeq(), "the second backfill publishes nothing")

	r = w.run("backfill", "orders", "--from", "2026-03-01", "--to", "2026-03-06", "--reprocess", "all")
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "6 to publish (6 success)")
	require.Regexp(t, `published 6 event\(s\) with run_id backfill__\S+ in \S+ \(\d+/s\), each confirmed by JetStream\n`, r.out)
	runID := regexp.MustCompile(`run_id (backfill__\S+)`).FindStringSubmatch(r.out)[1]
	require.Equal(t, bfDays("2026-03-01", 6), bfPartitionsOf(t, w.bfEvents(before), runID, false))
	w.waitCount(6, "SELECT count(*) FROM idem.run_ledger WHERE run_id = $1", runID)

	before = w.bfLastSeq()
	r = w.run("backfill", "orders", "--from", "2026-03-01", "--to", "2026-03-02", "--reprocess", "all", "--force", "--json")
	require.NoError(t, r.e, r.err)
	require.Equal(t, bfDays("2026-03-01", 2), bfPartitionsOf(t, w.bfEvents(before), bfDecode(t, r).RunID, true))
}

// --wait follows the loads to the end: exit 0 when every partition loaded.
func TestBackfillWaitLoadsEverything(t *testing.T) {
	w := newCLIWorld(t)
	w.serve()
	r := w.run("backfill", "orders", "--from", "2026-05-01", "--to", "2026-05-20", "--wait", "--timeout", "2m")
	require.NoError(t, r.e, "%s\n%s", r.out, r.err)
	runID := regexp.MustCompile(`run_id (backfill__\S+)`).FindStringSubmatch(r.out)[1]
	require.Regexp(t, `(?m)^backfill__\S+: 20 published, 20 loaded, 0 failed, 0 pending, after \S+$`, r.out)
	require.NotContains(t, r.out, "PARTITION", "no table when everything loaded")
	require.Contains(t, r.err, "backfill: 20/20 loaded, 0 failed, 0 retrying, 0 pending, ETA 0s", "the last progress line, plain off a terminal")
	require.EqualValues(t, 20, w.count("SELECT count(*) FROM idem.run_ledger WHERE run_id = $1", runID))
	require.EqualValues(t, 200, w.count("SELECT count(*) FROM analytics.t WHERE event_date BETWEEN '2026-05-01' AND '2026-05-20'"))
}

// --wait names the partition that failed, exits 1, and a rerun after the fix
// publishes only that partition.
func TestBackfillWaitReportsFailures(t *testing.T) {
	w := newCLIWorld(t)
	w.serve()
	w.db.Exec(t, "CREATE TABLE staging.saved AS SELECT * FROM staging.src WHERE event_date = '2026-04-03'")
	w.db.Exec(t, "DELETE FROM staging.src WHERE event_date = '2026-04-03'")
	r := w.run("backfill", "orders", "--from", "2026-04-01", "--to", "2026-04-05", "--wait")
	require.ErrorIs(t, r.e, ErrReported, "%s\n%s", r.out, r.err)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Len(t, lines, 5, r.out)
	require.Regexp(t, `^PARTITION\s+STATUS\s+ATTEMPTS\s+DLQ\s+ERROR$`, lines[2])
	require.Regexp(t, `^2026-04-03\s+failed\s+1\s+fatal\s+empty_source: `, lines[3])
	require.Regexp(t, `^backfill__\S+: 5 published, 4 loaded, 1 failed, 0 pending, after \S+$`, lines[4])

	w.db.Exec(t, "INSERT INTO staging.src SELECT * FROM staging.saved")
	r = w.run("backfill", "orders", "--from", "2026-04-01", "--to", "2026-04-05", "--wait", "--json")
	require.NoError(t, r.e, "%s\n%s", r.out, r.err)
	res := bfDecode(t, r)
	pub, _ := bfActions(res)
	require.Equal(t, []string{"2026-04-03"}, pub)
	require.Equal(t, &backfill.WaitSummary{Loaded: 1, ElapsedMS: res.Wait.ElapsedMS}, res.Wait)
	require.Equal(t, audit.StatusSuccess, res.Partitions[2].Outcome.Status)
	require.EqualValues(t, 10, *res.Partitions[2].Outcome.Rows)
}

// --timeout ends the wait with exit 3 (as publish --wait), listing what is
// still pending.
func TestBackfillWaitTimeout(t *testing.T) {
	w := newCLIWorld(t) // no consumer: nothing will load
	r := w.run("backfill", "orders", "--from", "2026-02-01", "--to", "2026-02-02", "--wait", "--timeout", "300ms")
	var exit *ExitError
	require.ErrorAs(t, r.e, &exit)
	require.Equal(t, 3, exit.Code)
	require.Regexp(t, `(?m)^2026-02-01\s+queued\s+-\s+-\s+-$`, r.out)
	require.Regexp(t, `(?m)^2026-02-02\s+queued\s+-\s+-\s+-$`, r.out)
	require.Regexp(t, `(?m)^backfill__\S+: 2 published, 0 loaded, 0 failed, 2 pending, after \S+: timed out; the pending partitions are still queued or loading$`, r.out)
}

// A delivery that crashed leaves only a `started` row; its dead letter (seen
// in the dead-letter stream, with this run's id) ends the wait as failed.
func TestBackfillWaitSeesCrashedDeadLetters(t *testing.T) {
	w := newCLIWorld(t)
	before := w.bfLastSeq()
	done := make(chan error, 1)
	go func() {
		// As the consumer's reconciler would, once the event is in the stream.
		published := false
		for deadline := time.Now().Add(30 * time.Second); !published && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if s, err := w.js.Stream(context.Background(), "IDEM_EVENTS"); err == nil {
				info, err := s.Info(context.Background())
				published = err == nil && info.State.LastSeq > before
			}
		}
		if !published {
			done <- errors.New("the backfill's event never reached the stream within 30s")
			return
		}
		w.bfStartedRow("2026-02-10", "backfill__crash")
		m := nats.NewMsg("idem.dlq.orders")
		m.Data = []byte(`{}`)
		m.Header.Set(deadletter.HeaderRunID, "backfill__crash")
		m.Header.Set(deadletter.HeaderPartition, "2026-02-10")
		m.Header.Set(deadletter.HeaderErrorKind, string(consumer.KindCrashed))
		m.Header.Set(deadletter.HeaderError, "the process died on the last delivery")
		_, err := w.js.PublishMsg(context.Background(), m)
		done <- err
	}()
	r := w.run("backfill", "orders", "--from", "2026-02-10", "--to", "2026-02-10", "--run-id", "backfill__crash", "--wait", "--timeout", "30s")
	require.NoError(t, <-done)
	require.ErrorIs(t, r.e, ErrReported, "%s\n%s", r.out, r.err)
	require.Regexp(t, `(?m)^2026-02-10\s+failed\s+2\s+crashed\s+the process died on the last delivery$`, r.out)
	require.Contains(t, r.out, "1 published, 0 loaded, 1 failed, 0 pending")
}

// auditRowNoT records a `started` attempt 2 from a goroutine (no require).
func (w *cliWorld) bfStartedRow(partition, runID string) {
	_, _ = w.db.Pool.Exec(context.Background(), `
		INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt)
		VALUES ('shop', 'orders', $1::date, $1, $2, 'started', 2)`, partition, runID)
}

// --reverse publishes newest first; --rate paces without changing what or in
// which order (timing is not asserted). Resuming with the same --run-id is
// deduplicated by JetStream: backfill sends what idem publish sends.
func TestBackfillOrderRateAndResume(t *testing.T) {
	w := newCLIWorld(t)
	before := w.bfLastSeq()
	r := w.run("backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-10", "--reverse", "--json")
	require.NoError(t, r.e, r.err)
	res := bfDecode(t, r)
	want := bfDays("2026-01-01", 10)
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	require.Equal(t, want, bfPartitionsOf(t, w.bfEvents(before), res.RunID, false))
	pub, _ := bfActions(res)
	require.Equal(t, want, pub)

	before = w.bfLastSeq()
	r = w.run("backfill", "orders", "--from", "2026-01-11", "--to", "2026-01-20", "--rate", "2000/s", "--json")
	require.NoError(t, r.e, r.err)
	res = bfDecode(t, r)
	require.Equal(t, 10, res.Published)
	require.Equal(t, bfDays("2026-01-11", 10), bfPartitionsOf(t, w.bfEvents(before), res.RunID, false))

	require.NoError(t, w.run("publish", "orders", "2026-01-21", "--run-id", "backfill__resume").e)
	before = w.bfLastSeq()
	r = w.run("backfill", "orders", "--from", "2026-01-21", "--to", "2026-01-23", "--run-id", "backfill__resume")
	require.NoError(t, r.e, r.err)
	require.Contains(t, r.out, "published 3 event(s) with run_id backfill__resume")
	require.Contains(t, r.out, "; 1 were duplicates JetStream already held\n")
	require.Equal(t, before+2, w.bfLastSeq())
}

// Hour partitions for timestamp datasets; days only for date datasets; text
// partitions cannot be enumerated.
func TestBackfillHourSteps(t *testing.T) {
	w := newCLIWorld(t)
	cfg, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	cfg = append(cfg, []byte(`  clicks:
    strategy: delete_insert
    target: analytics.t
    partition_column: event_date
    partition_type: timestamp
    source: SELECT id, event_date, amount, note FROM staging.src WHERE event_date = @partition::date
  regions:
    strategy: delete_insert
    target: analytics.t
    partition_column: note
    partition_type: text
    source: SELECT id, event_date, amount, note FROM staging.src WHERE note = @partition
`)...)
	require.NoError(t, os.WriteFile(w.cfg, cfg, 0o600))

	r := w.run("backfill", "clicks", "--from", "2026-01-01", "--to", "2026-01-01", "--dry-run", "--json")
	require.NoError(t, r.e, r.err)
	res := bfDecode(t, r)
	require.Equal(t, "hour", res.Step)
	require.Len(t, res.Partitions, 24)
	require.Equal(t, "2026-01-01T00:00:00Z", res.Partitions[0].Partition)
	require.Equal(t, "2026-01-01T23:00:00Z", res.Partitions[23].Partition)

	before := w.bfLastSeq()
	r = w.run("backfill", "clicks", "--from", "2026-01-01T22", "--to", "2026-01-02T01", "--json")
	require.NoError(t, r.e, r.err)
	res = bfDecode(t, r)
	pub, _ := bfActions(res)
	require.Equal(t, []string{"2026-01-01T22:00:00Z", "2026-01-01T23:00:00Z", "2026-01-02T00:00:00Z", "2026-01-02T01:00:00Z"}, pub)
	require.Equal(t, before+4, w.bfLastSeq())

	var usage *UsageError
	for _, args := range [][]string{
		{"backfill", "clicks", "--from", "2026-01-01", "--to", "2026-01-01", "--step", "day"},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-01", "--step", "hour"},
		{"backfill", "regions", "--from", "2026-01-01", "--to", "2026-01-01"},
		{"backfill", "clicks", "--from", "2026-01-01T05:30", "--to", "2026-01-01"},
	} {
		r := w.run(args...)
		require.True(t, errors.As(r.e, &usage), "%v: %v", args, r.e)
	}
}

func TestBackfillUsage(t *testing.T) {
	w := newCLIWorld(t)
	before := w.bfLastSeq()
	var usage *UsageError
	for _, args := range [][]string{
		{"backfill", "orders", "--from", "2026-01-01"},
		{"backfill", "orders", "--to", "2026-01-01"},
		{"backfill", "--from", "2026-01-01", "--to", "2026-01-02"},
		{"backfill", "nope", "--from", "2026-01-01", "--to", "2026-01-02"},
		{"backfill", "orders", "--from", "2026-01-02", "--to", "2026-01-01"},
		{"backfill", "orders", "--from", "Jan 1", "--to", "2026-01-01"},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02", "--reprocess", "broken"},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02", "--reprocess", ""},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02", "--rate", "fast"},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02", "--rate", "0/s"},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02", "--rate", "5/day"},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02", "--dry-run", "--wait"},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02", "--timeout", "5m"},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02", "--wait", "--timeout", "0s"},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02", "--run-id", "bad\x01id"},
		{"backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02", "--bogus"},
	} {
		r := w.run(args...)
		require.True(t, errors.As(r.e, &usage), "%q: %v", args, r.e)
		require.Contains(t, r.err, "idem --help")
	}
	require.Equal(t, before, w.bfLastSeq())

	// Not a usage error: the command line is right, the server is not ready.
	require.NoError(t, w.js.DeleteStream(context.Background(), "IDEM_EVENTS"))
	r := w.run("backfill", "orders", "--from", "2026-01-01", "--to", "2026-01-02")
	require.Error(t, r.e)
	require.False(t, errors.As(r.e, &usage))
	require.Contains(t, r.err, "run 'idem streams'")
}

// A year's backfill: plan and publish 365 daily partitions, each
// confirmed by JetStream. Reported, not asserted.
func TestBackfill365DailyPartitions(t *testing.T) {
	w := newCLIWorld(t)
	start := time.Now()
	r := w.run("backfill", "orders", "--from", "2026-01-01", "--to", "2026-12-31", "--json")
	total := time.Since(start)
	require.NoError(t, r.e, r.err)
	res := bfDecode(t, r)
	require.Equal(t, 365, res.Published)
	require.Zero(t, res.Duplicates)
	require.EqualValues(t, 365, w.streamMsgs("IDEM_EVENTS"))
	seqs := map[uint64]bool{}
	for _, p := range res.Partitions {
		require.NotZero(t, p.Seq)
		seqs[p.Seq] = true
	}
	require.Len(t, seqs, 365, "every event confirmed with its own sequence")
	t.Logf("365 daily partitions: plan %d ms, publish %d ms (%.0f events/s), whole command %s",
		res.PlanMS, res.PublishMS, 365/max(float64(res.PublishMS)/1000, 1e-3), total.Round(time.Millisecond))
}

func TestParseReprocess(t *testing.T) {
	for flag, want := range map[string]backfill.Reprocess{
		"missing,failed": {Missing: true, Failed: true},
		"missing":        {Missing: true},
		"failed":         {Failed: true},
		"all":            {All: true},
		"missing, all":   {Missing: true, All: true},
	} {
		got, err := parseReprocess(flag)
		require.NoError(t, err, flag)
		require.Equal(t, want, got, flag)
	}
	for _, flag := range []string{"", "broken", "missing,"} {
		_, err := parseReprocess(flag)
		var usage *UsageError
		require.True(t, errors.As(err, &usage), "%q: %v", flag, err)
	}
}

func TestBackfillProgressAndRate(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &backfill.Counts{Loaded: 117, Failed: 3, Retrying: 2}
	require.Equal(t, "[========>                     ] 117/365 loaded  3 failed  2 retrying  ETA 41s",
		bfProgressLine(true, "loaded", 120, 365, c, start, start.Add(20*time.Second)))
	require.Equal(t, "backfill: 117/365 loaded, 3 failed, 2 retrying, 245 pending, ETA 41s",
		bfProgressLine(false, "loaded", 120, 365, c, start, start.Add(20*time.Second)))
	require.Equal(t, "[>                             ] 0/365 published  ETA ?",
		bfProgressLine(true, "published", 0, 365, nil, start, start))
	require.Equal(t, "[==============================] 365/365 published  ETA 0s",
		bfProgressLine(true, "published", 365, 365, nil, start, start.Add(time.Second)))

	for in, want := range map[string]float64{"": 0, "50/s": 50, "50": 50, "120/m": 2, "3600/h": 1, "0.5/s": 0.5} {
		got, err := parsePerSecond(in)
		require.NoError(t, err, in)
		require.InDelta(t, want, got, 1e-9, in)
	}
}

// Ctrl-C during --wait still reports what is pending, and exits 1: whether
// it comes while the audit is being read (the first poll, right after the
// last publish) or between two polls (after the first progress line).
func TestBackfillWaitInterrupted(t *testing.T) {
	for name, at := range map[string]string{"during a poll": "1/1 published", "between polls": "0/1 loaded"} {
		t.Run(name, func(t *testing.T) {
			w := newCLIWorld(t) // no consumer: nothing will load
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out strings.Builder
			errOut := &cancelOn{at: at, cancel: cancel}
			err := run(ctx, []string{"backfill", "orders", "--from", "2026-02-01", "--to", "2026-02-01", "--wait", "--config", w.cfg},
				&out, errOut, func(string) string { return "" })
			require.True(t, errOut.seen, "never printed %q:\n%s", at, errOut.String())
			require.ErrorIs(t, err, ErrReported, errOut.String())
			require.Regexp(t, `(?m)^2026-02-01\s+queued\s+-\s+-\s+-$`, out.String())
			require.Regexp(t, `(?m)^backfill__\S+: 1 published, 0 loaded, 0 failed, 1 pending, after \S+: interrupted; `, out.String())
		})
	}
}

// cancelOn is a stderr that cancels the command's context (as Ctrl-C
// would) once a line holding at has been written to it.
type cancelOn struct {
	strings.Builder
	at     string
	cancel func()
	seen   bool
}

func (c *cancelOn) Write(p []byte) (int, error) {
	n, err := c.Builder.Write(p)
	if !c.seen && strings.Contains(c.String(), c.at) {
		c.seen = true
		c.cancel()
	}
	return n, err
}
