package audit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// LoadedPartitions returns the partitions of a dataset with at least one
// successful load, keys from..to inclusive (canonical date and hour keys
// sort as they fall in time). It reads the ledger's primary key, so its cost
// depends on the range, not on the history.
func LoadedPartitions(ctx context.Context, db Querier, pipeline, dataset, from, to string) (map[string]bool, error) {
	rows, err := db.Query(ctx, `
		SELECT DISTINCT partition_key FROM idem.run_ledger
		 WHERE dag_id = $1 AND task_id = $2 AND partition_key >= $3 AND partition_key <= $4`,
		pipeline, dataset, from, to)
	if err != nil {
		return nil, fmt.Errorf("audit: loaded partitions of %s: %w", dataset, err)
	}
	out := map[string]bool{}
	var key string
	if _, err := pgx.ForEachRow(rows, []any{&key}, func() error { out[key] = true; return nil }); err != nil {
		return nil, fmt.Errorf("audit: loaded partitions of %s: %w", dataset, err)
	}
	return out, nil
}
