package handlers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/schemas"
)

// Versions and retractions. With keep_versions a load archives the rows it
// replaces (archive, in its transaction, before the strategy runs); an
// operator's Restore swaps an archived version back in and Retract empties
// a partition on purpose. Both run like a load: one transaction under the
// partition's lock, an attempt row (kind restored or retracted) and a
// ledger entry that become the partition's latest, and the downstream
// events its `then:` names, so a downstream recomputes from what the
// partition holds now.

// archive saves the partition's rows as they stand, in the load's
// transaction, when the dataset keeps versions.
func (l *loading) archive(ctx context.Context, tx pgx.Tx) error {
	if a := l.ds.Archive; a != nil && a.Keep > 0 {
		_, err := a.Save(ctx, tx, l.a.Partition)
		return err
	}
	return nil
}

// OperatorRequest is an operator's restore or retraction of a partition.
type OperatorRequest struct {
	Dataset, Partition string
	// ToRun names the run whose archived rows a restore puts back; ""
	// means the newest archived version.
	ToRun string
	// Reason and By are recorded with the action and the attempt.
	Reason, By string
	// RemoteAddr is where the request came from ("" from the CLI).
	RemoteAddr string
}

// OperatorResult is what a restore or a retraction did.
type OperatorResult struct {
	// RunID is the run the partition's rows now belong to; AuditID its
	// attempt row.
	RunID   string
	AuditID int64
	// Restored is what a restore swapped; Deleted what a retraction
	// deleted.
	Restored audit.Restored
	Deleted  int64
	// Downstream names the datasets queued (a join waiting for its
	// other upstreams is not).
	Downstream []string
	// ActionID is the action's row in idem.operator_actions.
	ActionID int64
}

// ErrRefused wraps why a restore or a retraction changed nothing.
var ErrRefused = errors.New("refused")

// Restore puts back the archived rows of r.ToRun (the newest archived
// version when empty) in one transaction under the partition's lock: the
// current rows are archived first, so a restore can be undone. It is
// recorded as an operator action and a successful attempt of kind
// restored, run restore__<run>__<n>, and triggers `then:` like a load.
// Nothing changes when the partition has no such version or the target's
// columns changed since it was archived.
func (h *Handler) Restore(ctx context.Context, r OperatorRequest) (OperatorResult, error) {
	return h.operate(ctx, r, audit.ActionRestore, func(ctx context.Context, tx pgx.Tx, ds *Dataset, res *OperatorResult) (string, error) {
		rs, err := ds.Archive.Restore(ctx, tx, r.Partition, r.ToRun)
		switch {
		case errors.Is(err, audit.ErrNoVersion) && r.ToRun != "":
			return "", fmt.Errorf("%w: %s %s has no archived version of run %s", ErrRefused, r.Dataset, r.Partition, r.ToRun)
		case errors.Is(err, audit.ErrNoVersion):
			return "", fmt.Errorf("%w: %s %s has no archived version (keep_versions archives the rows each load replaces)", ErrRefused, r.Dataset, r.Partition)
		case err != nil:
			var cc *audit.ColumnsChangedError
			if errors.As(err, &cc) {
				return "", fmt.Errorf("%w: %v", ErrRefused, err)
			}
			return "", err
		}
		res.Restored = rs
		prefix := "restore__" + short(rs.Version.RunID) + "__"
		n, err := runsFrom(ctx, tx, h.Pipeline, r.Dataset, r.Partition, prefix)
		return fmt.Sprintf("%s%d", prefix, n+1), err
	})
}

// Retract deletes the partition's rows in one transaction under its lock
// (archiving them first when the dataset keeps versions) and records the
// tombstone: a successful attempt of kind retracted, run retract__<n>.
// The calendar counts the partition as loaded (intentionally empty), a
// later event of another run is skipped unless forced, and `then:` is
// triggered so a downstream recomputes without it.
func (h *Handler) Retract(ctx context.Context, r OperatorRequest) (OperatorResult, error) {
	return h.operate(ctx, r, audit.ActionRetract, func(ctx context.Context, tx pgx.Tx, ds *Dataset, res *OperatorResult) (string, error) {
		if ds.Archive.Keep > 0 {
			if _, err := ds.Archive.Save(ctx, tx, r.Partition); err != nil {
				return "", err
			}
		}
		n, err := ds.Archive.Empty(ctx, tx, r.Partition)
		if err != nil {
			return "", err
		}
		res.Deleted = n
		k, err := runsFrom(ctx, tx, h.Pipeline, r.Dataset, r.Partition, "retract__")
		return fmt.Sprintf("retract__%d", k+1), err
	})
}

