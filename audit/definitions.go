package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RecordDefinition keeps a dataset's definition under its hash (schema
// v22), once: a definition already recorded is left as it is, with the
// time it was first seen.
func RecordDefinition(ctx context.Context, db Querier, pipeline, dataset, hash string, def json.RawMessage) error {
	// As text: in statement_mode exec a []byte is sent as bytea.
	_, err := db.Exec(ctx, `
		INSERT INTO idem.definitions (dag_id, task_id, hash, definition) VALUES ($1, $2, $3, $4::jsonb)
		ON CONFLICT (dag_id, task_id, hash) DO NOTHING`, pipeline, dataset, hash, string(def))
	if err != nil {
		return fmt.Errorf("audit: record the definition of %s: %w", dataset, err)
	}
	return nil
}

// DefinitionsOf returns the recorded definitions of a dataset with the
// given hashes, by hash; a hash never recorded has no entry.
func DefinitionsOf(ctx context.Context, db Querier, pipeline, dataset string, hashes []string) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if len(hashes) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `
		SELECT hash, definition::text FROM idem.definitions
		 WHERE dag_id = $1 AND task_id = $2 AND hash = ANY($3)`, pipeline, dataset, hashes)
	if err != nil {
		return nil, fmt.Errorf("audit: definitions of %s: %w", dataset, err)
	}
	var h, def string
	_, err = pgx.ForEachRow(rows, []any{&h, &def}, func() error {
		out[h] = json.RawMessage(def)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: definitions of %s: %w", dataset, err)
	}
	return out, nil
}

// Loaded is a partition's latest successful load and the definition it
// ran.
type Loaded struct {
	Partition  string
	AuditID    int64
	RunID      string
	FinishedAt time.Time
	// Definition is the hash of the definition the load ran; nil when it
	// ran before idem recorded definitions (schema v22).
	Definition *string
}

// LatestSuccesses returns the latest successful load of every partition of
// a dataset with a key from..to inclusive ("" leaves that end open), in key
// order. It reads pipeline_audit_partition_idx one partition at a time, as
// LatestInRange does, so its cost follows the partitions, not the history.
func LatestSuccesses(ctx context.Context, db Querier, pipeline, dataset, from, to string) ([]Loaded, error) {
	q := `
		SELECT DISTINCT ON (partition_key) partition_key, id, run_id, finished_at, definition_hash
		  FROM idem.pipeline_audit
		 WHERE dag_id = $1 AND task_id = $2 AND status = 'success'`
	args := []any{pipeline, dataset}
	if from != "" {
		args = append(args, from)
		q += fmt.Sprintf(" AND partition_key >= $%d", len(args))
	}
	if to != "" {
		args = append(args, to)
		q += fmt.Sprintf(" AND partition_key <= $%d", len(args))
	}
	q += `
		 ORDER BY partition_key, id DESC`
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("audit: latest loads of %s: %w", dataset, err)
	}
	var out []Loaded
	var l Loaded
	_, err = pgx.ForEachRow(rows, []any{&l.Partition, &l.AuditID, &l.RunID, &l.FinishedAt, &l.Definition}, func() error {
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: latest loads of %s: %w", dataset, err)
	}
	return out, nil
}

// RunLoadedIn reports which of partitions the ledger holds a success of run
// runID for, by the ledger's primary key.
func RunLoadedIn(ctx context.Context, db Querier, pipeline, dataset, runID string, partitions []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(partitions) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `
		SELECT partition_key FROM idem.run_ledger
		 WHERE dag_id = $1 AND task_id = $2 AND partition_key = ANY($3) AND run_id = $4`, pipeline, dataset, partitions, runID)
	if err != nil {
		return nil, fmt.Errorf("audit: ledger of run %s: %w", runID, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("audit: ledger of run %s: %w", runID, err)
	}
	for _, k := range keys {
		out[k] = true
	}
	return out, nil
}
