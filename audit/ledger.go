package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The run ledger (idem.run_ledger) holds one row per run that loaded: what
// makes a redelivery a no-op. A load asks it twice and writes it once, all
// in batches its handler sends:
//
//   - QueueLookupRun, QueueLookupMessage and QueueLookupRuns read it: has
//     this run (or, for a forced event, this very message) already loaded?
//     They write nothing.
//   - QueueMarkSucceeded writes it: each load's `started` row becomes
//     `success` and its run enters the ledger, in one statement, which
//     SuccessError reads the refusals of.

// QueueLookupRun queues on b the ledger lookup of run k: done receives
// whether the run already loaded.
func QueueLookupRun(b *pgx.Batch, k RunKey, done *bool) {
	b.Queue(lookupRunSQL, k.Pipeline, k.Dataset, k.Partition, k.RunID).QueryRow(func(r pgx.Row) error { return r.Scan(done) })
}

const lookupRunSQL = `
		SELECT EXISTS (SELECT 1 FROM idem.run_ledger
		                WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3 AND run_id = $4)`

// RunLoaded is QueueLookupRun as a statement of its own: has run k
// already loaded?
func RunLoaded(ctx context.Context, db Querier, k RunKey) (bool, error) {
	var done bool
	if err := db.QueryRow(ctx, lookupRunSQL, k.Pipeline, k.Dataset, k.Partition, k.RunID).Scan(&done); err != nil {
		return false, fmt.Errorf("audit: ledger lookup of %s %s %s: %w", k.Dataset, k.Partition, k.RunID, err)
	}
	return done, nil
}

// QueueLookupMessage queues on b a forced event's lookup: done receives
// whether message seq of run k already loaded (a forced run loads again,
// its redelivery does not).
func QueueLookupMessage(b *pgx.Batch, k RunKey, seq uint64, done *bool) {
	b.Queue(`SELECT $5::bigint IS NOT NULL AND (SELECT true FROM idem.pipeline_audit
	          WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3 AND run_id = $4 AND stream_seq = $5 AND status = 'success'
	          ORDER BY id DESC LIMIT 1) IS NOT NULL`,
		k.Pipeline, k.Dataset, k.Partition, k.RunID, nullSeq(seq)).QueryRow(func(r pgx.Row) error { return r.Scan(done) })
}

// RunLookup is one run of a group whose lookup QueueLookupRuns queues:
// without Force, whether the run loaded (QueueLookupRun); with it, whether
// this very message (Seq) did (QueueLookupMessage). Done receives the
// answer.
type RunLookup struct {
	RunKey
	Force bool
	Seq   uint64
	Done  *bool
}

type lookupRow struct {
	Ord       int    `json:"ord"`
	Pipeline  string `json:"dag"`
	Dataset   string `json:"task"`
	Partition string `json:"part"`
	RunID     string `json:"run"`
	Force     bool   `json:"force"`
	Seq       *int64 `json:"seq"`
}

// QueueLookupRuns queues on b, as one statement, the lookup of each of ls.
// Queued after a group's locks, it reads a snapshot taken once they are
// held.
func QueueLookupRuns(b *pgx.Batch, ls []RunLookup) error {
	rows := make([]lookupRow, len(ls))
	for i, l := range ls {
		rows[i] = lookupRow{Ord: i, Pipeline: l.Pipeline, Dataset: l.Dataset, Partition: l.Partition, RunID: l.RunID,
			Force: l.Force, Seq: nullSeq(l.Seq)}
	}
	data, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("audit: ledger: %w", err)
	}
	b.Queue(`
		SELECT i.ord, `+groupDoneSQL+`
		  FROM jsonb_to_recordset($1::jsonb) AS i(ord int, dag text, task text, part text, run text, force boolean, seq bigint)
		 ORDER BY i.ord`, string(data)).Query(func(rs pgx.Rows) error {
		var done bool
		return eachAnswer(rs, len(ls), 0, "ledger", []any{&done}, func(i int) { *ls[i].Done = done })
	})
	return nil
}

// groupDoneSQL is "done?" for the row i of a group statement (i.dag,
// i.task, i.part, i.run, i.force, i.seq), as beginSQL, QueueLookupRun and
// QueueLookupMessage ask it for one: a forced attempt is done when this
// very message loaded, an ordinary one when the ledger holds its run.
//
// Each answer is a scalar subquery, so each member is a probe of its own
// index (the ledger's primary key; the audit's partition index, in its
// order): the planner cannot turn a probe into a join that reads and
// hashes the whole table, as it did with EXISTS over a set of members
// while the tables were small.
const groupDoneSQL = `CASE WHEN i.force THEN i.seq IS NOT NULL AND (
                SELECT true FROM idem.pipeline_audit a
                 WHERE a.dag_id = i.dag AND a.task_id = i.task AND a.partition_key = i.part AND a.run_id = i.run
                   AND a.stream_seq = i.seq AND a.status = 'success'
                 ORDER BY a.id DESC LIMIT 1) IS NOT NULL
            ELSE (SELECT true FROM idem.run_ledger l
                 WHERE l.dag_id = i.dag AND l.task_id = i.task AND l.partition_key = i.part AND l.run_id = i.run) IS NOT NULL
            END`

