package audit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// priorSQL counts, for the row i of a group statement, the loads of the
// same message that ran (rows left started, transient failures) and
// names the latest one's status. It reads the partition's attempts
// newest first through pipeline_audit_partition_idx, whose order the
// ORDER BY asks for, so no plan prefers another index; with a budget it
// stops counting at the budget, all the decision needs.
const priorSQL = `
       CROSS JOIN LATERAL (
            SELECT count(*)::int AS n, (array_agg(s.status ORDER BY s.id DESC))[1] AS last
              FROM (SELECT a.id, a.status FROM idem.pipeline_audit a
                     WHERE a.dag_id = i.dag AND a.task_id = i.task AND a.partition_key = i.part AND a.run_id = i.run
                       AND a.stream_seq IS NOT DISTINCT FROM i.seq
                       AND (a.status = 'started' AND a.started_at >= pg_postmaster_start_time()
                            OR (a.status = 'failed' AND a.error_kind = 'transient'))
                     ORDER BY a.id DESC LIMIT nullif(i.budget, 0)) s) p`

// groupInputSQL opens the group statements: $1, the beginRows, as rows.
const groupInputSQL = `
WITH input AS MATERIALIZED (
     SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(ord int, dag text, task text, ld date, part text, run text,
            force boolean, seq bigint, trig text, attrs jsonb, budget int, skip jsonb, def text, pub timestamptz)),`

// beginRow is one attempt of a group as beginGroupSQL reads it.
type beginRow struct {
	Ord       int               `json:"ord"`
	Pipeline  string            `json:"dag"`
	Dataset   string            `json:"task"`
	Date      *string           `json:"ld"`
	Partition string            `json:"part"`
	RunID     string            `json:"run"`
	Force     bool              `json:"force"`
	Seq       *int64            `json:"seq"`
	Trigger   *string           `json:"trig"`
	Attrs     map[string]string `json:"attrs,omitempty"`
	Budget    int               `json:"budget"`
	Skip      json.RawMessage   `json:"skip,omitempty"`
	Def       *string           `json:"def,omitempty"`
	Published time.Time         `json:"pub"`
}

// beginGroupSQL is beginSQL for the attempts of a group, each a row of $1:
// the same "done?" (a forced attempt asks about its own message, an
// ordinary one the ledger), the same count of the loads that ran, the same
// insert under the same budget and the same skip result, row by row, in
// one statement. A group's partitions are distinct, so each inserted row
// is found again by its partition and run.
var beginGroupSQL = groupInputSQL + `look AS MATERIALIZED (
     SELECT i.ord, ` + groupDoneSQL + ` AS yes, p.n, p.last, (` + pausedSQL("i.dag", "i.task") + `) AS paused,
            (` + cancelledSQL("i.dag", "i.task", "i.part", "i.run", "i.pub") + `) AS cancelled
       FROM input i` + priorSQL + `),
ins AS (
     INSERT INTO idem.pipeline_audit
            (dag_id, task_id, logical_date, partition_key, run_id, status, attempt, force, stream_seq,
             triggered_by, attributes, finished_at, definition_hash)
     SELECT i.dag, i.task, i.ld, i.part, i.run, CASE WHEN p.yes THEN 'skipped' ELSE 'started' END, p.n + 1, i.force,
            i.seq, i.trig, i.attrs, CASE WHEN p.yes THEN clock_timestamp() END, i.def
       FROM input i JOIN look p USING (ord)
      WHERE NOT p.paused AND NOT p.cancelled AND (p.yes OR i.budget = 0 OR p.n < i.budget)
      ORDER BY i.ord
     RETURNING id, partition_key, run_id, status),
res AS (
     INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, result)
     SELECT i.task, i.part, i.run, ins.id, i.skip || jsonb_build_object('audit_id', ins.id) || ` + loadedBy("i.dag", "i.task", "i.part", "i.run") + `
       FROM ins JOIN input i ON i.part = ins.partition_key AND i.run = ins.run_id
      WHERE ins.status = 'skipped' AND i.skip IS NOT NULL
     ON CONFLICT (audit_id) WHERE result IS NOT NULL DO NOTHING)
SELECT i.ord, p.n, p.last, ins.id, ins.status, p.paused, p.cancelled
  FROM input i JOIN look p USING (ord) LEFT JOIN ins ON ins.partition_key = i.part AND ins.run_id = i.run
 ORDER BY i.ord`

