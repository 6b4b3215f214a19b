// Package audit records what happened to every event in PostgreSQL schema idem:
// one row per attempt in idem.pipeline_audit, the success ledger that makes a
// redelivery a no-op, and the queries operators ask at 3 a.m. ("what failed?",
// "which partitions are missing?", StateOf a partition).
//
// It also keeps what a load leaves for others, written in the load's
// transaction: the outbox of downstream events, results and lineage events
// (outbox.go), the checks' outcomes (checks.go) and the schema changes
// (schemachanges.go), and the archived versions of a partition
// (versions.go). The ledger's lookups and the successes that write it
// are in ledger.go, for one load and a group alike; a group load's start,
// set-based over its events, in group.go. Passes that span many
// transactions (re-verification, retention) take turns through leases with
// an expiry (lease.go), never a session lock, which behind a transaction
// pooler would stay on a server connection.
//
// # Transactions
//
// The handler owns a load's transaction. What a load writes is queued on
// the batches it sends (the Queue* functions): the `started` row commits in
// its first round trip, before the load's transaction opens, so it survives
// a crash; the success, the ledger entry and everything left for others
// commit with the load. The other functions run on the Querier they are
// given, in whatever transaction the caller holds. This package begins and
// commits transactions of its own only outside any load: Migrate,
// EnqueueLineage (a failed attempt's lineage, after its load rolled back),
// Prune (one per batch), StoreIdentity (a verified warehouse), ReadStory
// (one read-only snapshot) and the operators' controls, each with its
// idem.operator_actions row (controls.go: pauses and cancellations). It never begins, commits or rolls back a load,
// and knows nothing of NATS.
package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what pgx.Tx, *pgx.Conn and *pgxpool.Pool have in common.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Statuses of an attempt.
const (
	StatusStarted = "started"
	StatusSuccess = "success"
	StatusFailed  = "failed"
	StatusSkipped = "skipped"
)

// RunKey names one logical run of one dataset's partition.
type RunKey struct {
	Pipeline  string // dag_id
	Dataset   string // task_id
	Partition string // canonical partition key
	RunID     string
}

