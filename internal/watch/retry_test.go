package watch

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/sources/files"
)

// newLocalRig is a rig on local files under a temporary folder, and the
// folder of its partition p.
func newLocalRig(t *testing.T, p string) (*rig, string) {
	t.Helper()
	dir := t.TempDir()
	spec := files.Spec{URL: "file://" + dir + "/orders/dt={partition}/", Format: files.CSV, Ready: files.ReadyRule{Marker: "_SUCCESS"}}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "orders"), 0o755))
	store, err := files.NewStore(spec, files.S3Options{})
	require.NoError(t, err)
	return newRig(t, spec, store, nil), filepath.Join(dir, "orders", "dt="+p)
}

// outage makes every load of orders fail as a warehouse in trouble does
// (a serialization failure: transient, retried by the consumer) until it
// is lifted.
func (r *rig) outage(on bool) {
	r.t.Helper()
	if on {
		r.db.Exec(r.t, `CREATE OR REPLACE FUNCTION analytics.outage() RETURNS trigger LANGUAGE plpgsql AS
			$$BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END$$;
			CREATE TRIGGER outage BEFORE INSERT ON analytics.t FOR EACH STATEMENT EXECUTE FUNCTION analytics.outage()`)
		return
	}
	r.db.Exec(r.t, `DROP TRIGGER outage ON analytics.t`)
}

// fate is what the consumer made of one event: its run and how it ended
// (success, skipped, or dead-lettered fatal or exhausted).
type fate struct{ run, end string }

// consume delivers each new event to the handlers as the consumer would,
// with the dataset's budget: again after each transient failure, until it
// loads, or is dead-lettered as consumer.Decide would (fatal, or the
// budget spent).
func (r *rig) consume() []fate {
	r.t.Helper()
	var out []fate
	for _, m := range r.events() {
		var ev struct {
			RunID string `json:"run_id"`
		}
		require.NoError(r.t, json.Unmarshal(m.Data, &ev))
		out = append(out, fate{run: ev.RunID, end: r.load(m.Subject, m.Data, m.Sequence, m.Time)})
		r.seen = m.Sequence
	}
	return out
}

func (r *rig) load(subject string, data []byte, seq uint64, published time.Time) string {
	r.t.Helper()
	for range 10 {
		out, err := r.h.HandleMessage(context.Background(), subject, data,
			handlers.Meta{StreamSeq: seq, MaxAttempts: r.ds.Attempts, Published: published})
		var attempt *handlers.AttemptError
		var spent *handlers.BudgetSpentError
		switch {
		case err == nil:
			return out.Status
		case handlers.IsFatal(err):
			return "fatal"
		case errors.As(err, &spent), errors.As(err, &attempt) && attempt.N >= r.ds.Attempts:
			return "exhausted"
		case !errors.As(err, &attempt):
			r.t.Fatalf("the load failed before an attempt: %v", err)
		}
	}
	r.t.Fatal("the budget never ran out")
	return ""
}

// ended is when the partition's latest attempt ended, by the database's
// clock, which the watch counts the retries' waits from.
func (r *rig) ended(p string) time.Time {
	r.t.Helper()
	var at time.Time
	require.NoError(r.t, r.db.Pool.QueryRow(context.Background(), `SELECT finished_at FROM idem.pipeline_audit
		WHERE partition_key = $1 AND status <> 'skipped' ORDER BY id DESC LIMIT 1`, p).Scan(&at))
	return at
}

// runIDs are the run_ids of the events.
func runIDs(fs []fate) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.run)
	}
	return out
}

