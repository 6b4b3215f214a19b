package cli

import (
	"errors"
	"fmt"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-data/idem/audit"
)

// operator is who an operator control is recorded as: --by, else $USER,
// else the OS user's name.
func (e *env) operator(by string) string {
	if by != "" {
		return by
	}
	if u := e.getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

func pauseCmd(e *env) *cobra.Command {
	var until, reason, by string
	c := &cobra.Command{
		Use:   "pause DATASET --reason TEXT [--until T]",
		Short: "Hold a dataset's events, fleet-wide, until resumed or until T",
		Long: `Pause DATASET: every replica holds its events (no attempt, no retry spent,
nothing dead-lettered) within about a second, until 'idem resume' or --until
passes. Other datasets go on loading. The pause is recorded in
idem.dataset_pauses and idem.operator_actions with --by and --reason.

--until takes RFC 3339 or a duration from now: 30m, 2h, 1d. Pausing a paused
dataset replaces its pause.`,
		Example: `  idem pause orders --reason "upstream is re-exporting November" --until 2h
  idem resume orders --reason "export fixed"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return &UsageError{errors.New("--reason is required: say why, for whoever finds the dataset paused")}
			}
			if until != "" {
				if _, err := audit.ParseUntil(until, time.Now()); err != nil {
					return &UsageError{fmt.Errorf("--until: %w", err)}
				}
			}
			cfg, pool, err := e.datasetDB(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer pool.Close()
			var u *time.Time
			if until != "" {
				// A duration counts from the database's clock, which ends
				// the pause, not from this host's.
				now, err := audit.DatabaseNow(cmd.Context(), pool)
				if err != nil {
					return err
				}
				t, err := audit.ParseUntil(until, now)
				if err != nil {
					return &UsageError{fmt.Errorf("--until: %w", err)}
				}
				u = &t
			}
			p, err := audit.PauseDataset(cmd.Context(), pool, cfg.Pipeline, args[0], e.operator(by), reason, u, "")
			if err != nil {
				return err
			}
			fmt.Fprintf(e.out, "%s %s; resume with: idem resume %s\n", args[0], p, args[0])
			return nil
		},
	}
	c.Flags().StringVar(&until, "until", "", "end the pause by itself at this time (RFC 3339) or after this long (30m, 2h, 1d)")
	c.Flags().StringVar(&reason, "reason", "", "why (required)")
	c.Flags().StringVar(&by, "by", "", "who pauses (default $USER)")
	return c
}

func resumeCmd(e *env) *cobra.Command {
	var reason, by string
	c := &cobra.Command{
		Use:   "resume DATASET [--reason TEXT]",
		Short: "End a dataset's pause: its held events load at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, pool, err := e.datasetDB(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer pool.Close()
			p, err := audit.ResumeDataset(cmd.Context(), pool, cfg.Pipeline, args[0], e.operator(by), reason, "")
			if errors.Is(err, audit.ErrNotPaused) {
				fmt.Fprintf(e.errOut, "idem: %s is not paused\n", args[0])
				return ErrReported
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.out, "%s resumed by %s (was paused by %s since %s: %s)\n", args[0], p.ResumeBy, p.By,
				p.Since.UTC().Format(time.RFC3339), p.Reason)
			return nil
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why")
	c.Flags().StringVar(&by, "by", "", "who resumes (default $USER)")
	return c
}

func backfillCancelCmd(e *env) *cobra.Command {
	var from, to, reason, by string
	c := &cobra.Command{
		Use:   "cancel RUN_ID | DATASET --from D --to D",
		Short: "Cancel a backfill: its events not yet loaded are recorded cancelled, not loaded",
		Long: `Cancel a backfill by its run id (its downstream events too), or every event of
DATASET's partitions --from..--to published before now. A replica meeting
such an event records a 'cancelled' attempt naming --by and --reason and
acknowledges it without loading; a load already running finishes. A later
load of the partition supersedes 'cancelled'. 'idem backfill --wait' reports
the cancellation and exits 1.`,
		Example: `  idem backfill cancel backfill__20261206T101500.000Z --reason "wrong range"
  idem backfill cancel orders --from 2026-01-01 --to 2026-03-31 --reason "source being rebuilt"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return &UsageError{errors.New("--reason is required: say why, for whoever reads the partitions' story")}
			}
			if (from == "") != (to == "") {
				return &UsageError{errors.New("give both --from and --to with a DATASET, or neither with a RUN_ID")}
			}
			c := audit.Cancellation{RunID: args[0], By: e.operator(by), Reason: reason}
			var err error
			cfg, err := e.validConfig()
			if err != nil {
				return err
			}
			if from != "" {
				cfg, err = e.configFor(args[0])
				if err != nil {
					return err
				}
				keys, _, err := backfillPartitions(cfg.Datasets[args[0]].PartitionType, "", from, to)
				if err != nil {
					return err
				}
				c = audit.Cancellation{Dataset: args[0], From: keys[0], To: keys[len(keys)-1], By: c.By, Reason: reason}
			}
			pool, err := connect(cmd.Context(), cfg.Postgres.URL)
			if err != nil {
				return err
			}
			defer pool.Close()
			c, err = audit.Cancel(cmd.Context(), pool, cfg.Pipeline, c, "")
			if err != nil {
				return err
			}
			what := "run " + c.RunID
			if c.RunID == "" {
				what = fmt.Sprintf("%s from %s to %s", c.Dataset, c.From, c.To)
			}
			fmt.Fprintf(e.out, "backfill %s %s; events not yet loaded are recorded cancelled\n", what, c)
			return nil
		},
	}
	c.Flags().StringVar(&from, "from", "", "first partition of DATASET's range")
	c.Flags().StringVar(&to, "to", "", "last partition, inclusive")
	c.Flags().StringVar(&reason, "reason", "", "why (required)")
	c.Flags().StringVar(&by, "by", "", "who cancels (default $USER)")
	return c
}
