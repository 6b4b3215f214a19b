package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/config"
)

// dateRange parses --from and --to (inclusive, YYYY-MM-DD).
func dateRange(from, to string) (time.Time, time.Time, error) {
	f, err := time.Parse(time.DateOnly, from)
	if err != nil {
		return f, f, &UsageError{fmt.Errorf("--from %q: want YYYY-MM-DD", from)}
	}
	t, err := time.Parse(time.DateOnly, to)
	if err != nil {
		return f, t, &UsageError{fmt.Errorf("--to %q: want YYYY-MM-DD", to)}
	}
	if t.Before(f) {
		return f, t, &UsageError{fmt.Errorf("--to %s is before --from %s", to, from)}
	}
	if t.Sub(f) > 100*366*24*time.Hour {
		return f, t, &UsageError{fmt.Errorf("--from %s --to %s spans more than 100 years", from, to)}
	}
	return f, t, nil
}

// configFor is the validated config of a command on dataset, which it
// must name.
func (e *env) configFor(dataset string) (*config.Config, error) {
	cfg, err := e.validConfig()
	if err != nil {
		return nil, err
	}
	if _, ok := cfg.Datasets[dataset]; !ok {
		return nil, &UsageError{fmt.Errorf("dataset %q is not in %v", dataset, cfg.DatasetNames())}
	}
	return cfg, nil
}

// datasetDB is configFor and a pool on the warehouse.
func (e *env) datasetDB(ctx context.Context, dataset string) (*config.Config, *pgxpool.Pool, error) {
	cfg, err := e.configFor(dataset)
	if err != nil {
		return nil, nil, err
	}
	pool, err := connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return nil, nil, err
	}
	return cfg, pool, nil
}

// auditQuery checks what every audit subcommand takes and connects.
func (e *env) auditQuery(cmd *cobra.Command, dataset, from, to string) (*config.Config, time.Time, time.Time, *pgxpool.Pool, error) {
	var zero time.Time
	cfg, err := e.configFor(dataset)
	if err != nil {
		return nil, zero, zero, nil, err
	}
	f, t, err := dateRange(from, to)
	if err != nil {
		return nil, zero, zero, nil, err
	}
	pool, err := connect(cmd.Context(), cfg.Postgres.URL)
	if err != nil {
		return nil, zero, zero, nil, err
	}
	return cfg, f, t, pool, nil
}

func auditCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "audit",
		Short: "Partition status, missing partitions, a partition's story and schema changes, from the audit table",
	}
	var from, to string
	var asJSON bool
	flags := func(c *cobra.Command) {
		c.Flags().StringVar(&from, "from", "", "first partition, YYYY-MM-DD (required)")
		c.Flags().StringVar(&to, "to", "", "last partition, YYYY-MM-DD, inclusive (required)")
		c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
		_ = c.MarkFlagRequired("from")
		_ = c.MarkFlagRequired("to")
	}
	var at string
	status := &cobra.Command{
		Use:   "status DATASET --from D --to D",
		Short: "One line per partition: status, run_id, rows, attempts, finished_at, error",
		Long: `One line per day from --from to --to: the latest attempt's status (success,
failed, started: running or died, or missing: never attempted), its run_id,
rows written, how many attempts there were, when it finished, which upstream
run triggered it (then:) and its error. A success under another definition than
the config's is outdated ('idem audit outdated').
Exit code 1 when any partition in the range is not success or outdated.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, f, t, pool, err := e.auditQuery(cmd, args[0], from, to)
			if err != nil {
				return err
			}
			defer pool.Close()
			st, err := audit.StatusRange(cmd.Context(), pool, cfg.Pipeline, args[0], f, t)
			if err != nil {
				return err
			}
			if ups := cfg.Upstreams(args[0]); len(ups) > 1 {
				if err := markWaiting(cmd.Context(), pool, cfg.Pipeline, ups, f, t, st); err != nil {
					return err
				}
			}
			notOK, cur := 0, cfg.Datasets[args[0]].DefinitionHash()
			for i, s := range st {
				if s.Status != audit.StatusSuccess && s.Status != audit.StateRetracted {
					notOK++
				} else if audit.Outdated(s.Definition, cur) {
					st[i].Status, st[i].Outdated = audit.StateOutdated, true // loaded: not counted
				}
			}
			if asJSON {
				if err := printJSON(e.out, st); err != nil {
					return err
				}
			} else {
				tb := &table{headers: []string{"PARTITION", "STATUS", "RUN_ID", "ROWS", "ATTEMPTS", "FINISHED_AT", "TRIGGERED_BY", "ERROR"}}
				for _, s := range st {
					rows, fin := "-", "-"
					if s.RowCount != nil {
						rows = fmt.Sprint(*s.RowCount)
					}
					if s.FinishedAt != nil {
						fin = s.FinishedAt.UTC().Format(time.RFC3339)
					}
					errOrWait := s.Error
					switch {
					case s.Outdated:
						errOrWait = "loaded under another definition: idem audit outdated " + args[0]
					case len(s.WaitingFor) > 0 && s.Status == audit.StatusSuccess:
						errOrWait = "holds its last load; join waiting for " + strings.Join(s.WaitingFor, ", ")
					case len(s.WaitingFor) > 0:
						errOrWait = "join waiting for " + strings.Join(s.WaitingFor, ", ")
					}
					tb.add(s.Partition, s.Status, orDash(s.RunID), rows, fmt.Sprint(s.Attempts), fin, orDash(s.TriggeredBy), truncateCell(errOrWait, 80))
				}
				if err := tb.print(e.out, isTerminal(e.out)); err != nil {
					return err
				}
				fmt.Fprintf(e.out, "%d partition(s), %d not loaded\n", len(st), notOK)
			}
			if notOK > 0 {
				return ErrReported
			}
			return nil
		},
	}
	flags(status)
	missing := &cobra.Command{
		Use:   "missing DATASET [--from D --to D]",
		Short: "Partitions with no successful load (exit 1 if any)",
		Long: `List the days from --from to --to with no successful load of DATASET, from the
audit table (the same answer as SELECT * FROM idem.missing_partitions(...)).

A dataset with a calendar (expect:) needs no dates: every expected partition
since the calendar's first one whose period has ended without a successful
load is listed, as missing (within its deadline) or late (past it). --from
and --to narrow it; --at evaluates the deadlines at another time.
Exit code 1 when any is missing or late, 0 when none is.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg, err := e.validConfig(); err == nil {
				if ds, ok := cfg.Datasets[args[0]]; ok && ds.Expect != nil {
					return e.calendarMissing(cmd, cfg, args[0], from, to, at, asJSON)
				}
			}
			if from == "" || to == "" {
				return &UsageError{fmt.Errorf("--from and --to are required: dataset %q has no calendar (expect:)", args[0])}
			}
			cfg, f, t, pool, err := e.auditQuery(cmd, args[0], from, to)
			if err != nil {
				return err
			}
			defer pool.Close()
			days, err := audit.Missing(cmd.Context(), pool, cfg.Pipeline, args[0], f, t)
			if err != nil {
				return err
			}
			list := make([]string, len(days))
			for i, d := range days {
				list[i] = d.Format(time.DateOnly)
			}
			if asJSON {
				if err := printJSON(e.out, map[string]any{"dataset": args[0], "from": from, "to": to, "missing": list}); err != nil {
					return err
				}
			} else {
				for _, d := range list {
					fmt.Fprintln(e.out, d)
				}
				fmt.Fprintf(e.out, "%d of %d partition(s) missing for %s from %s to %s\n", len(list), int(t.Sub(f).Hours()/24)+1, args[0], from, to)
			}
			if len(list) > 0 {
				return ErrReported
			}
			return nil
		},
	}
	missing.Flags().StringVar(&from, "from", "", "first partition, YYYY-MM-DD (default: the calendar's first)")
	missing.Flags().StringVar(&to, "to", "", "last partition, inclusive (default: the last ended)")
	missing.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	missing.Flags().StringVar(&at, "at", "", "evaluate deadlines at this RFC 3339 time instead of now (calendar datasets)")
	c.AddCommand(status, missing, auditWhyCmd(e), auditSchemaCmd(e), auditOutdatedCmd(e))
	return c
}