// Success is one load that is about to commit: its started row, its run,
// its rows, and the body of its result (nil when none is published).
type Success struct {
	RunKey
	ID     int64
	Rows   Rows
	Force  bool
	Result []byte
	// Checks are its checks' outcomes, recorded with it.
	Checks []CheckOutcome
}

// QueueMarkSucceeded queues on b, inside the loads' transaction, what
// makes each of ss a success: it marks the started row `success` with the
// row counts, enters the run in the ledger (with force, replacing the entry
// and counting the load) and writes the result, when there is one, into
// the outbox; then one statement records all their checks' outcomes. The server checks both conditions, so a batch that ends with
// COMMIT never commits past them: a row that was not `started` leaves the
// ledger's audit_id NULL (23502), and without force a second success of a
// run violates the ledger's primary key (23505). SuccessError turns those
// into ErrNotStarted and ErrAlreadySucceeded.
//
// Several successes none of which is forced go in one statement
// (groupSucceedSQL); a forced one, which replaces its run's ledger entry
// where another must fail on it, goes in a statement of its own.
func QueueMarkSucceeded(b *pgx.Batch, ss []Success) error {
	var checks []checkRow
	together := len(ss) > 1
	for _, s := range ss {
		together = together && !s.Force
	}
	if together {
		if err := queueGroupSucceeded(b, ss); err != nil {
			return err
		}
	}
	for _, s := range ss {
		if !together {
			queueMarkSucceeded(b, s.RunKey, s.ID, s.Rows, s.Force, s.Result)
		}
		for _, c := range s.Checks {
			checks = append(checks, checkRow{AuditID: s.ID, Pipeline: s.Pipeline, Dataset: s.Dataset,
				Partition: s.Partition, RunID: s.RunID, CheckOutcome: c})
		}
	}
	if len(checks) == 0 {
		return nil
	}
	data, err := json.Marshal(checks)
	if err != nil {
		return fmt.Errorf("audit: group checks: %w", err)
	}
	b.Queue(groupChecksSQL, string(data))
	return nil
}

// successRow is one success of groupSucceedSQL.
type successRow struct {
	Ord      int             `json:"ord"`
	Pipeline string          `json:"dag"`
	Dataset  string          `json:"task"`
	Part     string          `json:"part"`
	RunID    string          `json:"run"`
	ID       int64           `json:"id"`
	Written  int64           `json:"written"`
	Inserted int64           `json:"ins"`
	Updated  int64           `json:"upd"`
	Deleted  *int64          `json:"del"`
	Result   json.RawMessage `json:"result,omitempty"`
}

// queueGroupSucceeded queues groupSucceedSQL for ss, none of them forced.
func queueGroupSucceeded(b *pgx.Batch, ss []Success) error {
	rows := make([]successRow, len(ss))
	ids := make([]int64, len(ss))
	for i, s := range ss {
		rows[i] = successRow{Ord: i, Pipeline: s.Pipeline, Dataset: s.Dataset, Part: s.Partition, RunID: s.RunID, ID: s.ID,
			Written: s.Rows.Written(), Inserted: s.Rows.Inserted, Updated: s.Rows.Updated, Result: s.Result}
		if s.Rows.Deleted >= 0 {
			rows[i].Deleted = &s.Rows.Deleted
		}
		ids[i] = s.ID
	}
	data, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("audit: group successes: %w", err)
	}
	b.Queue("SET LOCAL plan_cache_mode = force_custom_plan")
	b.Queue(groupSucceedSQL, string(data), ids)
	b.Queue("SET LOCAL plan_cache_mode TO DEFAULT")
	return nil
}