// GroupBegin is one attempt of a group to begin: what QueueBegin takes.
type GroupBegin struct {
	Attempt    Attempt
	Budget     int
	SkipResult []byte
	Into       *Begun
}

// QueueBeginGroup queues on b, as one statement, what QueueBegin queues
// for each of gs (attempts of distinct partitions); each Into is filled
// once b's results are read, and ran reports that the statement ran.
func QueueBeginGroup(b *pgx.Batch, gs []GroupBegin, ran *bool) error {
	data, err := beginRows(gs)
	if err != nil {
		return err
	}
	b.Queue(beginGroupSQL, string(data)).Query(func(rs pgx.Rows) error {
		var (
			id     *int64
			status *string
			last   *string
			prior  int
			paused bool
			cancel bool
		)
		err := eachAnswer(rs, len(gs), 0, "begin", []any{&prior, &last, &id, &status, &paused, &cancel}, func(i int) {
			into := gs[i].Into
			*into = Begun{Prior: prior, Attempt: prior + 1, LastDied: last != nil && *last == StatusStarted, Paused: paused, Cancelled: cancel}
			if id == nil {
				into.Spent = !paused && !cancel
			} else {
				into.ID, into.Skipped = *id, *status == StatusSkipped
				into.ResultWritten = into.Skipped && gs[i].SkipResult != nil
			}
		})
		*ran = err == nil
		return err
	})
	return nil
}

// skipDoneSQL is beginGroupSQL for attempts that wait for a load slot: it
// writes the `skipped` row (and its result) of each whose run is done, the
// same row beginGroupSQL would, and nothing for the others, which go on to
// their load. No budget: a skip spends none. While the dataset is paused
// it writes nothing: the begin that follows finds the pause.
var skipDoneSQL = groupInputSQL + `look AS MATERIALIZED (
     SELECT i.ord, p.n FROM input i` + priorSQL + `
      WHERE ` + groupDoneSQL + ` AND NOT (` + pausedSQL("i.dag", "i.task") + `)),
ins AS (
     INSERT INTO idem.pipeline_audit
            (dag_id, task_id, logical_date, partition_key, run_id, status, attempt, force, stream_seq,
             triggered_by, attributes, finished_at, definition_hash)
     SELECT i.dag, i.task, i.ld, i.part, i.run, 'skipped', p.n + 1, i.force, i.seq, i.trig, i.attrs, clock_timestamp(), i.def
       FROM input i JOIN look p USING (ord)
      ORDER BY i.ord
     RETURNING id, partition_key, run_id, stream_seq),
res AS (
     INSERT INTO idem.outbox (dataset, partition_key, run_id, audit_id, result)
     SELECT i.task, i.part, i.run, ins.id, i.skip || jsonb_build_object('audit_id', ins.id) || ` + loadedBy("i.dag", "i.task", "i.part", "i.run") + `
       FROM ins JOIN input i ON i.part = ins.partition_key AND i.run = ins.run_id AND i.seq IS NOT DISTINCT FROM ins.stream_seq
      WHERE i.skip IS NOT NULL
     ON CONFLICT (audit_id) WHERE result IS NOT NULL DO NOTHING)
SELECT i.ord, p.n, ins.id
  FROM input i JOIN look p USING (ord)
  JOIN ins ON ins.partition_key = i.part AND ins.run_id = i.run AND ins.stream_seq IS NOT DISTINCT FROM i.seq
 ORDER BY i.ord`

