package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// dlqCmd: being built (issue 4).
func dlqCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "dlq",
		Short: "Inspect, replay and purge dead letters",
		RunE:  func(*cobra.Command, []string) error { return errors.New("not built yet") },
	}
}
