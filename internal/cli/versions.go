package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idem-data/idem/handlers"
)

// restoreCmd and retractCmd: an operator's undo of a bad load and
// intentional emptying of a partition. The domain work is
// handlers.Restore and handlers.Retract, which the status page calls too.

func restoreCmd(e *env) *cobra.Command {
	var r handlers.OperatorRequest
	c := &cobra.Command{
		Use:   "restore DATASET PARTITION --reason TEXT [--to-run RUN] [--by NAME]",
		Short: "Put an archived version of a partition back (undo a bad load)",
		Long: `Swap the rows a dataset with keep_versions archived back into a partition, in
one transaction under the partition's lock: the rows it holds now are
archived first (so a restore can be undone), then the archived rows of
--to-run (default: the newest archived version) replace them. It is
recorded as an operator action and as the partition's latest success (run
restore__<run>__<n>), and triggers the dataset's then: like a load.

Refused, nothing changed, when the partition has no archived version (of
that run) or the target's columns changed since the rows were archived.`,
		Example: `  idem restore orders 2026-11-05 --reason "bad upstream export"
  idem restore orders 2026-11-05 --to-run nightly-2026-11-05 --reason "…" --by alice`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.operate(cmd, args, r, true)
		},
	}
	c.Flags().StringVar(&r.ToRun, "to-run", "", "the run whose archived rows to put back (default: the newest version)")
	operatorFlags(c, &r)
	return c
}

func retractCmd(e *env) *cobra.Command {
	var r handlers.OperatorRequest
	c := &cobra.Command{
		Use:   "retract DATASET PARTITION --reason TEXT [--by NAME]",
		Short: "Delete a partition's rows on purpose and keep it empty",
		Long: `Delete a partition's rows in one transaction under its lock (archived first
when the dataset keeps versions) and record the retraction: the calendar
counts the partition as intentionally empty, the dataset's then: runs so
downstream recomputes without it, and a later event of another run is
skipped ("retracted by …") unless it is published with --force.`,
		Example: `  idem retract orders 2026-11-05 --reason "test data published by mistake"`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.operate(cmd, args, r, false)
		},
	}
	operatorFlags(c, &r)
	return c
}

func operatorFlags(c *cobra.Command, r *handlers.OperatorRequest) {
	c.Flags().StringVar(&r.Reason, "reason", "", "why (recorded with the action; required)")
	c.Flags().StringVar(&r.By, "by", "", "who asks (default: $USER)")
}

func (e *env) operate(cmd *cobra.Command, args []string, r handlers.OperatorRequest, restore bool) error {
	r.Dataset, r.Partition = args[0], args[1]
	if r.Reason == "" {
		return &UsageError{errors.New("--reason is required: say why, it is recorded with the action")}
	}
	if r.By == "" {
		r.By = orDefault(e.getenv("USER"), "cli")
	}
	_, h, closeDB, err := e.handler(cmd, r.Dataset)
	if err != nil {
		return err
	}
	defer closeDB()
	do, verb := h.Retract, "retracted"
	if restore {
		do, verb = h.Restore, "restored"
	}
	res, err := do(cmd.Context(), r)
	if err != nil {
		return err
	}
	renderOperated(e, verb, r, res)
	return nil
}

func renderOperated(e *env, verb string, r handlers.OperatorRequest, res handlers.OperatorResult) {
	if v := res.Restored.Version; v.ID != 0 {
		fmt.Fprintf(e.out, "%s %s %s to the rows of run %s (archived %s): %d rows deleted, %d inserted; now run %s\n",
			verb, r.Dataset, r.Partition, v.RunID, v.ArchivedAt.UTC().Format("2006-01-02T15:04:05Z"),
			res.Restored.Deleted, res.Restored.Inserted, res.RunID)
	} else {
		fmt.Fprintf(e.out, "%s %s %s: %d rows deleted; now run %s\n", verb, r.Dataset, r.Partition, res.Deleted, res.RunID)
	}
	for _, d := range res.Downstream {
		fmt.Fprintf(e.out, "queued downstream %s %s\n", d, r.Partition)
	}
}
