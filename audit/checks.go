package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// KindCheck is the error kind of an attempt the dataset's checks refused.
const KindCheck = "check"

// CheckOutcome is one check's outcome of one attempt: what the checks
// return (internal/checks.Outcome is this type), what RecordChecks writes and
// what the API reads back. Note, Samples and Duration are left out of its
// JSON when empty; CheckedAt is set only on outcomes read from the audit.
type CheckOutcome struct {
	Name      string          `json:"name"`
	Kind      string          `json:"kind"`
	Severity  string          `json:"severity"`
	Status    string          `json:"status"`
	Failing   int64           `json:"failing"`
	Checked   int64           `json:"checked"`
	Threshold string          `json:"threshold"`
	Note      string          `json:"note,omitempty"`
	Samples   json.RawMessage `json:"samples,omitempty"`
	Duration  time.Duration   `json:"duration_ns,omitempty"`
	CheckedAt time.Time       `json:"checked_at,omitzero"`
}

// checkColumns are the check_results columns written from the JSON of a
// list of CheckOutcome (r), and checkRecord is that JSON's record type.
const (
	checkColumns = `r.name, r.kind, r.severity, r.status, r.failing, r.checked, r.threshold, r.samples, nullif(r.note, ''),
		       coalesce(r.duration_ns, 0) / 1e6`
	checkRecord = `name text, kind text, severity text, status text, failing bigint, checked bigint, threshold text,
		       samples jsonb, note text, duration_ns bigint`
)

const recordChecksSQL = `
		INSERT INTO idem.check_results (audit_id, dag_id, task_id, partition_key, run_id, name, kind, severity, status,
		                                failing, checked, threshold, samples, note, duration_ms)
		SELECT $1, $2, $3, $4, $5, ` + checkColumns + `
		  FROM jsonb_to_recordset($6::jsonb) AS r(` + checkRecord + `)`

// RecordChecks writes the outcomes of attempt id's checks, in a statement
// of their own: for a refused load, after its transaction rolled back.
func RecordChecks(ctx context.Context, db Querier, id int64, k RunKey, rs []CheckOutcome) error {
	if len(rs) == 0 {
		return nil
	}
	b, err := json.Marshal(rs)
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, recordChecksSQL, id, k.Pipeline, k.Dataset, k.Partition, k.RunID, b); err != nil {
		return fmt.Errorf("audit: record checks: %w", err)
	}
	return nil
}

// CheckRow is a recorded check outcome, as a partition's story lists it.
type CheckRow struct {
	AuditID   int64     `json:"audit_id"`
	RunID     string    `json:"run_id"`
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	Severity  string    `json:"severity"`
	Status    string    `json:"status"`
	Note      string    `json:"note,omitempty"`
	Failing   int64     `json:"failing"`
	Checked   int64     `json:"checked"`
	Threshold string    `json:"threshold"`
	Samples   string    `json:"samples,omitempty"` // JSON text, as recorded
	CheckedAt time.Time `json:"checked_at"`
}

// partitionChecks returns the newest limit check outcomes of a partition,
// newest first.
func partitionChecks(ctx context.Context, db Querier, pipeline, dataset, partition string, limit int) ([]CheckRow, error) {
	rows, err := db.Query(ctx, `
		SELECT audit_id, run_id, name, kind, severity, status, coalesce(note, ''), failing, checked, threshold,
		       coalesce(samples::text, ''), checked_at
		  FROM idem.check_results WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3
		 ORDER BY id DESC LIMIT $4`, pipeline, dataset, partition, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: partition checks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CheckRow, error) {
		var c CheckRow
		err := r.Scan(&c.AuditID, &c.RunID, &c.Name, &c.Kind, &c.Severity, &c.Status, &c.Note, &c.Failing, &c.Checked,
			&c.Threshold, &c.Samples, &c.CheckedAt)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit: partition checks: %w", err)
	}
	return out, nil
}
