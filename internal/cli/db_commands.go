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
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
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
	var partition string
	c := &cobra.Command{
		Use:   "validate",
		Short: "Check the config, and with a database, that tables and columns fit",
		Long: `Check the config file: every problem is listed with the dataset, the field and
the fix. When postgres.url (or IDEM_DATABASE_URL) is set and --offline is not,
also plan every dataset's load against the database without running it: missing
tables or columns, a source whose columns do not fit the target, a merge key
without a unique index, a schema idem that needs 'idem migrate'.

It also prints, per dataset, each difference between the source's columns and
the target's that a load would meet now, and what the dataset's
on_schema_change would do with it (nothing is altered), and how many loaded
partitions this config's definition would leave outdated (information). One the policy takes
(a column added, widened, left out or kept) is information and does not
change the exit code; one it refuses is a problem, naming the ALTER TABLE that
would fix it.

For a dataset whose source is files, it lists a partition's files as a load
would (the newest partition attempted, or --partition), says whether the
partition is complete by its ready rule, and opens each file as a load
would, reading only its header (CSV), first rows (NDJSON) or footer
(Parquet): a file that does not fit the target is a problem.

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
				db, err := e.checkDatabase(cmd, cfg, partition)
				route = db.route
				if err != nil {
					problems = append(problems, err.Error())
				}
				problems = append(problems, db.problems...)
				for _, c := range db.changes {
					fmt.Fprintln(e.out, c)
				}
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
	c.Flags().StringVar(&partition, "partition", "", "files datasets: inspect this partition's files (default: the newest partition attempted)")
	c.Flags().BoolVar(&fleet, "fleet", false, "also print what the config changes against the versions the live replicas run (reads NATS)")
	return c
}

// dbCheck is what planning every dataset's load found: problems (exit 1),
// the schema changes the datasets' policies would take (information, one
// line each) and the route to PostgreSQL.
type dbCheck struct {
	problems, changes []string
	route             string
}

// checkDatabase plans every dataset's load in a rolled-back transaction,
// over the route serve would take; it also says what that route is.
func (e *env) checkDatabase(cmd *cobra.Command, cfg *config.Config, partition string) (dbCheck, error) {
	ctx := cmd.Context()
	pool, route, err := service.Connect(ctx, cfg.Postgres.URL, cfg.Postgres.StatementMode)
	if err != nil {
		return dbCheck{}, err
	}
	defer pool.Close()
	db, err := e.planDatasets(ctx, pool, cfg, partition)
	db.route = route.String()
	return db, err
}

func (e *env) planDatasets(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, partition string) (dbCheck, error) {
	var db dbCheck
	v, err := audit.Version(ctx, pool)
	if err != nil {
		return db, err
	}
	all, _ := audit.Migrations()
	if v < len(all) {
		db.problems = append(db.problems, fmt.Sprintf("database: schema idem is at version %d of %d: run 'idem migrate'", v, len(all)))
	}
	dss, err := datasets(cfg)
	if err != nil {
		return db, err
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
		changes, err := handlers.Predict(ctx, pool, ds, samplePartition(ds.PartitionType))
		refused := false
		for _, c := range changes {
			line := fmt.Sprintf("dataset %q: %s", n, predictionLine(ds.Target, c))
			if c.Action == strategies.ActionRefused {
				db.problems, refused = append(db.problems, line), true
			} else {
				db.changes = append(db.changes, line)
			}
		}
		var sc *strategies.SchemaChangeError
		if err != nil && !(refused && errors.As(err, &sc)) {
			db.problems = append(db.problems, fmt.Sprintf("dataset %q: %v", n, err))
			continue
		}
		if ds.Stage != nil && ds.Stage.Files != nil {
			if err := inspectFiles(ctx, pool, cfg, ds, partition, &db); err != nil {
				db.problems = append(db.problems, fmt.Sprintf("dataset %q: %v", n, err))
			}
		}
		if line, err := outdatedLine(ctx, pool, cfg, n); err != nil {
			db.problems = append(db.problems, fmt.Sprintf("dataset %q: %v", n, err))
		} else if line != "" {
			db.changes = append(db.changes, line)
		}
	}
	return db, nil
}

// inspectFiles says what a load of a files dataset's partition would meet
// now (handlers.Dataset.Inspect): the partition given, or the newest one
// attempted; none attempted and none given, it says so.
func inspectFiles(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, ds *handlers.Dataset, partition string, db *dbCheck) error {
	if partition == "" {
		recent, err := audit.RecentPartitions(ctx, pool, cfg.Pipeline, []string{ds.Name}, 1, 100)
		if err != nil {
			return err
		}
		if len(recent) == 0 {
			db.changes = append(db.changes, fmt.Sprintf("dataset %q: files not inspected: no partition attempted yet (pass --partition P)", ds.Name))
			return nil
		}
		partition = recent[0]
	}
	key, err := schemas.ParsePartition(ds.PartitionType, partition)
	if err != nil {
		return &UsageError{fmt.Errorf("--partition: %w", err)}
	}
	in, err := ds.Inspect(ctx, key)
	if err != nil {
		return fmt.Errorf("files of %s: %w", key.Key, err)
	}
	if in.Waiting != "" {
		db.changes = append(db.changes, fmt.Sprintf("dataset %q: files of %s: not complete: %s (a load would wait)", ds.Name, key.Key, in.Waiting))
		return nil
	}
	var size int64
	for _, f := range in.Files {
		size += f.Size
	}
	db.changes = append(db.changes, fmt.Sprintf("dataset %q: files of %s: %d file(s), %d bytes, complete", ds.Name, key.Key, len(in.Files), size))
	for _, c := range in.NewColumns {
		db.changes = append(db.changes, fmt.Sprintf("dataset %q: files of %s: column %s %s is not in %s: on_schema_change decides at the load", ds.Name, key.Key, c.Name, c.Type, ds.Target))
	}
	for _, p := range in.Problems {
		db.problems = append(db.problems, fmt.Sprintf("dataset %q: files of %s: %v", ds.Name, key.Key, p))
	}
	return nil
}

// predictionLine says what difference a load of target would meet and
// what its on_schema_change would do with it; a refusal names the fix.
func predictionLine(target string, c strategies.SchemaChange) string {
	var what string
	switch c.Change {
	case strategies.ChangeNew:
		what = fmt.Sprintf("source column %s %s is not in %s", c.Column, c.NewType, target)
	case strategies.ChangeRetyped:
		what = fmt.Sprintf("column %s is %s in the source, %s in %s", c.Column, c.NewType, c.OldType, target)
	case strategies.ChangeMissing:
		what = fmt.Sprintf("column %s %s of %s is not returned by the source", c.Column, c.OldType, target)
	default:
		what = fmt.Sprintf("column %s: %s", c.Column, c.Change)
	}
	policy := "on_schema_change " + c.Policy
	switch c.Action {
	case strategies.ActionAdded:
		return fmt.Sprintf("%s: %s would add it (%s)", what, policy, c.DDL)
	case strategies.ActionWidened:
		return fmt.Sprintf("%s: %s would widen it (%s)", what, policy, c.DDL)
	case strategies.ActionIgnored:
		if c.Change == strategies.ChangeNew {
			return fmt.Sprintf("%s: %s would ignore it (the load leaves it out)", what, policy)
		}
		return fmt.Sprintf("%s: %s would ignore it (the load casts it)", what, policy)
	case strategies.ActionKept:
		return fmt.Sprintf("%s: %s would keep it (NULL in new rows)", what, policy)
	case strategies.ActionRefused:
		line := fmt.Sprintf("%s: %s would refuse it and fail the load (schema_mismatch)", what, policy)
		switch {
		case c.DDL != "" && c.Change == strategies.ChangeNew && c.Policy == strategies.OnSchemaChangeFail:
			return line + "; fix it with " + c.DDL + ", or set on_schema_change: append_new_columns on the dataset"
		case c.DDL != "":
			return line + "; fix it with " + c.DDL
		case c.Reason != "":
			return line + ": " + c.Reason
		}
		return line
	}
	return fmt.Sprintf("%s: %s: %s", what, policy, c.Action)
}
