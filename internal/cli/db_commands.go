package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/service"
)

func migrateCmd(e *env) *cobra.Command {
	var dbURL string
	c := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the idem schema (audit table, ledger, views)",
		Long: `Create or upgrade schema idem in the target database. Safe to run again and
from several processes at once: it applies only the missing migrations.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url := dbURL
			if url == "" {
				var err error
				if url, err = e.databaseURL(); err != nil {
					return err
				}
			}
			pool, err := connect(cmd.Context(), url)
			if err != nil {
				return err
			}
			defer pool.Close()
			applied, err := audit.Migrate(cmd.Context(), pool)
			if err != nil {
				return err
			}
			v, err := audit.Version(cmd.Context(), pool)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintf(e.out, "schema idem is up to date (version %d)\n", v)
				return nil
			}
			for _, m := range applied {
				fmt.Fprintf(e.out, "applied %03d_%s\n", m.Version, m.Name)
			}
			fmt.Fprintf(e.out, "schema idem is at version %d\n", v)
			return nil
		},
	}
	c.Flags().StringVar(&dbURL, "database-url", "", "PostgreSQL URL (default: postgres.url from the config, or IDEM_DATABASE_URL)")
	return c
}

func validateCmd(e *env) *cobra.Command {
	var offline, fleet bool
	c := &cobra.Command{
		Use:   "validate",
		Short: "Check the config, and with a database, that tables and columns fit",
		Long: `Check the config file: every problem is listed with the dataset, the field and
the fix. When postgres.url (or IDEM_DATABASE_URL) is set and --offline is not,
also plan every dataset's load against the database without running it: missing
tables or columns, a source whose columns do not fit the target, a merge key
without a unique index, a schema idem that needs 'idem migrate'.

With --fleet, also read which config versions the live 'idem serve' replicas
run (the fleet bucket in NATS) and print, per version, its replicas and what
the new config changes: datasets added, removed, and the fields changed. A
difference does not change the exit code.

Exit code 0 when everything holds, 1 when anything does not, 2 on usage errors.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.loadConfig()
			if err != nil {
				return err
			}
			var problems []string
			var cp config.Problems
			if err := cfg.Validate(); errors.As(err, &cp) {
				for _, p := range cp {
					problems = append(problems, p.String())
				}
			} else if err != nil {
				return err
			}
			checked, route := false, ""
			if len(problems) == 0 && !offline && cfg.Postgres.URL != "" {
				dbProblems, r, err := e.checkDatabase(cmd, cfg)
				route = r
				if err != nil {
					problems = append(problems, err.Error())
				}
				problems = append(problems, dbProblems...)
				checked = err == nil
			}
			if len(problems) > 0 {
				fmt.Fprintf(e.errOut, "%s: %d problem(s):\n", e.configPath, len(problems))
				for _, p := range problems {
					fmt.Fprintf(e.errOut, "  - %s\n", strings.ReplaceAll(p, "\n", "\n    "))
				}
				return ErrReported
			}
			where := "config only: no database configured (set postgres.url or IDEM_DATABASE_URL to check tables)"
			if offline {
				where = "config only (--offline)"
			}
			if checked {
				where = "config and database"
			}
			fmt.Fprintf(e.out, "%s: ok, %d dataset(s) (%s)\n", e.configPath, len(cfg.Datasets), where)
			if route != "" {
				fmt.Fprintf(e.out, "postgres: %s\n", route)
			}
			if fleet {
				return e.validateFleet(cmd.Context(), cfg)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&offline, "offline", false, "check the config file only, never connect to the database")
	c.Flags().BoolVar(&fleet, "fleet", false, "also print what the config changes against the versions the live replicas run (reads NATS)")
	return c
}

// checkDatabase plans every dataset's load in a rolled-back transaction,
// over the route serve would take; it also says what that route is.
func (e *env) checkDatabase(cmd *cobra.Command, cfg *config.Config) ([]string, string, error) {
	ctx := cmd.Context()
	pool, route, err := service.Connect(ctx, cfg.Postgres.URL, cfg.Postgres.StatementMode)
	if err != nil {
		return nil, "", err
	}
	defer pool.Close()
	problems, err := e.planDatasets(ctx, pool, cfg)
	return problems, route.String(), err
}

func (e *env) planDatasets(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config) ([]string, error) {
	var problems []string
	v, err := audit.Version(ctx, pool)
	if err != nil {
		return nil, err
	}
	all, _ := audit.Migrations()
	if v < len(all) {
		problems = append(problems, fmt.Sprintf("database: schema idem is at version %d of %d: run 'idem migrate'", v, len(all)))
	}
	dss, err := datasets(cfg)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(dss))
	for n := range dss {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ds := dss[n]
		if v < len(all) {
			break // plans call idem's helper functions
		}
		if err := handlers.Check(ctx, pool, ds, samplePartition(ds.PartitionType)); err != nil {
			problems = append(problems, fmt.Sprintf("dataset %q: %v", n, err))
		}
	}
	return problems, nil
}
