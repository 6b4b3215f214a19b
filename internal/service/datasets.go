package service

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/lineage"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// Datasets builds the handler's datasets from a validated config.
func Datasets(cfg *config.Config) (map[string]*handlers.Dataset, error) {
	out := make(map[string]*handlers.Dataset, len(cfg.Datasets))
	for name, d := range cfg.Datasets {
		ts, tn := d.TargetTable()
		vs, vn := d.ViewName()
		stg, err := stage(cfg, d)
		if err != nil {
			return nil, fmt.Errorf("dataset %q: source: %w", name, err)
		}
		source := d.Source.SQL
		if stg != nil {
			source = handlers.StageSQL
		}
		spec := strategies.Spec{
			Dataset:         name,
			Target:          strategies.Table{Schema: ts, Name: tn},
			Source:          source,
			PartitionColumn: d.PartitionColumn,
			Key:             d.Key,
			VersionColumn:   d.VersionColumn,
			View:            strategies.Table{Schema: vs, Name: vn},
			RunIDColumn:     d.RunIDColumn,
			LoadSeqColumn:   d.LoadSeqColumn,
			AllowEmpty:      d.AllowEmpty,

			TruncatePartition: d.TruncatePartition,
			OnSchemaChange:    d.SchemaPolicy(),
		}
		st, err := strategies.New(string(d.Strategy), spec)
		if err != nil {
			return nil, fmt.Errorf("dataset %q: %w", name, err)
		}
		out[name] = &handlers.Dataset{Name: name, PartitionType: d.PartitionType, Strategy: st, Timeout: d.Timeout.Std(), Then: d.Then,
			Checks: checks.New(config.Specs(d.Checks), st), Target: ts + "." + tn, Stage: stg, DefinitionHash: d.DefinitionHash()}
		if d.PartitionColumn != "" {
			out[name].Archive = &audit.Archive{Pipeline: cfg.Pipeline, Dataset: name, TargetSchema: ts, TargetTable: tn,
				PartitionColumn: d.PartitionColumn, Keep: d.KeepVersions}
		}
		if d.ReadyWhen != "" {
			upTo := d.WaitUpTo.Std()
			if upTo == 0 {
				upTo = config.DefaultWaitUpTo.Std()
			}
			out[name].Ready = &handlers.ReadyWhen{SQL: d.ReadyWhen, WaitUpTo: upTo}
		}
		if d.Recheck != nil {
			out[name].Fingerprint = &handlers.Fingerprint{SQL: d.FingerprintSQL()}
		}
	}
	for name, ds := range out {
		ds.Upstreams = cfg.Upstreams(name)
	}
	return out, nil
}

// recordDefinitions keeps each dataset's definition under its hash in
// idem.definitions (once per hash), so that what changed since a
// partition's load can be said later. A failure is logged: the loads
// still record their hashes.
func recordDefinitions(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, log zerolog.Logger) {
	for _, name := range cfg.DatasetNames() {
		d := cfg.Datasets[name]
		if err := audit.RecordDefinition(ctx, pool, cfg.Pipeline, name, d.DefinitionHash(), d.Definition()); err != nil {
			log.Warn().Err(err).Str("dataset", name).Msg("definition not recorded: `idem audit outdated` cannot say what changed since its loads")
		}
	}
}

// SamplePartition is a partition key of the dataset's type, used to plan a
// load (at start, on reload, in `idem validate`) without reading the clock.
func SamplePartition(t schemas.PartitionType) string {
	switch t {
	case schemas.PartitionHour:
		return "2000-01-01T00:00:00Z"
	case schemas.PartitionText:
		return "idem-validate"
	}
	return "2000-01-01"
}

// ensureSchema migrates schema idem when it is behind; a role without the
// right to do so gets told to run `idem migrate`.
func ensureSchema(ctx context.Context, pool *pgxpool.Pool, log zerolog.Logger) error {
	all, err := audit.Migrations()
	if err != nil {
		return err
	}
	v, err := audit.Version(ctx, pool)
	if err != nil {
		return err
	}
	if v >= len(all) {
		return nil
	}
	applied, err := audit.Migrate(ctx, pool)
	if err != nil {
		return fmt.Errorf("schema idem is at version %d of %d and could not be upgraded (run 'idem migrate' with a role that may): %w", v, len(all), err)
	}
	for _, a := range applied {
		log.Info().Int("version", a.Version).Str("name", a.Name).Msg("migrated schema idem")
	}
	return nil
}

// checkDatasets prepares views and plans every dataset's load. A broken
// dataset is logged, not fatal: its events will fail with the same reason and
// reach the dead-letter stream, while the other datasets keep loading.
func checkDatasets(ctx context.Context, pool *pgxpool.Pool, h *handlers.Handler, log zerolog.Logger) {
	failed := h.Prepare(ctx)
	names := make([]string, 0, len(h.Datasets))
	for n := range h.Datasets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		err := failed[n]
		if err == nil {
			err = handlers.Check(ctx, pool, h.Datasets[n], SamplePartition(h.Datasets[n].PartitionType))
		}
		switch {
		case err == nil:
		case handlers.IsFatal(handlers.Classify(err)):
			log.Error().Str("dataset", n).Err(err).Msg("dataset is broken: its events will go to the dead-letter stream until it is fixed")
		default:
			// The warehouse did not answer (a restart, a cut connection):
			// not the dataset's fault, and its loads will tell.
			log.Warn().Str("dataset", n).Err(err).Msg("dataset not checked: the warehouse did not answer; its first load checks it")
		}
	}
}

// initMetrics gives the series the alert rules read a 0 for every dataset
// and check of cfg.
func initMetrics(m *metrics.Metrics, cfg *config.Config) {
	m.Datasets(cfg.DatasetNames())
	for _, name := range cfg.DatasetNames() {
		var cs []string
		for _, c := range cfg.Datasets[name].Checks {
			cs = append(cs, c.DisplayName())
		}
		m.DatasetChecks(name, cs)
	}
}

// lineageInputs names, for each dataset of dss without them, the tables its
// source reads (EXPLAIN with a sample partition), as lineage's inputs. A
// source that cannot be planned keeps none; its events still name the
// target.
func lineageInputs(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, dss map[string]*handlers.Dataset, wh lineage.Warehouse, log zerolog.Logger) {
	for name, ds := range dss {
		d := cfg.Datasets[name]
		if d == nil || ds.Inputs != nil || d.Source.Kind() != "sql" {
			continue
		}
		p := strategies.Params{Partition: SamplePartition(ds.PartitionType), RunID: "idem-lineage"}
		tables, err := lineage.SourceTables(ctx, pool, d.Source.SQL, p.NamedArgs())
		if err != nil {
			log.Warn().Err(err).Str("dataset", name).Msg("lineage: the tables the source reads are not known; its events name no inputs")
			continue
		}
		ds.Inputs = wh.Inputs(tables)
	}
}
