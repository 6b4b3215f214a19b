package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/strategies"
)

const recordSchemaChangesSQL = `
		INSERT INTO idem.schema_changes (audit_id, dag_id, task_id, partition_key, run_id, column_name, change, action,
		                                 old_type, new_type, policy, ddl, reason)
		SELECT $1, $2, $3, $4, $5, r.column, r.change, r.action, r.old_type, r.new_type, r.policy, r.ddl, r.reason
		  FROM jsonb_to_recordset($6::jsonb) AS r("column" text, change text, action text, old_type text, new_type text,
		       policy text, ddl text, reason text)`

// QueueRecordSchemaChanges queues on b the schema changes attempt id met,
// for a load that commits: a change it made commits with its DDL.
func QueueRecordSchemaChanges(b *pgx.Batch, id int64, k RunKey, cs []strategies.SchemaChange) error {
	if len(cs) == 0 {
		return nil
	}
	data, err := json.Marshal(cs)
	if err != nil {
		return err
	}
	b.Queue(recordSchemaChangesSQL, id, k.Pipeline, k.Dataset, k.Partition, k.RunID, data)
	return nil
}

// RecordSchemaChanges writes them in a statement of their own: for a load
// refused by its on_schema_change, after its transaction rolled back.
func RecordSchemaChanges(ctx context.Context, db Querier, id int64, k RunKey, cs []strategies.SchemaChange) error {
	if len(cs) == 0 {
		return nil
	}
	data, err := json.Marshal(cs)
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, recordSchemaChangesSQL, id, k.Pipeline, k.Dataset, k.Partition, k.RunID, data); err != nil {
		return fmt.Errorf("audit: record schema changes: %w", err)
	}
	return nil
}

// SchemaChangeRow is a recorded schema change, with the attempt that met it.
type SchemaChangeRow struct {
	strategies.SchemaChange
	AuditID   int64     `json:"audit_id"`
	Dataset   string    `json:"dataset"`
	Partition string    `json:"partition"`
	RunID     string    `json:"run_id"`
	At        time.Time `json:"at"`
}

// SchemaChanges returns the newest limit schema changes of a pipeline,
// newest first: of one dataset when dataset is set, of one partition when
// partition is too.
func SchemaChanges(ctx context.Context, db Querier, pipeline, dataset, partition string, limit int) ([]SchemaChangeRow, error) {
	// One statement per scope, so each plan, generic ones included, takes
	// its index: (dag_id, task_id, partition_key, id DESC) for a dataset or
	// a partition, (dag_id, id DESC) for the pipeline.
	var out []SchemaChangeRow
	var err error
	switch {
	case dataset == "":
		out, err = readSchemaChanges(ctx, db, `dag_id = $1 ORDER BY id DESC LIMIT $2`, pipeline, limit)
	case partition == "":
		out, err = readSchemaChanges(ctx, db, `dag_id = $1 AND task_id = $2 ORDER BY id DESC LIMIT $3`, pipeline, dataset, limit)
	default:
		out, err = readSchemaChanges(ctx, db, partitionSchemaChanges, pipeline, dataset, partition, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: schema changes: %w", err)
	}
	return out, nil
}

// partitionSchemaChanges is the clause of one partition's newest changes:
// idem audit schema --partition and a partition's story.
const partitionSchemaChanges = `dag_id = $1 AND task_id = $2 AND partition_key = $3 ORDER BY id DESC LIMIT $4`

// readSchemaChanges reads the schema changes the clause where selects and
// orders; where is one of this file's constant clauses, never built from
// input (the values are bound parameters).
func readSchemaChanges(ctx context.Context, db Querier, where string, args ...any) ([]SchemaChangeRow, error) {
	rows, err := db.Query(ctx, `
		SELECT audit_id, task_id, partition_key, run_id, column_name, change, action, coalesce(old_type, ''),
		       coalesce(new_type, ''), policy, coalesce(ddl, ''), coalesce(reason, ''), changed_at
		  FROM idem.schema_changes
		 WHERE `+where, args...)
	if err != nil {
		return nil, err
	}
	var out []SchemaChangeRow
	var r SchemaChangeRow
	_, err = pgx.ForEachRow(rows, []any{&r.AuditID, &r.Dataset, &r.Partition, &r.RunID, &r.Column, &r.Change, &r.Action,
		&r.OldType, &r.NewType, &r.Policy, &r.DDL, &r.Reason, &r.At}, func() error {
		r.At = r.At.UTC()
		out = append(out, r)
		return nil
	})
	return out, err
}
