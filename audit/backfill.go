package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LatestAttempt is what a backfill plans from: the latest attempt of one
// partition, skipped duplicates aside (they say nothing new).
type LatestAttempt struct {
	Partition string
	Status    string // started, success, failed, or StatusMissing
	RunID     string
	Attempt   int
	ErrorKind string // fatal or transient, for a failed attempt
	Error     string
	// Age is measured by the database clock: since the attempt finished, or
	// since it started while it is still `started`.
	Age time.Duration
	// Locked: some load holds the partition's lock right now, so a `started`
	// attempt is really running (its process is alive), however old it is.
	Locked bool
}

// heldLocksSQL lists the keys of the advisory locks held in this database,
// rebuilt from pg_locks: a bigint key k is stored as classid = k >> 32,
// objid = k & 0xffffffff, objsubid = 1.
const heldLocksSQL = `
	SELECT (l.classid::bigint << 32) | l.objid::bigint AS lock_id
	  FROM pg_locks l
	 WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
	   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// LatestAttempts returns the latest attempt of each partition key of one
// dataset, in the order given; a key never attempted has Status
// StatusMissing. Keys must be canonical (as the consumer records them).
//
// Locked reads pg_locks for the lock handlers take around a load (LockSQL
// on PartitionLockKey): the only way to tell a long load that is alive from
// an attempt whose process died.
func LatestAttempts(ctx context.Context, db Querier, pipeline, dataset string, partitions []string) ([]LatestAttempt, error) {
	locks := make([]string, len(partitions))
	for i, p := range partitions {
		locks[i] = PartitionLockKey(pipeline, dataset, p)
	}
	rows, err := db.Query(ctx, `
		WITH held AS MATERIALIZED (`+heldLocksSQL+`)
		SELECT k.key, coalesce(a.status, 'missing'), coalesce(a.run_id, ''), coalesce(a.attempt, 0),
		       coalesce(a.error_kind, ''), coalesce(a.error, ''),
		       coalesce(extract(epoch FROM clock_timestamp() - coalesce(a.finished_at, a.started_at)), 0)::float8,
		       `+lockIDSQL+` IN (SELECT lock_id FROM held)
		  FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS k(key, lock_key, ord)
		  LEFT JOIN LATERAL (
		       SELECT p.status, p.run_id, p.attempt, p.error_kind, p.error, p.started_at, p.finished_at
		         FROM idem.pipeline_audit p
		        WHERE p.dag_id = $1 AND p.task_id = $2 AND p.partition_key = k.key AND p.status <> 'skipped'
		        ORDER BY p.id DESC LIMIT 1) a ON true
		 ORDER BY k.ord`, pipeline, dataset, partitions, locks)
	if err != nil {
		return nil, fmt.Errorf("audit: latest attempts: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (LatestAttempt, error) {
		var l LatestAttempt
		var age float64
		err := r.Scan(&l.Partition, &l.Status, &l.RunID, &l.Attempt, &l.ErrorKind, &l.Error, &age, &l.Locked)
		l.Age = time.Duration(age * float64(time.Second))
		return l, err
	})
}

// RunAttempt is where one partition of one run stands.
type RunAttempt struct {
	Partition string
	// Succeeded: the ledger holds a success for the partition and the run.
	Succeeded bool
	// The latest attempt of the run, skipped duplicates aside; Status is ""
	// when the run has no attempt yet.
	Status    string
	Attempt   int
	RowCount  *int64
	ErrorKind string
	Error     string
}

// RunAttempts returns, for each partition key in the order given, the state
// of run runID: what `idem backfill --wait` follows.
func RunAttempts(ctx context.Context, db Querier, pipeline, dataset, runID string, partitions []string) ([]RunAttempt, error) {
	rows, err := db.Query(ctx, `
		SELECT k.key,
		       EXISTS (SELECT 1 FROM idem.run_ledger l
		                WHERE l.dag_id = $1 AND l.task_id = $2 AND l.partition_key = k.key AND l.run_id = $3),
		       coalesce(a.status, ''), coalesce(a.attempt, 0), a.row_count, coalesce(a.error_kind, ''), coalesce(a.error, '')
		  FROM unnest($4::text[]) WITH ORDINALITY AS k(key, ord)
		  LEFT JOIN LATERAL (
		       SELECT p.status, p.attempt, p.row_count, p.error_kind, p.error
		         FROM idem.pipeline_audit p
		        WHERE p.dag_id = $1 AND p.task_id = $2 AND p.partition_key = k.key AND p.run_id = $3
		          AND p.status <> 'skipped'
		        ORDER BY p.id DESC LIMIT 1) a ON true
		 ORDER BY k.ord`, pipeline, dataset, runID, partitions)
	if err != nil {
		return nil, fmt.Errorf("audit: run attempts: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunAttempt, error) {
		var a RunAttempt
		err := r.Scan(&a.Partition, &a.Succeeded, &a.Status, &a.Attempt, &a.RowCount, &a.ErrorKind, &a.Error)
		return a, err
	})
}
