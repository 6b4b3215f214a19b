package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Source is where a dataset's rows come from. Written as a string it is
// the SELECT run inside the warehouse, as it always was:
//
//	source: SELECT … FROM staging.orders WHERE event_date = @partition
//
// Written as a mapping it names files in object storage or on disk, or a
// query on another PostgreSQL:
//
//	source:
//	  files: {url: "s3://landing/orders/dt={partition}/", format: csv, ready: {marker: _SUCCESS}}
//
//	source:
//	  postgres: {url_file: /run/secrets/app_db, sql: "SELECT … WHERE event_date = @partition"}
type Source struct {
	// SQL is the SELECT that produces the partition's rows, with the pgx
	// named arguments @partition and @run_id. It never reads the clock.
	SQL string `yaml:"sql,omitempty"`
	// Files are the partition's files (files:).
	Files *FilesSource `yaml:"files,omitempty"`
	// Postgres is a query on another PostgreSQL (postgres:).
	Postgres *PostgresSource `yaml:"postgres,omitempty"`
}

// FilesSource: a partition is the files under one prefix.
type FilesSource struct {
	// URL is the partition's prefix: s3://bucket/path/dt={partition}/ or
	// file:///path/dt={partition}/. {partition} is the partition key; a
	// date partition may also be spelled with strftime parts:
	// {partition:%Y/%m/%d}.
	URL string `yaml:"url"`
	// Format is csv (with a header row), ndjson or parquet.
	Format string `yaml:"format"`
	// Pattern keeps the files whose name matches this glob (part-*.csv);
	// default every file but the ready marker and manifest.
	Pattern string `yaml:"pattern,omitempty"`
	// Ready says when a partition is complete: one of marker, manifest or
	// quiet_for. Without it a partition is complete when its event comes.
	Ready *FilesReady `yaml:"ready,omitempty"`
	// Allow lets a Parquet column of a type the target would read wrongly
	// load anyway: uint64_as_bigint (values above 2^63-1 fail the load),
	// naive_timestamp_as_utc (a timestamp without isAdjustedToUTC into
	// timestamptz, read as UTC).
	Allow []string `yaml:"allow,omitempty"`
}

// FilesReady: when a partition's files are complete.
type FilesReady struct {
	// Marker is a file whose presence at the prefix says the partition is
	// complete (_SUCCESS).
	Marker string `yaml:"marker,omitempty"`
	// Manifest is a Redshift-style manifest at the prefix (manifest.json):
	// its entries' url and meta.content_length are checked against the
	// objects; a mandatory entry missing is an error.
	Manifest string `yaml:"manifest,omitempty"`
	// QuietFor: complete once no file has changed for that long, with at
	// least MinFiles files (default 1).
	QuietFor Duration `yaml:"quiet_for,omitempty"`
	MinFiles int      `yaml:"min_files,omitempty"`
}

// PostgresSource: the partition's rows are a query's on another
// PostgreSQL, often a read replica of the application's database.
type PostgresSource struct {
	// URL is the source server's connection string; url_file reads it from
	// a file. It is a secret: never logged, never in the audit.
	URL     string `yaml:"url,omitempty" json:"-"`
	URLFile string `yaml:"url_file,omitempty"`
	// SQL is a SELECT binding @partition (and @run_id); it never reads the
	// clock. It runs in one REPEATABLE READ READ ONLY transaction.
	SQL string `yaml:"sql"`
	// MaxReplicaLag, on a standby, holds the load (a wait, not an attempt)
	// while the standby's last replayed commit is older than this. 0: no
	// gate.
	MaxReplicaLag Duration `yaml:"max_replica_lag,omitempty"`
	// RecoveryConflictRetries bounds the retries of a read a standby's
	// recovery cancelled; past it the load fails with a hint naming
	// hot_standby_feedback. Default DefaultRecoveryConflictRetries.
	RecoveryConflictRetries *int `yaml:"recovery_conflict_retries,omitempty"`
}

// S3 reaches an S3-compatible object store. Credentials come from the
// standard AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY environment, never
// from this file.
type S3 struct {
	// Endpoint is the store's URL (http://127.0.0.1:7070); default AWS's.
	Endpoint string `yaml:"endpoint,omitempty"`
	// Region; default DefaultS3Region.
	Region string `yaml:"region,omitempty"`
	// PathStyle addresses buckets as endpoint/bucket rather than
	// bucket.endpoint: most stores other than AWS need it.
	PathStyle bool `yaml:"path_style,omitempty"`
}

// Defaults of the sources.
const (
	DefaultS3Region                = "us-east-1"
	DefaultRecoveryConflictRetries = 3
	DefaultWaitUpTo                = Duration(6 * time.Hour)
	// MaxWaitUpTo keeps a waiting event's redeliveries, one a minute at
	// the slowest, under JetStream's MaxDeliver backstop.
	MaxWaitUpTo = Duration(12 * time.Hour)
)

// Kind names where the rows come from: sql, files or postgres.
func (s Source) Kind() string {
	switch {
	case s.Files != nil:
		return "files"
	case s.Postgres != nil:
		return "postgres"
	}
	return "sql"
}

// UnmarshalYAML reads a string as SQL, a mapping as files: or postgres:.
func (s *Source) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = Source{SQL: n.Value}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: source is a SELECT, or a mapping with files: or postgres:", n.Line)
	}
	type plain Source
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*s = Source(p)
	return nil
}

// MarshalYAML writes SQL alone as a string, as it is read.
func (s Source) MarshalYAML() (any, error) {
	if s.Files == nil && s.Postgres == nil {
		return s.SQL, nil
	}
	type plain Source
	return plain(s), nil
}