// QueueSkipDone queues on b, as one statement, the skip of each of gs whose
// run is already done (as QueueBegin would decide it), writing its
// `skipped` row and, with a SkipResult, its result. The Into of a skipped
// attempt is filled (Skipped, ID, Attempt); the others' are left zero.
// Unlike a group's, gs may hold several messages of one partition and run
// (a replay and its redelivery), told apart by their stream sequences;
// ran reports that the statement ran.
func QueueSkipDone(b *pgx.Batch, gs []GroupBegin, ran *bool) error {
	rows, err := beginRows(gs)
	if err != nil {
		return err
	}
	b.Queue(skipDoneSQL, string(rows)).Query(func(rs pgx.Rows) error {
		var (
			ord, prior int
			id         int64
		)
		for rs.Next() {
			if err := rs.Scan(&ord, &prior, &id); err != nil {
				return fmt.Errorf("audit: skip done: %w", err)
			}
			if ord < 0 || ord >= len(gs) {
				return fmt.Errorf("audit: skip done: row %d of %d", ord, len(gs))
			}
			g := gs[ord]
			*g.Into = Begun{ID: id, Skipped: true, Prior: prior, Attempt: prior + 1, ResultWritten: g.SkipResult != nil}
		}
		if err := rs.Err(); err != nil {
			return fmt.Errorf("audit: skip done: %w", err)
		}
		*ran = true
		return nil
	})
	return nil
}

// beginRows is gs as the group statements read them ($1).
func beginRows(gs []GroupBegin) ([]byte, error) {
	rows := make([]beginRow, len(gs))
	for i, g := range gs {
		a := g.Attempt
		r := beginRow{Ord: i, Pipeline: a.Pipeline, Dataset: a.Dataset, Partition: a.Partition, RunID: a.RunID,
			Force: a.Force, Seq: nullSeq(a.StreamSeq), Trigger: nullString(a.TriggeredBy), Attrs: nullAttrs(a.Attributes),
			Budget: g.Budget, Skip: g.SkipResult, Def: nullString(a.DefinitionHash), Published: a.Published}
		if a.LogicalDate != nil {
			d := a.LogicalDate.Format("2006-01-02")
			r.Date = &d
		}
		rows[i] = r
	}
	data, err := json.Marshal(rows)
	if err != nil {
		return nil, fmt.Errorf("audit: begin: %w", err)
	}
	return data, nil
}

// eachAnswer reads rs, rows of a group statement that answers each of n
// members once: an ordinal (from base) then dest. For each row it calls
// put with the member's index, after checking the ordinal is one of them;
// a member left unanswered is an error, never a silent zero.
func eachAnswer(rs pgx.Rows, n, base int, what string, dest []any, put func(i int)) error {
	seen := 0
	var ord int
	for rs.Next() {
		if err := rs.Scan(append([]any{&ord}, dest...)...); err != nil {
			return fmt.Errorf("audit: %s: %w", what, err)
		}
		if i := ord - base; i < 0 || i >= n {
			return fmt.Errorf("audit: %s: row %d of %d", what, ord, n)
		}
		put(ord - base)
		seen++
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("audit: %s: %w", what, err)
	}
	if seen != n {
		return fmt.Errorf("audit: %s: %d answers for %d", what, seen, n)
	}
	return nil
}

// QueueTryLocks queues on b, as one statement, the partition locks of a
// group, each tried (never waited for): locked[i] reports keys[i]'s.
func QueueTryLocks(b *pgx.Batch, keys []string, locked []*bool) {
	b.Queue(`
		SELECT k.ord, pg_try_advisory_xact_lock(`+lockIDSQL+`)
		  FROM unnest($1::text[]) WITH ORDINALITY AS k(lock_key, ord)
		 ORDER BY k.ord`, keys).Query(func(rs pgx.Rows) error {
		var ok bool
		return eachAnswer(rs, len(locked), 1, "try locks", []any{&ok}, func(i int) { *locked[i] = ok })
	})
}
