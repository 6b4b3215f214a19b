package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Wait is a partition whose source was not ready when its event came: no
// attempt ran, so the audit's attempts say nothing of it. It is current
// while no attempt of the partition started after its last check.
type Wait struct {
	Dataset   string    `json:"dataset"`
	Partition string    `json:"partition"`
	RunID     string    `json:"run_id"`
	Reason    string    `json:"reason"`
	Since     time.Time `json:"since"`
	CheckedAt time.Time `json:"checked_at"`
	GivesUpAt time.Time `json:"gives_up_at"`
	Checks    int       `json:"checks"`
	// GaveUp: the last check found the wait over (wait_up_to spent) and the
	// event went to the dead letters.
	GaveUp bool `json:"gave_up"`
}

// RecordWait writes k's wait, at one check of its source: since is when
// the event was published, givesUpAt when the wait ends, gaveUp whether
// this check ended it. A wait of another run replaces the partition's.
func RecordWait(ctx context.Context, db Querier, k RunKey, reason string, since, givesUpAt time.Time, gaveUp bool) error {
	_, err := db.Exec(ctx, `
		INSERT INTO idem.source_waits AS w (dag_id, task_id, partition_key, run_id, reason, since, gives_up_at, gave_up)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (dag_id, task_id, partition_key) DO UPDATE
		   SET reason = EXCLUDED.reason, checked_at = EXCLUDED.checked_at, gave_up = EXCLUDED.gave_up,
		       gives_up_at = EXCLUDED.gives_up_at, since = EXCLUDED.since,
		       checks = CASE WHEN w.run_id = EXCLUDED.run_id THEN w.checks + 1 ELSE 1 END,
		       run_id = EXCLUDED.run_id`,
		k.Pipeline, k.Dataset, k.Partition, k.RunID, reason, since, givesUpAt, gaveUp)
	if err != nil {
		return fmt.Errorf("audit: record the wait of %s %s: %w", k.Dataset, k.Partition, err)
	}
	return nil
}

// currentWaits keeps the waits that no attempt has overtaken.
const currentWaits = `
		  FROM idem.source_waits w
		 WHERE NOT EXISTS (SELECT 1 FROM idem.pipeline_audit a
		                    WHERE a.dag_id = w.dag_id AND a.task_id = w.task_id AND a.partition_key = w.partition_key
		                      AND a.started_at >= w.checked_at)`

const waitColumns = `SELECT w.task_id, w.partition_key, w.run_id, w.reason, w.since, w.checked_at, w.gives_up_at, w.checks, w.gave_up`

func scanWaits(rows pgx.Rows) ([]Wait, error) {
	var out []Wait
	var w Wait
	_, err := pgx.ForEachRow(rows, []any{&w.Dataset, &w.Partition, &w.RunID, &w.Reason, &w.Since, &w.CheckedAt, &w.GivesUpAt, &w.Checks, &w.GaveUp},
		func() error {
			out = append(out, w)
			return nil
		})
	return out, err
}

// WaitOf returns the partition's current wait, nil when none.
func WaitOf(ctx context.Context, db Querier, pipeline, dataset, partition string) (*Wait, error) {
	rows, err := db.Query(ctx, waitColumns+currentWaits+`
		   AND w.dag_id = $1 AND w.task_id = $2 AND w.partition_key = $3`, pipeline, dataset, partition)
	if err != nil {
		return nil, fmt.Errorf("audit: wait of %s %s: %w", dataset, partition, err)
	}
	ws, err := scanWaits(rows)
	if err != nil || len(ws) == 0 {
		return nil, err
	}
	return &ws[0], nil
}

// WaitsInRange returns the current waits of the datasets' partitions
// from..to (both inclusive; empty: unbounded), newest check first, at
// most limit.
func WaitsInRange(ctx context.Context, db Querier, pipeline string, datasets []string, from, to string, limit int) ([]Wait, error) {
	rows, err := db.Query(ctx, waitColumns+currentWaits+`
		   AND w.dag_id = $1 AND w.task_id = ANY($2)
		   AND ($3 = '' OR w.partition_key >= $3) AND ($4 = '' OR w.partition_key <= $4)
		 ORDER BY w.checked_at DESC LIMIT $5`, pipeline, datasets, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: waits: %w", err)
	}
	ws, err := scanWaits(rows)
	if err != nil {
		return nil, fmt.Errorf("audit: waits: %w", err)
	}
	return ws, nil
}
