package audit

// What the status page's JSON API reads beyond the other queries: a
// range's attempts with their row counts, and the checks of given
// attempts, one statement each however long the range.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RangeRows are what an attempt wrote; Deleted nil when not counted.
type RangeRows struct {
	Inserted int64  `json:"inserted"`
	Updated  int64  `json:"updated"`
	Deleted  *int64 `json:"deleted"`
}

// RangeAttempt is one attempt as the API lists it.
type RangeAttempt struct {
	RunID       string     `json:"run_id"`
	Attempt     int        `json:"attempt"`
	Status      string     `json:"status"`
	Force       bool       `json:"force"`
	Error       *string    `json:"error"`
	ErrorKind   *string    `json:"error_kind"`
	TriggeredBy *string    `json:"triggered_by"`
	StreamSeq   *int64     `json:"stream_seq"`
	StartedAt   time.Time  `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
}

// StoredAttempts are one partition's attempts, skipped duplicates aside,
// newest first: list[0] is the latest, id its audit row and rows what it
// wrote.
type StoredAttempts struct {
	Count int64 // stored ones and those retention removed
	List  []RangeAttempt
	ID    int64
	Rows  RangeRows
}

// AttemptsInRange reads the newest limit attempts of each partition of
// dataset from..to, skipped duplicates aside, newest first (cancelled ones
// after the rest): the first is the latest, the one LatestInRange reads (limit must be at least 1). It reads
// pipeline_audit_partition_idx for the range, and the counts retention
// left in idem.pruned_attempts, as `idem audit status` does.
func AttemptsInRange(ctx context.Context, db Querier, pipeline, dataset, from, to string, limit int) (map[string]StoredAttempts, error) {
	rows, err := db.Query(ctx, `
		SELECT a.partition_key, a.id, a.run_id, a.attempt, a.status, a.force, a.error, a.error_kind, a.triggered_by, a.stream_seq,
		       a.started_at, a.finished_at, coalesce(a.rows_inserted, 0), coalesce(a.rows_updated, 0), a.rows_deleted,
		       a.n + coalesce(p.attempts, 0)
		  FROM (SELECT partition_key, id, run_id, attempt, status, force, error, error_kind, triggered_by, stream_seq,
		               started_at, finished_at, rows_inserted, rows_updated, rows_deleted,
		               count(*) OVER w AS n, row_number() OVER (w ORDER BY status = 'cancelled', id DESC) AS rn
		          FROM idem.pipeline_audit
		         WHERE dag_id = $1 AND task_id = $2 AND partition_key >= $3 AND partition_key <= $4 AND status <> 'skipped'
		        WINDOW w AS (PARTITION BY partition_key)) a
		  LEFT JOIN idem.pruned_attempts p ON p.dag_id = $1 AND p.task_id = $2 AND p.partition_key = a.partition_key
		 WHERE a.rn <= $5
		 ORDER BY a.partition_key, a.rn`,
		pipeline, dataset, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: attempts of %s: %w", dataset, err)
	}
	out := map[string]StoredAttempts{}
	var (
		key   string
		id, n int64
		a     RangeAttempt
		r     RangeRows
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &id, &a.RunID, &a.Attempt, &a.Status, &a.Force, &a.Error, &a.ErrorKind, &a.TriggeredBy,
		&a.StreamSeq, &a.StartedAt, &a.FinishedAt, &r.Inserted, &r.Updated, &r.Deleted, &n}, func() error {
		a.StartedAt = a.StartedAt.UTC()
		if a.FinishedAt != nil {
			f := a.FinishedAt.UTC()
			a.FinishedAt = &f
		}
		s, ok := out[key]
		if !ok {
			s = StoredAttempts{Count: n, ID: id, Rows: r}
		}
		s.List = append(s.List, a)
		out[key] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: attempts of %s: %w", dataset, err)
	}
	return out, nil
}

// ChecksOf reads the check outcomes of attempts ids, in the order they
// were recorded.
func ChecksOf(ctx context.Context, db Querier, ids []int64) (map[int64][]CheckOutcome, error) {
	out := map[int64][]CheckOutcome{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `
		SELECT audit_id, name, kind, severity, status, failing, checked, threshold, coalesce(note, ''), samples::text,
		       duration_ms, checked_at
		  FROM idem.check_results WHERE audit_id = ANY($1) ORDER BY audit_id, id`, ids)
	if err != nil {
		return nil, fmt.Errorf("audit: checks: %w", err)
	}
	var (
		id      int64
		c       CheckOutcome
		samples *string
		ms      float64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &c.Name, &c.Kind, &c.Severity, &c.Status, &c.Failing, &c.Checked, &c.Threshold, &c.Note,
		&samples, &ms, &c.CheckedAt}, func() error {
		c.Duration = time.Duration(ms * float64(time.Millisecond))
		c.CheckedAt = c.CheckedAt.UTC()
		c.Samples = nil
		if samples != nil {
			c.Samples = json.RawMessage(*samples)
		}
		out[id] = append(out[id], c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: checks: %w", err)
	}
	return out, nil
}
