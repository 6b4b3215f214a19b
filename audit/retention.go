package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Bounds of one prune batch.
const (
	// defaultPruneBatch is how many attempts, in id order, one prune
	// statement examines (it deletes at most that many).
	defaultPruneBatch = 1000
	// pruneLockTimeout bounds how long a batch waits for a lock; a row a load
	// holds is skipped (SKIP LOCKED), so only DDL could make it wait.
	pruneLockTimeout = time.Second
	// pruneStatementTimeout bounds one batch.
	pruneStatementTimeout = 30 * time.Second
)

// pruneLease is the lease one prune pass holds: with several replicas, one
// prunes and the others skip their pass. One per database, as the audit
// table is shared by every pipeline in it.
const pruneLease = "prune"

// pruneLeaseTTL is how long the prune lease outlives its last renewal
// (Hold renews it every 10s, on a pool connection of its own, so a slow
// batch does not delay it): a pruner killed mid-pass keeps the others out
// for at most 30s, which costs nothing as they prune once an hour, and a
// pass survives two renewals the database did not answer.
const pruneLeaseTTL = 30 * time.Second

// PruneOptions says what Prune deletes.
type PruneOptions struct {
	// Retention: attempts that started longer ago than this are pruned,
	// measured by the database clock. Must be positive. The database
	// raises it to idem.retention_floor (an administrator's, 7 days
	// unless changed) when it is shorter.
	Retention time.Duration
	// Batch is how many attempts one statement examines; 0 means 1,000
	// (defaultPruneBatch).
	Batch int
	// Pruned, when set, is called after each batch that deleted rows.
	Pruned func(n int64)
}

// PruneResult is what one pass did.
type PruneResult struct {
	// Deleted counts the attempts deleted.
	Deleted int64
	// Batches counts the statements run.
	Batches int
	// Busy: another process was pruning, so this pass did nothing.
	Busy bool
}

// Prune deletes attempts older than o.Retention, in batches of short
// transactions, walking idem.pipeline_audit in id order from the oldest
// until it reaches an attempt inside the retention. It keeps:
//   - each partition's latest attempt that is not a skipped duplicate,
//     unless a newer one has finished (a newer started attempt may yet be
//     skipped, and the older one would then be the latest again);
//   - each partition's latest success, so idem.missing_partitions, `idem
//     audit status` and backfill plans read the same after pruning;
//   - attempts an outbox row still names;
//   - rows a transaction holds (skipped, for a later pass).
//
// Source waits (idem.source_waits) last checked before the retention go
// too.
//
// The ledger (idem.run_ledger) is never pruned. What is deleted is counted
// per partition in idem.pruned_attempts.
//
// The deletes are the database's functions idem.prune_audit and
// idem.prune_source_waits, which run as their owner, the role that ran
// `idem migrate`: idem's role needs EXECUTE on them, not DELETE.
//
// Prune holds a lease for the pass (pruneLeaseTTL): with several replicas,
// one prunes and the others return Busy at once. Each batch is a
// transaction of its own on db, with pruneLockTimeout and
// pruneStatementTimeout set for it alone, so no state outlives a batch
// and db may be behind a transaction pooler.
func Prune(ctx context.Context, db *pgxpool.Pool, o PruneOptions) (PruneResult, error) {
	var res PruneResult
	if o.Retention <= 0 {
		return res, errors.New("audit: prune: the retention must be positive")
	}
	batch := o.Batch
	if batch <= 0 {
		batch = defaultPruneBatch
	}
	lease, ok, err := TryLease(ctx, db, pruneLease, pruneLeaseTTL)
	if err != nil {
		return res, fmt.Errorf("audit: prune: %w", err)
	}
	if !ok {
		res.Busy = true
		return res, nil
	}
	err = lease.Hold(ctx, func(ctx context.Context) error { return prune(ctx, db, batch, o, &res) })
	return res, err
}

// prune is one pass, counted in res.
func prune(ctx context.Context, db *pgxpool.Pool, batch int, o PruneOptions, res *PruneResult) error {
	age := o.Retention.Microseconds()
	var cursor int64
	for {
		var (
			last    *int64
			deleted int64
			done    bool
		)
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d; SET LOCAL statement_timeout = %d",
				pruneLockTimeout.Milliseconds(), pruneStatementTimeout.Milliseconds())); err != nil {
				return err
			}
			return tx.QueryRow(ctx, pruneSQL, age, cursor, batch).Scan(&last, &deleted, &done)
		})
		if err != nil {
			return fmt.Errorf("audit: prune after id %d: %w", cursor, err)
		}
		res.Batches++
		res.Deleted += deleted
		if deleted > 0 && o.Pruned != nil {
			o.Pruned(deleted)
		}
		if done || last == nil {
			if _, err := db.Exec(ctx, pruneWaitsSQL, age); err != nil {
				return fmt.Errorf("audit: prune the source waits: %w", err)
			}
			return nil
		}
		cursor = *last
	}
}

// pruneSQL examines the next $3 attempts after id $2 and deletes those
// older than $1 microseconds that are not kept (see Prune). It returns the
// last id examined, the attempts deleted, and whether the walk reached the
// retention window (or the end of the table). idem.prune_audit (schema
// v25) holds the rules: it runs as its owner, since idem's role may not
// DELETE in schema idem, and deletes nothing younger than
// idem.retention_floor, whatever age it is given. Every lookup in it is an
// index seek: the batch on the primary key, "a newer attempt finished" on
// pipeline_audit_partition_idx, the outbox on outbox_event.
const pruneSQL = `SELECT last_id, deleted, done FROM idem.prune_audit($1 * interval '1 microsecond', $2::bigint, $3::int)`

// pruneWaitsSQL deletes the source waits last checked more than $1
// microseconds ago (or before idem.retention_floor): they are over one way
// or the other, loaded, dead-lettered, or their event is gone.
const pruneWaitsSQL = `SELECT idem.prune_source_waits($1 * interval '1 microsecond')`
