package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PartitionStatus is the latest attempt of one partition.
type PartitionStatus struct {
	Partition  string     `json:"partition"`
	Status     string     `json:"status"` // started, success, failed, or "missing"
	RunID      string     `json:"run_id,omitempty"`
	Attempt    int        `json:"attempt,omitempty"`
	Attempts   int        `json:"attempts"` // attempts ever recorded for the partition
	RowCount   *int64     `json:"row_count,omitempty"`
	Error      string     `json:"error,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// TriggeredBy is the upstream run ("<dataset>:<partition>:<run_id>") whose
	// success queued this partition's latest attempt; empty when a scheduler
	// or an operator published it.
	TriggeredBy string `json:"triggered_by,omitempty"`
	// WaitingFor lists, for a join, each upstream whose latest
	// attempt for the partition is not a success, as "<dataset>: <status>".
	WaitingFor []string `json:"waiting_for,omitempty"`
	// Definition is the hash of the definition the latest attempt ran
	// (nil: not recorded); Outdated, set by the caller, says a success
	// ran another than the dataset's current one (audit.Outdated).
	Definition *string `json:"definition,omitempty"`
	Outdated   bool    `json:"outdated,omitempty"`
}

// UpstreamStates returns, for each day from..to and each upstream, the
// state of the upstream's partition of that day (StateOf its latest
// attempt, skips aside): what a join waits for (WaitingFor). Like
// StatusRange it seeks each day's partitions, so its cost follows the
// range, not the history.
func UpstreamStates(ctx context.Context, db Querier, pipeline string, upstreams []string, from, to time.Time) (map[string]map[string]string, error) {
	rows, err := db.Query(ctx, `
		SELECT to_char(d, 'YYYY-MM-DD'), u.task_id, coalesce(s.status, ''), coalesce(s.error_kind, s.kind, '')
		  FROM `+daysSQL+` CROSS JOIN unnest($2::text[]) AS u(task_id)
		  LEFT JOIN LATERAL (
		       SELECT a.status, a.error_kind, a.kind
		         FROM idem.pipeline_audit a
		        WHERE a.dag_id = $1 AND a.task_id = u.task_id AND `+dayKeysSQL+`
		          AND a.logical_date = d::date AND a.status <> 'skipped'
		        ORDER BY a.id DESC LIMIT 1) s ON true`,
		pipeline, upstreams, from, to)
	if err != nil {
		return nil, fmt.Errorf("audit: upstream states: %w", err)
	}
	out := map[string]map[string]string{}
	var day, ds, status, kind string
	_, err = pgx.ForEachRow(rows, []any{&day, &ds, &status, &kind}, func() error {
		if out[day] == nil {
			out[day] = map[string]string{}
		}
		out[day][ds] = StateOf(status, kind)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: upstream states: %w", err)
	}
	return out, nil
}

// dayKeysSQL bounds a.partition_key to the keys of day d: a date key
// ("2026-11-28") and the hour keys of that day ("2026-11-28T13:00:00Z") sort
// from the day's key to the next day's, so the bound is a range on
// pipeline_audit_partition_idx. The caller adds a.logical_date = d,
// which keeps text partitions out as before.
const dayKeysSQL = `a.partition_key >= to_char(d, 'YYYY-MM-DD') AND a.partition_key < to_char(d + 1, 'YYYY-MM-DD')`

// daysSQL is the days $3..$4 as dates d. An integer series, unlike a
// timestamp one, gets an exact row estimate: with the default of 1,000 rows
// a long history priced the per-day seeks past jit_above_cost, and the JIT
// compilation cost more than the query.
const daysSQL = `(SELECT $3::date + i AS d FROM generate_series(0, $4::date - $3::date) AS i) AS days`

// StatusRange returns one entry per day from..to (inclusive), in order;
// partitions never attempted have status "missing", retracted ones
// "retracted". Each day is one range
// seek on pipeline_audit_partition_idx (the latest attempt and the count in
// one pass), so the cost follows the range and the day's own attempts, not
// the history. Attempts counts the pruned ones too (idem.pruned_attempts).
func StatusRange(ctx context.Context, db Querier, pipeline, dataset string, from, to time.Time) ([]PartitionStatus, error) {
	rows, err := db.Query(ctx, `
		SELECT to_char(d, 'YYYY-MM-DD'),
		       CASE WHEN s.kind = 'retracted' THEN 'retracted' ELSE coalesce(s.status, 'missing') END,
		       coalesce(s.run_id, ''), coalesce(s.attempt, 0),
		       coalesce(s.n, 0) + coalesce((SELECT sum(p.attempts) FROM idem.pruned_attempts p
		                WHERE p.dag_id = $1 AND p.task_id = $2 AND p.partition_key >= to_char(d, 'YYYY-MM-DD')
		                  AND p.partition_key < to_char(d + 1, 'YYYY-MM-DD') AND p.logical_date = d), 0),
		       s.row_count, coalesce(s.error, ''), s.started_at, s.finished_at, coalesce(s.triggered_by, ''), s.definition_hash
		  FROM `+daysSQL+`
		  LEFT JOIN LATERAL (
		       SELECT a.status, a.kind, a.run_id, a.attempt, a.row_count, a.error, a.started_at, a.finished_at, a.triggered_by, a.definition_hash,
		              count(*) OVER () AS n
		         FROM idem.pipeline_audit a
		        WHERE a.dag_id = $1 AND a.task_id = $2 AND `+dayKeysSQL+`
		          AND a.logical_date = d AND a.status <> 'skipped'
		        ORDER BY a.id DESC LIMIT 1) s ON true
		 ORDER BY d`, pipeline, dataset, from, to)
	if err != nil {
		return nil, fmt.Errorf("audit: status: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PartitionStatus, error) {
		var p PartitionStatus
		err := r.Scan(&p.Partition, &p.Status, &p.RunID, &p.Attempt, &p.Attempts, &p.RowCount, &p.Error, &p.StartedAt, &p.FinishedAt, &p.TriggeredBy, &p.Definition)
		return p, err
	})
}

// Missing returns the days from..to (inclusive) with no successful load, the
// same answer as `SELECT * FROM idem.missing_partitions(...)`.
func Missing(ctx context.Context, db Querier, pipeline, dataset string, from, to time.Time) ([]time.Time, error) {
	rows, err := db.Query(ctx, "SELECT logical_date FROM idem.missing_partitions($1, $2, $3, $4)", pipeline, dataset, from, to)
	if err != nil {
		return nil, fmt.Errorf("audit: missing: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[time.Time])
}