// A listing whose event ran out of retries in an outage is published
// again, by one replica of two, once its wait is over: 5 minutes after the
// dead letter, then 10 after the next; the first retry that meets the
// outage's end loads it, and nothing is published after.
func TestWatchRetriesAListingDeadLetteredByAnOutage(t *testing.T) {
	t.Parallel()
	const p = "2026-11-28"
	r, part := newLocalRig(t, p)
	write(t, filepath.Join(part, "part-1.csv"), "id,amount,note\n1,1.50,a\n2,2.50,b\n")
	write(t, filepath.Join(part, "_SUCCESS"), "")
	r.outage(true)

	d := r.check(p)
	require.Equal(t, ReasonNew, d.Reason)
	first := d.RunID
	require.Equal(t, []fate{{first, "exhausted"}}, r.consume())
	require.EqualValues(t, 2, r.db.Int(t, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'failed' AND error_kind = 'transient'"),
		"the consumer spent the budget of 2 first")

	// Retry 1 waits 5 minutes from the dead letter's last attempt.
	end := r.ended(p)
	d = r.decideAt(p, end.Add(5*time.Minute-time.Second))
	require.Empty(t, d.Reason)
	require.Equal(t, 1, d.Retry)
	require.True(t, end.Add(5*time.Minute).Equal(d.RetryAt), "%s", d.RetryAt)
	require.True(t, strings.HasPrefix(d.Why, "retry 1 of 3 after 5m0s (at "), d.Why)
	require.True(t, strings.HasSuffix(d.Why, "): run "+first+" failed its last allowed load (2 of 2)"), d.Why)
	r.checkAt(p, end.Add(5*time.Minute-time.Second))
	require.Empty(t, r.events(), "not before its wait is over")

	// The replicas' passes come at their own times, and agree.
	for i, w := range []*Watcher{r.a, r.b, r.a, r.b} {
		ds, err := w.Check(context.Background(), r.ds, []string{p}, end.Add(5*time.Minute+time.Duration(i)*20*time.Second))
		require.NoError(t, err)
		d = ds[0]
		require.Equal(t, ReasonRetry, d.Reason)
		require.Equal(t, 1, d.Retry)
		require.Equal(t, first+"-retry1", d.RunID)
		require.Equal(t, RetryRunID(first, 1), d.RunID)
	}
	evs := r.events()
	require.Len(t, evs, 1, "two replicas, four passes, one retry")
	require.Equal(t, "orders:"+p+":"+first+"-retry1", evs[0].Header.Get("Nats-Msg-Id"))
	require.Equal(t, []string{"orders:new", "orders:retry"}, r.publishedSoFar())
	require.Equal(t, []fate{{first + "-retry1", "exhausted"}}, r.consume(), "the outage goes on")

	// Retry 2 waits twice as long, from retry 1's dead letter.
	end = r.ended(p)
	d = r.decideAt(p, end.Add(5*time.Minute))
	require.Empty(t, d.Reason)
	require.Equal(t, 2, d.Retry)
	require.True(t, strings.HasPrefix(d.Why, "retry 2 of 3 after 10m0s"), d.Why)
	r.checkAt(p, end.Add(10*time.Minute-time.Second))
	require.Empty(t, r.events())
	d = r.checkAt(p, end.Add(10*time.Minute))
	require.Equal(t, first+"-retry2", d.RunID)
	r.outage(false)
	require.Equal(t, []fate{{first + "-retry2", audit.StatusSuccess}}, r.consume())
	require.EqualValues(t, 2, r.rows())
	require.Equal(t, []string{"orders:new", "orders:retry", "orders:retry"}, r.publishedSoFar())

	// Loaded: unchanged from now on, however late.
	for _, later := range []time.Duration{0, 10 * time.Minute, 1000 * time.Hour} {
		d = r.checkAt(p, time.Now().Add(later))
		require.Equal(t, "unchanged since its last load", d.Why)
	}
	require.Empty(t, r.events())
}

// The retries of a listing stop at the cap, however long after; new files
// are a new listing, published at once, with retries of their own.
func TestWatchRetriesStopAtTheCap(t *testing.T) {
	t.Parallel()
	const p = "2026-11-28"
	r, part := newLocalRig(t, p)
	r.ds.Retries = 2
	write(t, filepath.Join(part, "part-1.csv"), "id,amount,note\n1,1.50,a\n")
	write(t, filepath.Join(part, "_SUCCESS"), "")
	r.outage(true)

	first := r.check(p).RunID
	fates := r.consume()
	for range 5 {
		if d := r.checkAt(p, r.ended(p).Add(time.Hour)); d.Reason == "" {
			break
		}
		fates = append(fates, r.consume()...)
	}
	require.Equal(t, []string{first, first + "-retry1", first + "-retry2"}, runIDs(fates))
	for _, f := range fates {
		require.Equal(t, "exhausted", f.end, f.run)
	}
	for _, later := range []time.Duration{time.Hour, 1000 * time.Hour} {
		d := r.checkAt(p, time.Now().Add(later))
		require.Empty(t, d.Reason)
		require.Zero(t, d.Retry)
		require.Equal(t, "gave up after 2 retries: run "+first+"-retry2 failed its last allowed load (2 of 2); "+
			"idem audit why orders "+p+" names its dead letter, which idem dlq replay loads again", d.Why)
	}
	r.outage(false)
	r.checkAt(p, time.Now().Add(1000*time.Hour))
	require.Empty(t, r.events(), "the outage's end is not news to the watch")
	require.Equal(t, []string{"orders:new", "orders:retry", "orders:retry"}, r.publishedSoFar())

	write(t, filepath.Join(part, "part-2.csv"), "id,amount,note\n2,2.50,b\n")
	d := r.check(p)
	require.Equal(t, ReasonNew, d.Reason, "still never loaded")
	require.NotEqual(t, first, d.RunID)
	require.Equal(t, RunID(d.Fingerprint, 0), d.RunID)
	require.Equal(t, []fate{{d.RunID, audit.StatusSuccess}}, r.consume())
	require.EqualValues(t, 2, r.rows())
}

// Which latest attempt of a listing's run the watch retries, as the
// consumer decided its event's fate: only a dead letter that is not the
// files' fault, and only once the consumer has let go of it.
func TestWatchRetriesOnlyWhatTheConsumerGaveUpForNoFaultOfTheFiles(t *testing.T) {
	t.Parallel()
	const p = "2026-11-28"
	r, part := newLocalRig(t, p)
	write(t, filepath.Join(part, "part-1.csv"), "id,amount,note\n1,1.50,a\n")
	write(t, filepath.Join(part, "_SUCCESS"), "")
	run := r.decide(p).RunID
	ctx := context.Background()
	// attempt writes the partition's latest attempt as a load of run
	// leaves it.
	attempt := func(run, status string, n int, kind, text string) {
		t.Helper()
		_, err := r.db.Pool.Exec(ctx, `
			INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt,
			                                 error, error_kind, started_at, finished_at)
			VALUES ('shop', 'orders', $1::date, $1, $2, $3, $4, nullif($5, ''), nullif($6, ''),
			        now() - interval '1 hour', CASE WHEN $3 <> 'started' THEN now() - interval '1 hour' END)`,
			p, run, status, n, text, kind)
		require.NoError(t, err)
	}
	later := time.Now().Add(1000 * time.Hour)
	for _, tt := range []struct {
		name        string
		run, status string
		attempt     int
		kind, text  string
		retries     int
		publish     string // the run_id published; "" for none
		why         string
	}{
		{name: "a transient failure the consumer retries", run: run, status: "failed", attempt: 1, kind: "transient", text: "deadlock detected",
			why: "already attempted (failed): the consumer retries or holds it"},
		{name: "a load running, or to be redelivered", run: run, status: "started", attempt: 1,
			why: "already attempted (started): the consumer retries or holds it"},
		{name: "the warehouse gone: held", run: run, status: "failed", attempt: 2, kind: "unavailable", text: "warehouse unavailable: x",
			why: "the consumer retries or holds it"},
		{name: "a stop", run: run, status: "failed", attempt: 2, kind: "interrupted", text: "context canceled",
			why: "the consumer retries or holds it"},
		{name: "exhausted", run: run, status: "failed", attempt: 2, kind: "transient", text: "deadlock detected",
			publish: run + "-retry1"},
		{name: "a crash loop", run: run, status: "started", attempt: 2, publish: run + "-retry1"},
		{name: "the store down past wait_up_to", run: run, status: "failed", attempt: 1, kind: "fatal",
			text: "missing_files: still not ready after wait_up_to 6h0m0s: 503 Service Unavailable", publish: run + "-retry1"},
		{name: "a source not ready past wait_up_to", run: run, status: "failed", attempt: 1, kind: "fatal",
			text: "not_ready: still not ready after wait_up_to 6h0m0s", publish: run + "-retry1"},
		{name: "retry 2 exhausted", run: run + "-retry2", status: "failed", attempt: 2, kind: "transient", text: "x",
			publish: run + "-retry3"},
		{name: "retry 3 exhausted", run: run + "-retry3", status: "failed", attempt: 2, kind: "transient", text: "x",
			why: "gave up after 3 retries: run " + run + "-retry3 failed its last allowed load (2 of 2)"},
		{name: "a malformed file", run: run, status: "failed", attempt: 1, kind: "fatal", text: "bad_file: part-1.csv: line 2: wrong number of fields",
			why: "failed for good (bad_file): only new files publish it again"},
		{name: "a type that does not fit", run: run + "-retry1", status: "failed", attempt: 1, kind: "fatal",
			text: "data_exception: ERROR: invalid input syntax for type numeric (SQLSTATE 22P02)",
			why:  "failed for good (data_exception): only new files publish it again"},
		{name: "a fatal error naming no reason", run: run, status: "failed", attempt: 1, kind: "fatal", text: "something broke",
			why: "failed for good (fatal)"},
		{name: "checks refused it", run: run, status: "failed", attempt: 1, kind: "check", text: "check unique failed",
			why: "refused by its checks: only new files publish it again"},
		{name: "cancelled", run: run, status: "cancelled", attempt: 1, why: "run " + run + " already attempted (cancelled)"},
		{name: "exhausted, retries off", run: run, status: "failed", attempt: 2, kind: "transient", text: "x", retries: -1,
			why: "already attempted (failed): failed its last allowed load (2 of 2)"},
		{name: "another run's", run: "manual__1", status: "failed", attempt: 2, kind: "transient", text: "x", publish: run},
		{name: "not a retry of this listing", run: run + "-retry01", status: "failed", attempt: 2, kind: "transient", text: "x", publish: run},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r.ds.Retries = 3
			if tt.retries < 0 {
				r.ds.Retries = 0
			}
			attempt(tt.run, tt.status, tt.attempt, tt.kind, tt.text)
			d := r.decideAt(p, later)
			published := ""
			if d.Reason != "" {
				published = d.RunID
			}
			require.Equal(t, tt.publish, published, d.Why)
			if tt.publish == "" {
				require.Contains(t, d.Why, tt.why)
			}
		})
	}
}
