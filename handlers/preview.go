package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// Preview is what a load would do: its row counts, its checks' outcomes,
// and up to previewRows rows that would appear and disappear.
type Preview struct {
	Rows      strategies.Result `json:"rows"`
	Checks    []checks.Outcome  `json:"checks"`
	Appear    json.RawMessage   `json:"appear"`
	Disappear json.RawMessage   `json:"disappear"`
	// SchemaChanges are the differences the load met between the source's
	// columns and the target's, and what on_schema_change did (in the
	// rolled-back transaction); set too when the policy refused them.
	SchemaChanges []strategies.SchemaChange `json:"schema_changes,omitempty"`
	// Files are the files a files dataset's load would read, with the
	// rows each gave, and Fingerprint their listing's.
	Files       []audit.SourceFile `json:"files,omitempty"`
	Fingerprint string             `json:"fingerprint,omitempty"`
}

const previewRows = 10

// Preview runs the load of ev and its checks in a transaction that is
// always rolled back (`idem load --dry-run`): nothing is written, no audit
// row, no ledger entry, no downstream event. It waits for a load of the
// partition that is running, and holds the partition while it runs.
func (h *Handler) Preview(ctx context.Context, ev schemas.Event) (Preview, error) {
	var pv Preview
	ds, ok := h.dataset(ev.Dataset)
	if !ok {
		return pv, Fatal(ReasonUnknownDataset, fmt.Errorf("dataset %q is not configured", ev.Dataset))
	}
	if err := h.PrepareDataset(ctx, ds); err != nil {
		return pv, Classify(err)
	}
	p := strategies.Params{Partition: ev.Key.Key, RunID: ev.RunID}
	// A source outside the warehouse is asked as a load would ask it: one
	// not ready says why (a *WaitError), and nothing is read.
	var st *staging
	if ds.Stage != nil {
		now := time.Now()
		var err error
		if st, err = ds.Stage.ready(ctx, ev.Key, now, now); err != nil {
			return pv, err
		}
		if err := ds.Stage.newColumns(ctx, h.DB, ds.Target, st); err != nil {
			return pv, err
		}
	}
	tx, err := h.DB.Begin(ctx)
	if err != nil {
		return pv, Classify(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, audit.LockSQL, audit.PartitionLockKey(h.Pipeline, ds.Name, p.Partition)); err != nil {
		return pv, Classify(err)
	}
	if st != nil {
		// The stage, filled as the load fills it: every row of every file
		// read, each file with the identity it was listed with.
		st.def = st.stageDef()
		if _, err := tx.Exec(ctx, st.def.create); err != nil {
			return pv, Classify(err)
		}
		if _, err := st.copyInto(ctx, tx, ev.Key, ev.RunID, pgx.Identifier{"pg_temp", StageTable}, ""); err != nil {
			return pv, Classify(err)
		}
		pv.Fingerprint, pv.Files = st.sourceFiles()
	}
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE idem_preview_before ON COMMIT DROP AS SELECT t.* "+ds.Strategy.ProducedRows(), p.NamedArgs()); err != nil {
		return pv, Classify(err)
	}
	var baseline int64
	if ds.Checks.NeedsBaseline() {
		if baseline, err = ds.Checks.Baseline(ctx, tx, p); err != nil {
			return pv, Classify(err)
		}
	}
	if pv.Rows, pv.SchemaChanges, err = strategies.LoadChanges(ctx, tx, ds.Strategy, p); err != nil {
		return pv, Classify(err)
	}
	// A column the load added is in the rows after, not in those saved
	// before: the saved ones get it too, NULL, as the target's rows did.
	for _, c := range pv.SchemaChanges {
		if c.Action == strategies.ActionAdded {
			if _, err := tx.Exec(ctx, "ALTER TABLE idem_preview_before ADD COLUMN "+pgx.Identifier{c.Column}.Sanitize()+" "+c.NewType); err != nil {
				return pv, Classify(err)
			}
		}
	}
	if ds.Checks != nil {
		if pv.Checks, err = ds.Checks.Run(ctx, tx, p, baseline); err != nil {
			return pv, err
		}
	}
	diff := func(a, b string) (json.RawMessage, error) {
		var out json.RawMessage
		err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(json_agg(row_to_json(x)), '[]') FROM (%s EXCEPT ALL %s LIMIT %d) x`, a, b, previewRows),
			p.NamedArgs()).Scan(&out)
		return out, err
	}
	after, before := "SELECT t.* "+ds.Strategy.ProducedRows(), "SELECT * FROM idem_preview_before"
	if pv.Appear, err = diff("("+after+")", "("+before+")"); err != nil {
		return pv, Classify(err)
	}
	if pv.Disappear, err = diff("("+before+")", "("+after+")"); err != nil {
		return pv, Classify(err)
	}
	return pv, nil
}

// CheckAsIs runs the dataset's checks on the partition's rows as they are
// in the target, in a read-only transaction (`idem check`). A
// row_count_change has no load to compare with and is skipped. For
// append_dedupe the rows checked are run runID's.
func (h *Handler) CheckAsIs(ctx context.Context, dataset, partition, runID string) ([]checks.Outcome, error) {
	ds, ok := h.dataset(dataset)
	if !ok {
		return nil, Fatal(ReasonUnknownDataset, fmt.Errorf("dataset %q is not configured", dataset))
	}
	if ds.Checks == nil {
		return nil, nil
	}
	var outs []checks.Outcome
	err := pgx.BeginFunc(ctx, h.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err != nil {
			return err
		}
		var err error
		outs, err = ds.Checks.Run(ctx, tx, strategies.Params{Partition: partition, RunID: runID}, 0)
		return err
	})
	return outs, err
}
