package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/backfill"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/schemas"
)

// auditOutdatedCmd lists the partitions loaded under another definition
// than the config's.
func auditOutdatedCmd(e *env) *cobra.Command {
	var from, to string
	var asJSON bool
	c := &cobra.Command{
		Use:   "outdated DATASET [--from D --to D]",
		Short: "Partitions whose latest load ran another definition than the config's (exit 1 if any)",
		Long: `List the partitions of DATASET whose latest successful load ran another
definition (source, strategy, key, checks, on_schema_change) than the
config's, and which fields changed since, from the hash each attempt
records and the definitions kept in idem.definitions. A partition loaded
before idem recorded definitions is listed as "definition unknown".
Without --from and --to, every partition is read.

'idem backfill DATASET --reprocess outdated' reloads them.
Exit code: 0 none outdated, 1 some are, 2 usage, 4 the audit could not be
read.`,
		Example: `  idem audit outdated orders
  idem audit outdated orders --from 2026-01-01 --to 2026-03-31 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := e.configFor(args[0])
			if err != nil {
				return err
			}
			lo, hi, err := keyBounds(cfg.Datasets[args[0]].PartitionType, from, to)
			if err != nil {
				return err
			}
			pool, err := connect(cmd.Context(), cfg.Postgres.URL)
			if err != nil {
				return &ExitError{Code: 4, Err: err}
			}
			defer pool.Close()
			rep, err := backfill.FindOutdated(cmd.Context(), pool, cfg, args[0], lo, hi)
			if err != nil {
				return &ExitError{Code: 4, Err: err}
			}
			if asJSON {
				if err := printJSON(e.out, rep); err != nil {
					return err
				}
			} else {
				tb := &table{headers: []string{"PARTITION", "LOADED_BY", "LOADED_AT", "DEFINITION", "CHANGED", "REASON"}}
				for _, o := range rep.Outdated {
					tb.add(o.Partition, o.RunID, o.LoadedAt.UTC().Format(time.RFC3339), orDash(o.Definition), orDash(strings.Join(o.Changed, ",")), o.Reason)
				}
				if len(tb.rows) > 0 {
					if err := tb.print(e.out, false); err != nil {
						return err
					}
				}
				fmt.Fprintf(e.out, "%d of %d loaded partition(s) of %s outdated (current definition %s)\n", len(rep.Outdated), rep.Loaded, args[0], rep.Definition)
				if len(rep.Outdated) > 0 {
					fmt.Fprintf(e.out, "reload them with: idem backfill %s --reprocess outdated\n", args[0])
				}
			}
			if len(rep.Outdated) > 0 {
				return ErrReported
			}
			return nil
		},
	}
	c.Flags().StringVar(&from, "from", "", "first partition (default: the first loaded)")
	c.Flags().StringVar(&to, "to", "", "last partition, inclusive (default: the last loaded)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// keyBounds turns --from and --to into canonical partition keys for a
// dataset of type typ ("" leaves an end open); a day stands for its first
// hour (from) or its last (to) in an hourly dataset.
func keyBounds(typ schemas.PartitionType, from, to string) (string, string, error) {
	bound := func(s, flag string, last bool) (string, error) {
		if s == "" {
			return "", nil
		}
		if typ == schemas.PartitionHour {
			t, err := hourBound(s, flag, last)
			if err != nil {
				return "", err
			}
			return t.UTC().Format(time.RFC3339), nil
		}
		p, err := schemas.ParsePartition(typ, s)
		if err != nil {
			return "", &UsageError{fmt.Errorf("%s %q: %w", flag, s, err)}
		}
		return p.Key, nil
	}
	lo, err := bound(from, "--from", false)
	if err != nil {
		return "", "", err
	}
	hi, err := bound(to, "--to", true)
	if err != nil {
		return "", "", err
	}
	if lo != "" && hi != "" && hi < lo {
		return "", "", &UsageError{fmt.Errorf("--to %s is before --from %s", to, from)}
	}
	return lo, hi, nil
}

// outdatedLine says, for `idem validate`, how many loaded partitions of
// dataset cfg's definition would leave outdated, and which fields it
// changes: "" when none would be.
func outdatedLine(ctx context.Context, db audit.Querier, cfg *config.Config, dataset string) (string, error) {
	rep, err := backfill.FindOutdated(ctx, db, cfg, dataset, "", "")
	if err != nil || len(rep.Outdated) == 0 {
		return "", err
	}
	var fields []string
	unknown := 0
	for _, o := range rep.Outdated {
		if !o.Known() {
			unknown++
		}
		for _, f := range o.Changed {
			if !slices.Contains(fields, f) {
				fields = append(fields, f)
			}
		}
	}
	slices.Sort(fields)
	why := []string{}
	if len(fields) > 0 {
		why = append(why, backfill.Changes(fields))
	}
	if unknown > 0 {
		why = append(why, fmt.Sprintf("%d loaded before definitions were recorded", unknown))
	}
	if len(why) == 0 {
		why = append(why, "the definition changed")
	}
	return fmt.Sprintf("%s: %d partition(s) loaded under another definition would be outdated (%s): idem backfill %s --reprocess outdated reloads them",
		dataset, len(rep.Outdated), strings.Join(why, "; "), dataset), nil
}