// Attempt describes one attempt to load a RunKey.
type Attempt struct {
	RunKey
	LogicalDate *time.Time // nil for partitions that are not dates
	Attempt     int        // delivery number, from 1
	StreamSeq   uint64     // 0 when the event did not come from JetStream
	Force       bool
	// TriggeredBy names the upstream run that caused this one
	// ("<dataset>:<partition>:<run_id>"), empty for scheduler events.
	TriggeredBy string
	// Attributes are the event's free-form attributes, recorded as given.
	Attributes map[string]string
	// DefinitionHash names the dataset's definition the attempt runs
	// (config.Dataset.DefinitionHash), "" when not known: the audit row's
	// definition_hash, which says which partitions a change of definition
	// leaves outdated.
	DefinitionHash string
	// Trace is the trace context of the attempt's load in the form package
	// tracing stores (traceparent, tracestate), "" for none: its downstream
	// events carry it, so one pipeline run is one trace. It is not written
	// to the audit row.
	Trace string
	// ThroughPause begins the attempt even while its dataset is paused:
	// the re-verification's reload of a load a failover lost, which
	// restores what was acknowledged rather than loading anew, and must
	// not wait for a resume that may be days away.
	ThroughPause bool
	// Published is when the event was published (zero: unknown): a
	// backfill cancelled by range covers the events published before the
	// cancel, and the statement that begins the attempt asks it.
	Published time.Time
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Rows are the counts a strategy reports. Deleted is -1 when unknown (a
// TRUNCATE fast path does not count what it removed).
type Rows struct {
	Inserted, Updated, Deleted int64
}

// Written is the audit row_count: rows inserted or updated.
func (r Rows) Written() int64 { return r.Inserted + r.Updated }

func nullSeq(seq uint64) *int64 {
	if seq == 0 {
		return nil
	}
	v := int64(seq)
	return &v
}

// Fail marks a started row `failed` with the error and its kind ("fatal" or
// "transient").
func Fail(ctx context.Context, db Querier, id int64, cause error, kind string) error {
	_, err := db.Exec(ctx, `
		UPDATE idem.pipeline_audit
		   SET status = 'failed', error = $2, error_kind = $3, finished_at = clock_timestamp()
		 WHERE id = $1 AND status = 'started'`, id, errorText(cause, 4000), kind)
	if err != nil {
		return fmt.Errorf("audit: fail: %w", err)
	}
	return nil
}

// FailAfterOutage records, once the warehouse answers again, the failure of
// an attempt that lost its connection and could not be recorded at the
// time, and returns the kind it wrote. When the warehouse started after the
// attempt did (pg_postmaster_start_time), it went down under the load, as
// in a crash of the whole site: the failure is `unavailable` and spends no
// retry. Otherwise the warehouse lived on (a cut network, or a statement
// that crashed a backend and made the server recover without a restart):
// `transient`, counted against the message's budget.
func FailAfterOutage(ctx context.Context, db Querier, id int64, cause error) (kind string, err error) {
	err = db.QueryRow(ctx, `
		UPDATE idem.pipeline_audit
		   SET status = 'failed', finished_at = clock_timestamp(),
		       error_kind = CASE WHEN started_at < pg_postmaster_start_time() THEN 'unavailable' ELSE 'transient' END,
		       error = CASE WHEN started_at < pg_postmaster_start_time()
		                    THEN 'the warehouse restarted under this attempt: ' ELSE '' END || $2
		 WHERE id = $1 AND status = 'started'
		RETURNING error_kind`, id, errorText(cause, 3900)).Scan(&kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil // already recorded, or the row went with a failover
	}
	if err != nil {
		return "", fmt.Errorf("audit: fail after an outage: %w", err)
	}
	return kind, nil
}

// errorText is cause's text for the audit's error column, at most n bytes.
func errorText(cause error, n int) string {
	if cause == nil {
		return "unknown error"
	}
	return truncate(cause.Error(), n)
}

// Skip marks a started row `skipped`: the run had already succeeded.
func Skip(ctx context.Context, db Querier, id int64) error {
	_, err := db.Exec(ctx, skipSQL, id)
	if err != nil {
		return fmt.Errorf("audit: skip: %w", err)
	}
	return nil
}

const skipSQL = `
		UPDATE idem.pipeline_audit SET status = 'skipped', finished_at = clock_timestamp()
		 WHERE id = $1 AND status = 'started'`

func nullAttrs(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary so the text column stays valid UTF-8.
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// Error kinds of a failed attempt. Only transient failures and attempts
// left `started` (the process died) spend a message's retry budget.
const (
	KindFatal       = "fatal"
	KindTransient   = "transient"
	KindUnavailable = "unavailable" // the warehouse went away under the load
	KindInterrupted = "interrupted" // idem stopped the load (shutdown)
)

// Begun is what QueueBegin found and did.
type Begun struct {
	// ID is the audit row written: `started`, or `skipped` when the run had
	// already succeeded. 0 when the budget was spent and nothing was written.
	ID      int64
	Skipped bool
	// Attempt is this attempt's number among the loads of the same message
	// that ran: 1 + Prior.
	Attempt int
	// Prior counts the loads of the same message (RunKey and stream
	// sequence) that ran before: rows left `started` (the process died) and
	// transient failures. Skipped, unavailable and interrupted rows do not
	// count: they never reached the load, or the environment stopped it.
	// Nor does a row left `started` before the warehouse last started
	// (pg_postmaster_start_time): the warehouse went down under that load,
	// as in a crash of the whole site, which is not the message's fault. A
	// message that kills its replica while the warehouse lives is counted,
	// so the crash-loop guard still dead-letters it after its budget.
	Prior int
	// LastDied reports that the latest of those was left `started`.
	LastDied bool
	// Spent reports that Prior had reached the budget: nothing was written.
	Spent bool
	// Paused reports that the dataset was paused when the statement ran:
	// nothing was written, whatever the ledger or the budget said.
	Paused bool
	// Cancelled reports that a cancellation covered the event when the
	// statement ran (a backfill cancelled after the caller had asked):
	// nothing was written. The caller records the attempt `cancelled`.
	Cancelled bool
	// ResultWritten reports that the statement wrote the skip's result
	// (QueueBegin with a result body).
	ResultWritten bool
}

// beginSQL: the ledger check, the count of attempts that ran for this
// message, and the insert, in one round trip. The count reads the
// partition's rows through pipeline_audit_partition_idx.
//
// A forced run and an ordinary one ask "done?" differently (a forced run is
// done only when this very message succeeded), so each has its own text and
// the server keeps one plan for each. One text answering both through a
// CASE on $6 was planned afresh at every execution (the server judged its
// generic plan dearer than a custom one): 300 µs against 150 µs, measured
// statement alone. done is MATERIALIZED so its lookup runs once, not once
// per reference.
func beginSQL(force, result bool) string {
	switch {
	case force && result:
		return beginForceResult
	case force:
		return beginForce
	case result:
		return beginOrdinaryResult
	}
	return beginOrdinary
}

const (
	doneOrdinary = `
     SELECT EXISTS (SELECT 1 FROM idem.run_ledger
                     WHERE dag_id = $1 AND task_id = $2 AND partition_key = $4 AND run_id = $5) AS yes`
	doneForce = `
     SELECT $7::bigint IS NOT NULL AND (SELECT true FROM idem.pipeline_audit
             WHERE dag_id = $1 AND task_id = $2 AND partition_key = $4 AND run_id = $5
               AND stream_seq = $7 AND status = 'success'
             ORDER BY id DESC LIMIT 1) IS NOT NULL AS yes`
)

// loadedBy is the run's load, from the ledger, as a skip's result names
// it (its audit id and rows), for the run the four SQL expressions name.
func loadedBy(pipeline, dataset, partition, runID string) string {
	return `coalesce((
			SELECT jsonb_build_object('loaded_by_audit_id', a.id, 'rows', jsonb_build_object(
			       'inserted', coalesce(a.rows_inserted, a.row_count, 0), 'updated', coalesce(a.rows_updated, 0),
			       'deleted', coalesce(a.rows_deleted, -1)))
			  FROM idem.run_ledger l JOIN idem.pipeline_audit a ON a.id = l.audit_id
			 WHERE l.dag_id = ` + pipeline + ` AND l.task_id = ` + dataset + ` AND l.partition_key = ` + partition +
		` AND l.run_id = ` + runID + `), '{}'::jsonb)`
}

var (
	// skipResult writes, when the statement decides a skip, that skip's
	// result ($14: its body without the audit id) into the outbox in the
	// same statement, with the skipped row's id and the run's load from the
	// ledger: a skip and its result commit together, with no round trip
	// of their own.
	skipResult = `,
res AS (
     INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, result)
     SELECT $2, $4, $5, ins.id, $14::jsonb || jsonb_build_object('audit_id', ins.id) || ` + loadedBy("$1", "$2", "$4", "$5") + `
       FROM ins WHERE ins.status = 'skipped'
     ON CONFLICT (audit_id) WHERE result IS NOT NULL DO NOTHING)`

	beginOrdinary       = beginWith(doneOrdinary, "")
	beginForce          = beginWith(doneForce, "")
	beginOrdinaryResult = beginWith(doneOrdinary, skipResult)
	beginForceResult    = beginWith(doneForce, skipResult)
)

func beginWith(done, result string) string {
	return `
WITH done AS MATERIALIZED (` + done + `),
paused AS (` + pausedSQL("$1", "$12::text") + ` AS yes),
cancelled AS (` + cancelledSQL("$1", "$2", "$4", "$5", "$13::timestamptz") + ` AS yes),
prior AS (
     SELECT count(*)::int AS n, (array_agg(s.status ORDER BY s.id DESC))[1] AS last
       FROM (SELECT id, status FROM idem.pipeline_audit
              WHERE dag_id = $1 AND task_id = $2 AND partition_key = $4 AND run_id = $5
                AND stream_seq IS NOT DISTINCT FROM $7
                AND (status = 'started' AND started_at >= pg_postmaster_start_time()
                     OR (status = 'failed' AND error_kind = 'transient'))
              ORDER BY id DESC LIMIT nullif($10::int, 0)) s),
ins AS (
     INSERT INTO idem.pipeline_audit
            (dag_id, task_id, logical_date, partition_key, run_id, status, attempt, force, stream_seq,
             triggered_by, attributes, finished_at, definition_hash)
     SELECT $1, $2, $3, $4, $5, CASE WHEN done.yes THEN 'skipped' ELSE 'started' END, prior.n + 1, $6::boolean, $7, $8, $9,
            CASE WHEN done.yes THEN clock_timestamp() END, $11::text
       FROM done, prior, paused, cancelled
      WHERE NOT paused.yes AND NOT cancelled.yes AND (done.yes OR $10::int = 0 OR prior.n < $10::int)
     RETURNING id, status)` + result + `
SELECT prior.n, prior.last, ins.id, ins.status, paused.yes, cancelled.yes FROM prior CROSS JOIN paused CROSS JOIN cancelled LEFT JOIN ins ON true`
}

// pausedSQL is true while the dataset that the two SQL expressions name
// is paused (idem.dataset_pauses: open and not past its until, by the
// server's clock). The statements that begin attempts ask it, so that a
// pause committed before an attempt's statement holds that attempt even
// on a replica whose own reading of the pauses is stale (it could not
// read them through an outage, or it was stopped between its check and
// its begin): the database decides, once, for the whole fleet.
func pausedSQL(pipeline, dataset string) string {
	return `SELECT EXISTS (SELECT 1 FROM idem.dataset_pauses
                      WHERE dag_id = ` + pipeline + ` AND task_id = ` + dataset + ` AND resumed_at IS NULL
                        AND (until IS NULL OR until > clock_timestamp()))`
}

// cancelledSQL is true while a cancellation covers the event that the
// five SQL expressions name (coversSQL). The statements that begin
// attempts ask it, so that no attempt begins once a cancel has committed,
// however long the caller took between its own check and its begin.
func cancelledSQL(pipeline, dataset, partition, runID, published string) string {
	return `SELECT EXISTS (SELECT 1 FROM idem.cancellations
                      WHERE ` + coversSQL(pipeline, dataset, partition, runID, published) + `)`
}

// coversSQL is true of a row of idem.cancellations that covers the event
// the five SQL expressions name (pipeline, dataset, partition, run,
// published): a cancellation of its run, or of a range holding its
// partition made after it was published.
func coversSQL(pipeline, dataset, partition, runID, published string) string {
	return `dag_id = ` + pipeline + ` AND (run_id = ` + runID + `
		       OR (run_id IS NULL AND task_id = ` + dataset + ` AND ` + partition + ` BETWEEN from_key AND to_key AND cancelled_at > ` + published + `))`
}

// QueueBegin queues on b the start of an attempt, in one statement, for a
// caller that pipelines it with its own statements; into is filled once
// b's results are read, and ran reports whether the statement succeeded.
// While the dataset is paused it writes nothing and reports Paused; while
// a cancellation covers the event, nothing and Cancelled. When
// the run is already done it writes a finished `skipped` row: without
// force, when the ledger holds a success for the run; with force, when
// this very message (the stream sequence) already loaded, so a forced
// event redelivered after its commit does not load again. Otherwise it
// counts the loads of the same message that already ran and, when budget
// is 0 or that count is below it, writes the `started` row; at the budget
// it writes nothing and reports Spent.
//
// skipResult, when not nil, is the body of this attempt's result should the
// statement decide a skip (package results' JSON, without the audit id):
// the statement then writes it into the outbox with the skip, and into
// reports ResultWritten.
func QueueBegin(b *pgx.Batch, a Attempt, budget int, skipResult []byte, into *Begun, ran *bool) {
	// $12 names the dataset whose pause holds the attempt; NULL matches
	// no pause.
	pauseKey := &a.Dataset
	if a.ThroughPause {
		pauseKey = nil
	}
	args := []any{a.Pipeline, a.Dataset, a.LogicalDate, a.Partition, a.RunID, a.Force, nullSeq(a.StreamSeq),
		nullString(a.TriggeredBy), nullAttrs(a.Attributes), budget, nullString(a.DefinitionHash), pauseKey, a.Published}
	if skipResult != nil {
		args = append(args, string(skipResult))
	}
	b.Queue(beginSQL(a.Force, skipResult != nil), args...).QueryRow(func(r pgx.Row) error {
		var (
			id     *int64
			status *string
			last   *string
		)
		if err := r.Scan(&into.Prior, &last, &id, &status, &into.Paused, &into.Cancelled); err != nil {
			return fmt.Errorf("audit: begin: %w", err)
		}
		*ran = true
		into.Attempt = into.Prior + 1
		into.LastDied = last != nil && *last == StatusStarted
		if id == nil {
			into.Spent = !into.Paused && !into.Cancelled
			return nil
		}
		into.ID, into.Skipped = *id, *status == StatusSkipped
		into.ResultWritten = into.Skipped && skipResult != nil
		return nil
	})
}

// TryLockSQL is LockSQL without the wait: it returns false at once when
// another transaction holds the lock, so a pipeline never stalls behind it.
const TryLockSQL = "SELECT pg_try_advisory_xact_lock(" + lockIDSQL + ") FROM (SELECT $1::text AS lock_key) k"

// QueueSkip queues on b what Skip runs.
func QueueSkip(b *pgx.Batch, id int64) {
	b.Queue(skipSQL, id)
}
