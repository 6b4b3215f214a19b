package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/schemas"
)

// checkCmd is `idem check DATASET PARTITION`: the dataset's checks on the
// target's rows as they are, read-only.
func checkCmd(e *env) *cobra.Command {
	var asJSON bool
	var runID string
	c := &cobra.Command{
		Use:   "check DATASET PARTITION",
		Short: "Run a dataset's checks on a partition of the target as it is (read-only)",
		Long: `Run the dataset's checks (checks: in the config) on the partition's rows as
they are in the target, in a read-only transaction: nothing is written.
row_count_change is skipped (there is no load to compare with). For
append_dedupe, the rows checked are those of --run-id.

Exit code: 0 every check of severity error passes; 1 one fails; 2 usage.`,
		Example: `  idem check orders 2026-11-05
  idem check orders 2026-11-05 --json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, h, closeDB, err := e.handler(cmd, args[0])
			if err != nil {
				return err
			}
			defer closeDB()
			ev, err := checkEvent(cfg, h, args[0], args[1], orDefault(runID, "idem-check"))
			if err != nil {
				return err
			}
			outs, err := h.CheckAsIs(cmd.Context(), ev.Dataset, ev.Key.Key, ev.RunID)
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(e.out, struct {
					Checks []checks.Outcome `json:"checks"`
				}{outs}); err != nil {
					return err
				}
			} else if err := printOutcomes(e.out, outs); err != nil {
				return err
			}
			if checks.Refused(outs) != nil {
				return ErrReported
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().StringVar(&runID, "run-id", "", "append_dedupe: the run whose rows are checked")
	return c
}

// loadCmd is `idem load DATASET PARTITION --dry-run`.
func loadCmd(e *env) *cobra.Command {
	var asJSON, dryRun bool
	var runID string
	c := &cobra.Command{
		Use:   "load DATASET PARTITION --dry-run",
		Short: "Run a partition's load and its checks in a transaction that is always rolled back",
		Long: `Run the load of a partition as idem serve would (the source, the strategy, the
checks) in a transaction that is always rolled back, and print what it would
do: rows deleted, inserted and updated, each check's outcome, and up to 10
rows that would appear and disappear. Nothing is written: no audit row, no
ledger entry, no downstream event. Use it to verify a fix to staging before
replaying a dead letter. Loading for real is idem publish's (or a replay's).

For a dataset whose source is files or another PostgreSQL, the source is
asked as a load asks it: the files are listed, checked against the ready
rule and read into the stage, and the files it would read are listed.

Exit code: 0 the load would commit; 1 it would fail (a check of severity
error, or an error); 2 usage; 3 the source is not ready (serve would wait).`,
		Example: `  idem load orders 2026-11-05 --dry-run
  idem load orders 2026-11-05 --dry-run --json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !dryRun {
				return &UsageError{errors.New("idem load only previews: add --dry-run (to load, publish the event: idem publish, or idem dlq replay)")}
			}
			cfg, h, closeDB, err := e.handler(cmd, args[0])
			if err != nil {
				return err
			}
			defer closeDB()
			ev, err := checkEvent(cfg, h, args[0], args[1], orDefault(runID, "idem-dry-run"))
			if err != nil {
				return err
			}
			pv, err := h.Preview(cmd.Context(), ev)
			var wait *handlers.WaitError
			if errors.As(err, &wait) {
				// Not a failure: serve would hold the event, spending nothing.
				return &ExitError{Code: 3, Err: fmt.Errorf("%s %s is not ready to load: %s; idem serve would wait for it (no attempt spent) up to the dataset's wait_up_to",
					ev.Dataset, ev.Key.Key, wait.Reason)}
			}
			if !asJSON {
				if len(pv.Files) > 0 {
					fmt.Fprintf(e.out, "would read %d file(s), listing %s:\n", len(pv.Files), short(pv.Fingerprint))
					for _, f := range pv.Files {
						fmt.Fprintf(e.out, "  %s  %d bytes  %s  %d rows\n", f.URL, f.Size, fileIdentity(f), f.Rows)
					}
				}
				target := cfg.Datasets[ev.Dataset].Target
				for _, c := range pv.SchemaChanges {
					fmt.Fprintln(e.out, predictionLine(target, c))
				}
			}
			if err != nil {
				return err
			}
			refused := checks.Refused(pv.Checks)
			if asJSON {
				if err := printJSON(e.out, struct {
					handlers.Preview
					WouldCommit bool `json:"would_commit"`
				}{pv, refused == nil}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(e.out, "dry run of %s %s (rolled back): %d deleted, %d inserted, %d updated (%s)\n",
					ev.Dataset, ev.Key.Key, pv.Rows.Deleted, pv.Rows.Inserted, pv.Rows.Updated, pv.Rows.Route)
				if len(pv.Checks) > 0 {
					if err := printOutcomes(e.out, pv.Checks); err != nil {
						return err
					}
				}
				fmt.Fprintf(e.out, "would appear: %s\nwould disappear: %s\n", pv.Appear, pv.Disappear)
				if refused != nil {
					fmt.Fprintf(e.out, "the checks would refuse this load: %v\n", refused)
				} else {
					fmt.Fprintln(e.out, "the load would commit")
				}
			}
			if refused != nil {
				return ErrReported
			}
			return nil
		},
	}
	c.Flags().BoolVar(&dryRun, "dry-run", false, "required: run the load and roll it back")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().StringVar(&runID, "run-id", "", "the run_id the load would have")
	return c
}

// handler connects and builds the handler of a validated config for a
// command on dataset; closeDB releases the pool.
func (e *env) handler(cmd *cobra.Command, dataset string) (*config.Config, *handlers.Handler, func(), error) {
	cfg, err := e.configFor(dataset)
	if err != nil {
		return nil, nil, nil, err
	}
	dss, err := datasets(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	pool, err := connect(cmd.Context(), cfg.Postgres.URL)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, &handlers.Handler{DB: pool, Pipeline: cfg.Pipeline, Datasets: dss}, pool.Close, nil
}

// checkEvent validates the partition as the consumer would.
func checkEvent(cfg *config.Config, h *handlers.Handler, dataset, partition, runID string) (schemas.Event, error) {
	m, err := schemas.NewMessage(cfg.NATS.SubjectPrefix, schemas.PartitionReady{Dataset: dataset, Partition: partition, RunID: runID}, cfg.Lookup, time.Now())
	if err != nil {
		return schemas.Event{}, &UsageError{err}
	}
	ev, err := schemas.Decode(m.Subject, m.Body, h.Lookup)
	if err != nil {
		return schemas.Event{}, &UsageError{err}
	}
	return ev, nil
}

func printOutcomes(w io.Writer, outs []checks.Outcome) error {
	if len(outs) == 0 {
		_, err := fmt.Fprintln(w, "no checks configured")
		return err
	}
	tb := &table{headers: []string{"CHECK", "SEVERITY", "RESULT", "FAILING", "CHECKED", "THRESHOLD", "NOTE", "SAMPLES"}}
	for _, o := range outs {
		tb.add(o.Name, o.Severity, o.Status, fmt.Sprint(o.Failing), fmt.Sprint(o.Checked), o.Threshold, orDash(o.Note), truncateCell(orDash(string(o.Samples)), 120))
	}
	return tb.print(w, isTerminal(w))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
