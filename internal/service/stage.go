package service

import (
	"fmt"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/sources/files"
	"github.com/idem-data/idem/sources/pgsource"
	"github.com/idem-data/idem/strategies"
)

// stage builds the staged source of a dataset whose rows come from files
// or another PostgreSQL; nil for a SELECT in the warehouse.
func stage(cfg *config.Config, d *config.Dataset) (*handlers.Staged, error) {
	src := d.Source
	if src.Files == nil && src.Postgres == nil {
		return nil, nil
	}
	s := &handlers.Staged{WaitUpTo: d.WaitUpTo.Std(), PartitionColumn: d.PartitionColumn}
	if s.WaitUpTo == 0 {
		s.WaitUpTo = config.DefaultWaitUpTo.Std()
	}
	if d.Strategy == config.AppendDedupe {
		s.Reserved = []string{d.RunIDColumn, d.LoadSeqColumn}
	}
	s.Evolve = d.SchemaPolicy() != strategies.OnSchemaChangeFail
	if f := src.Files; f != nil {
		spec := files.Spec{URL: f.URL, Format: files.Format(f.Format), Pattern: f.Pattern}
		if r := f.Ready; r != nil {
			spec.Ready = files.ReadyRule{Marker: r.Marker, Manifest: r.Manifest, QuietFor: r.QuietFor.Std(), MinFiles: r.MinFiles}
		}
		for _, a := range f.Allow {
			switch a {
			case "uint64_as_bigint":
				spec.Allow.Uint64AsBigint = true
			case "naive_timestamp_as_utc":
				spec.Allow.NaiveTimestampsIn = "UTC"
			}
		}
		spec = spec.WithDefaults()
		if err := spec.Validate(); err != nil {
			return nil, err
		}
		store, err := files.NewStore(spec, files.S3Options{Endpoint: cfg.S3.Endpoint, Region: cfg.S3.Region, PathStyle: cfg.S3.PathStyle})
		if err != nil {
			return nil, fmt.Errorf("files: %w", err)
		}
		s.Files = &handlers.FileSource{Spec: spec, Store: store}
		return s, nil
	}
	p := src.Postgres
	spec := pgsource.Spec{URL: p.URL, SQL: p.SQL, MaxReplicaLag: p.MaxReplicaLag.Std()}
	switch {
	case p.RecoveryConflictRetries == nil:
	case *p.RecoveryConflictRetries == 0:
		spec.RecoveryConflictRetries = pgsource.NoRecoveryConflictRetries
	default:
		spec.RecoveryConflictRetries = *p.RecoveryConflictRetries
	}
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	s.Postgres = &spec
	return s, nil
}