// short keeps a run id derived from run within the event's limit.
func short(run string) string {
	if len(run) > schemas.MaxRunIDChars-32 {
		return run[:schemas.MaxRunIDChars-32]
	}
	return run
}

// runsFrom counts the partition's runs whose id starts with prefix, under
// its lock: the next restore or retraction is numbered after them.
func runsFrom(ctx context.Context, tx pgx.Tx, pipeline, dataset, partition, prefix string) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM idem.run_ledger
		WHERE dag_id = $1 AND task_id = $2 AND partition_key = $3 AND starts_with(run_id, $4)`, pipeline, dataset, partition, prefix).Scan(&n)
	return n, err
}

// operate records the action, runs fn in a transaction under the
// partition's lock, then writes the attempt of kind action's, its ledger
// entry and its downstream events, and commits; fn returns the run id.
func (h *Handler) operate(ctx context.Context, r OperatorRequest, action string,
	fn func(ctx context.Context, tx pgx.Tx, ds *Dataset, res *OperatorResult) (string, error)) (OperatorResult, error) {
	var res OperatorResult
	ds, ok := h.dataset(r.Dataset)
	if !ok {
		return res, fmt.Errorf("%w: dataset %q is not configured", ErrRefused, r.Dataset)
	}
	if ds.Archive == nil {
		return res, fmt.Errorf("%w: dataset %s has no partition_column, so idem cannot tell its partition's rows", ErrRefused, r.Dataset)
	}
	if r.Reason == "" || r.By == "" {
		return res, fmt.Errorf("%w: say who asks and why (by, reason)", ErrRefused)
	}
	pt, _ := h.Lookup(r.Dataset)
	key, err := schemas.ParsePartition(pt, r.Partition)
	if err != nil {
		return res, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	r.Partition = key.Key
	detail := map[string]string{"dataset": r.Dataset, "partition": r.Partition, "reason": r.Reason}
	if r.ToRun != "" {
		detail["to_run"] = r.ToRun
	}
	actionID, err := audit.RecordAction(ctx, h.DB, h.Pipeline, action, r.By, r.RemoteAddr, detail)
	if err != nil {
		return res, err
	}
	res.ActionID = actionID
	err = pgx.BeginFunc(ctx, h.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, audit.LockSQL, audit.PartitionLockKey(h.Pipeline, r.Dataset, r.Partition)); err != nil {
			return err
		}
		run, err := fn(ctx, tx, ds, &res)
		if err != nil {
			return err
		}
		a := audit.Attempt{RunKey: audit.RunKey{Pipeline: h.Pipeline, Dataset: r.Dataset, Partition: r.Partition, RunID: run},
			Attempt: 1, Force: true, Attributes: map[string]string{"by": r.By, "reason": r.Reason}}
		if d, ok := key.LogicalDate(); ok {
			a.LogicalDate = &d
		}
		kind := audit.KindRestored
		rows := audit.Rows{Inserted: res.Restored.Inserted, Deleted: res.Restored.Deleted}
		if action == audit.ActionRetract {
			kind, rows = audit.KindRetracted, audit.Rows{Deleted: res.Deleted}
		} else {
			a.Attributes["to_run"] = res.Restored.Version.RunID
		}
		if res.AuditID, err = audit.RecordOperatorSuccess(ctx, tx, a, kind, rows); err != nil {
			return err
		}
		res.RunID = run
		b := &pgx.Batch{}
		joins, err := h.queueDownstream(b, ds, a, res.AuditID)
		if err != nil {
			return err
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		b = &pgx.Batch{}
		waits := map[string]bool{}
		for _, j := range joins {
			if !*j.ready {
				waits[j.down] = true // a join whose other upstreams are not there yet
				continue
			}
			if err := h.enqueue(b, j.down, j.a, j.id); err != nil {
				return err
			}
		}
		if b.Len() > 0 {
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
		}
		res.Downstream = nil
		for _, d := range ds.Then {
			if !waits[d] {
				res.Downstream = append(res.Downstream, d)
			}
		}
		return nil
	})
	outcome := fmt.Sprintf("%s: run %s", kindWord(action), res.RunID)
	if err != nil {
		outcome = "failed: " + err.Error()
		if errors.Is(err, ErrRefused) {
			outcome = err.Error()
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ferr := audit.FinishAction(fctx, h.DB, actionID, outcome); ferr != nil && err == nil {
		err = ferr
	}
	if err == nil && len(ds.Then) > 0 && h.Enqueued != nil {
		h.Enqueued()
	}
	return res, err
}

func kindWord(action string) string {
	if action == audit.ActionRetract {
		return audit.KindRetracted
	}
	return audit.KindRestored
}
