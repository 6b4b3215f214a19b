package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// backfillCmd: being built (issue 4).
func backfillCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "backfill DATASET --from D --to D",
		Short: "Publish one event per partition of a range, planned from the audit ledger",
		RunE:  func(*cobra.Command, []string) error { return errors.New("not built yet") },
	}
}