func truncateCell(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return orDash(s)
	}
	return string(r[:n-1]) + "…"
}

// markWaiting says, for each partition of a join, which upstreams it
// waits for (audit.WaitingFor). A join that loaded keeps its last load
// while an upstream's newer attempt failed or was refused: it waits too,
// for a fresh one.
func markWaiting(ctx context.Context, db audit.Querier, pipeline string, upstreams []string, from, to time.Time, st []audit.PartitionStatus) error {
	states, err := audit.UpstreamStates(ctx, db, pipeline, upstreams, from, to)
	if err != nil {
		return err
	}
	for i := range st {
		for _, w := range audit.WaitingFor(upstreams, func(up string) string { return states[st[i].Partition][up] }) {
			st[i].WaitingFor = append(st[i].WaitingFor, w.String())
		}
	}
	return nil
}

// calendarGap is one line of `idem audit missing` for a calendar dataset.
type calendarGap struct {
	Partition string    `json:"partition"`
	State     string    `json:"state"` // missing or late
	Due       time.Time `json:"due"`
}

// calendarMissing lists a calendar dataset's expected partitions without a
// successful load.
func (e *env) calendarMissing(cmd *cobra.Command, cfg *config.Config, dataset, from, to, at string, asJSON bool) error {
	cal, ok := cfg.Datasets[dataset].Calendar()
	if !ok {
		return fmt.Errorf("dataset %q: its calendar is not valid (run 'idem validate')", dataset)
	}
	now := time.Now()
	if at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return &UsageError{fmt.Errorf("--at %q: want an RFC 3339 time, e.g. 2026-11-05T03:05:00Z", at)}
		}
		now = t
	}
	ended := cal.Ended(now, from, to)
	var gaps []calendar.Gap
	if len(ended) > 0 {
		pool, err := connect(cmd.Context(), cfg.Postgres.URL)
		if err != nil {
			return err
		}
		defer pool.Close()
		loaded, err := audit.LoadedPartitions(cmd.Context(), pool, cfg.Pipeline, dataset, ended[0].Key, ended[len(ended)-1].Key)
		if err != nil {
			return err
		}
		gaps = cal.Gaps(now, from, to, func(k string) bool { return loaded[k] })
	}
	out := make([]calendarGap, len(gaps))
	late := 0
	for i, g := range gaps {
		out[i] = calendarGap{Partition: g.Key, State: "missing", Due: g.Due.UTC()}
		if g.Late {
			out[i].State = "late"
			late++
		}
	}
	if asJSON {
		if err := printJSON(e.out, map[string]any{"dataset": dataset, "at": now.UTC(), "expected": len(ended), "missing": out}); err != nil {
			return err
		}
	} else {
		tb := &table{headers: []string{"PARTITION", "STATE", "DUE"}}
		for _, g := range out {
			tb.add(g.Partition, g.State, g.Due.Format(time.RFC3339))
		}
		if len(out) > 0 {
			if err := tb.print(e.out, isTerminal(e.out)); err != nil {
				return err
			}
		}
		fmt.Fprintf(e.out, "%d of %d expected partition(s) of %s not loaded: %d late, %d within the deadline\n",
			len(out), len(ended), dataset, late, len(out)-late)
	}
	if len(out) > 0 {
		return ErrReported
	}
	return nil
}