// groupSucceedSQL is succeedSQL for several successes without force, in
// one statement: the audit rows `success`, their results into the outbox,
// their runs into the ledger, with the same refusals (a row not `started`
// leaves a NULL audit_id, 23502; a run already in the ledger, 23505).
//
// The audit rows are found by `id = ANY` of their ids ($2), never by a
// join of the audit to the input, and the statement is planned at each
// execution (force_custom_plan, set around it in the load's transaction):
// a plan a connection kept from when the audit was small would read the
// whole table, where one made for these ids takes the primary key once
// the table is more than a few pages. Each row's values come from the
// input by a subquery of a handful of rows.
const groupSucceedSQL = `
		WITH s AS MATERIALIZED (
		     SELECT * FROM jsonb_to_recordset($1::jsonb)
		         AS s(ord int, dag text, task text, part text, run text, id bigint, written bigint, ins bigint, upd bigint, del bigint, result jsonb)),
		done AS (
		     UPDATE idem.pipeline_audit a
		        SET status = 'success', finished_at = clock_timestamp(),
		            (row_count, rows_inserted, rows_updated, rows_deleted) =
		            (SELECT s.written, s.ins, s.upd, s.del FROM s WHERE s.id = a.id)
		      WHERE a.id = ANY ($2::bigint[]) AND a.status = 'started'
		     RETURNING a.id),
		res AS (
		     INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, result)
		     SELECT s.task, s.part, s.run, s.id, s.result FROM s WHERE s.result IS NOT NULL
		     ON CONFLICT (audit_id) WHERE result IS NOT NULL DO NOTHING)
		INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id)
		SELECT s.dag, s.task, s.part, s.run, (SELECT d.id FROM done d WHERE d.id = s.id)
		  FROM s ORDER BY s.ord`

// checkRow is one check outcome of one load.
type checkRow struct {
	AuditID   int64  `json:"audit_id"`
	Pipeline  string `json:"dag"`
	Dataset   string `json:"task"`
	Partition string `json:"part"`
	RunID     string `json:"run"`
	CheckOutcome
}

// groupChecksSQL is recordChecksSQL for the outcomes of many loads.
const groupChecksSQL = `
		INSERT INTO idem.check_results (audit_id, dag_id, task_id, partition_key, run_id, name, kind, severity, status,
		                                failing, checked, threshold, samples, note, duration_ms)
		SELECT r.audit_id, r.dag, r.task, r.part, r.run, ` + checkColumns + `
		  FROM jsonb_to_recordset($1::jsonb) AS r(audit_id bigint, dag text, task text, part text, run text,
		       ` + checkRecord + `)`

// queueMarkSucceeded queues the statement of one success (QueueMarkSucceeded):
// started row id becomes `success` with rows, run k enters the ledger, and
// result, when not nil, goes into the outbox.
func queueMarkSucceeded(b *pgx.Batch, k RunKey, id int64, rows Rows, force bool, result []byte) {
	var deleted *int64
	if rows.Deleted >= 0 {
		deleted = &rows.Deleted
	}
	args := []any{k.Pipeline, k.Dataset, k.Partition, k.RunID, id, rows.Written(), rows.Inserted, rows.Updated, deleted}
	if result != nil {
		args = append(args, string(result))
	}
	b.Queue(succeedSQL[succeedKind(force, result != nil)], args...)
}

func succeedKind(force, result bool) int {
	n := 0
	if force {
		n++
	}
	if result {
		n += 2
	}
	return n
}

// succeedSQL are the texts of queueMarkSucceeded, by succeedKind: each
// updates one audit row by its id, so it takes the primary key at every
// size.
var succeedSQL = func() (texts [4]string) {
	for _, force := range []bool{false, true} {
		for _, result := range []bool{false, true} {
			conflict, res := "", ""
			if force {
				conflict = `
		ON CONFLICT (dag_id, task_id, partition_key, run_id) DO UPDATE
		SET audit_id = EXCLUDED.audit_id, loads = l.loads + 1, succeeded_at = clock_timestamp()`
			}
			if result {
				res = `,
		res AS (
		     INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, result)
		     VALUES ($2, $3, $4, $5, $10::jsonb)
		     ON CONFLICT (audit_id) WHERE result IS NOT NULL DO NOTHING)`
			}
			texts[succeedKind(force, result)] = `
		WITH done AS (
		     UPDATE idem.pipeline_audit
		        SET status = 'success', row_count = $6, rows_inserted = $7, rows_updated = $8,
		            rows_deleted = $9, finished_at = clock_timestamp()
		      WHERE id = $5 AND status = 'started'
		     RETURNING id)` + res + `
		INSERT INTO idem.run_ledger AS l (dag_id, task_id, partition_key, run_id, audit_id)
		VALUES ($1, $2, $3, $4, (SELECT id FROM done))` + conflict
		}
	}
	return texts
}()

// ErrNotStarted means the audit row was not in state `started`: another
// process finished it, which would be a bug in the caller's locking.
var ErrNotStarted = errors.New("audit: row is not in state started")

// ErrAlreadySucceeded means the ledger already holds a success for the run
// and force was false.
var ErrAlreadySucceeded = errors.New("audit: run already succeeded")

// SuccessError maps the server's refusals of QueueMarkSucceeded's
// statements to ErrNotStarted and ErrAlreadySucceeded; other errors come
// back unchanged.
func SuccessError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.TableName != "run_ledger" {
		return err
	}
	switch {
	case pgErr.Code == "23502" && pgErr.ColumnName == "audit_id":
		return ErrNotStarted
	case pgErr.Code == "23505":
		return ErrAlreadySucceeded
	}
	return err
}
