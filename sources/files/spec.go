package files

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// Format is how a source's files are encoded.
type Format string

const (
	// CSV is RFC 4180 text with a header line naming the columns, UTF-8.
	// An unquoted empty field is NULL; a quoted one ("") is the empty string.
	CSV Format = "csv"
	// NDJSON is one JSON object per line, keys naming the columns. A key
	// that is absent or null is NULL.
	NDJSON Format = "ndjson"
	// Parquet is Apache Parquet with a flat schema (no nested or repeated
	// columns).
	Parquet Format = "parquet"
)

// MinFilesDefault is Ready.MinFiles when QuietFor is set and MinFiles is
// not: a quiet prefix with no file at all is not a partition.
const MinFilesDefault = 1

// Spec is one file source: where a partition's files are, how they are
// encoded, when they are complete, and which type conversions the schema
// check may let through. It is plain data, built from configuration.
type Spec struct {
	// URL is the template of a partition's prefix, ending in "/":
	// s3://BUCKET/orders/dt={partition}/ or file:///abs/orders/{partition:%Y/%m/%d}/.
	// See the package documentation for the placeholders.
	URL string
	// Format of every file under the prefix.
	Format Format
	// Pattern selects files by their name relative to the prefix, with
	// path.Match ("*.csv", "part-*"). A pattern with a "/" reaches that
	// many levels deeper ("*/part-*.csv"); without one, files in deeper
	// "directories" are never listed. Empty matches every file. Names that
	// start with "_" or "." (markers, checksums, temporaries) never match.
	Pattern string
	// Ready says when a partition's files are complete. Zero means the
	// event alone says so.
	Ready ReadyRule
	// Allow lets the Parquet schema check through conversions it refuses
	// by default.
	Allow Allow
}

// ReadyRule is a source's completeness rule: at most one of Marker, Manifest
// and QuietFor.
type ReadyRule struct {
	// Marker is an object name at the partition prefix, e.g. "_SUCCESS",
	// whose presence means the partition is complete.
	Marker string
	// Manifest is an object name at the partition prefix, e.g.
	// "manifest.json", holding a Redshift-style manifest; the partition is
	// exactly the files it names, verified against their sizes.
	Manifest string
	// QuietFor makes a partition complete once no file under its prefix
	// has changed for that long and at least MinFiles files are there.
	QuietFor time.Duration
	// MinFiles is the fewest files QuietFor accepts; MinFilesDefault when
	// QuietFor is set and MinFiles is zero.
	MinFiles int
}

// Allow lists the Parquet conversions the schema check refuses unless a
// source says it knows better.
type Allow struct {
	// Uint64AsBigint loads unsigned 64-bit integers into integer columns
	// (smallint, integer, bigint). A value above the column's maximum still
	// fails the load, in PostgreSQL; nothing wraps around.
	Uint64AsBigint bool
	// NaiveTimestampsIn is the IANA time zone (e.g. "UTC",
	// "Europe/Paris") that timestamps written without isAdjustedToUTC, and
	// INT96 timestamps, are wall-clock times of. Set, such columns load
	// into timestamptz as the instants they are in that zone; empty, the
	// check refuses them there, since PostgreSQL would otherwise read them
	// in whatever TimeZone the session has.
	NaiveTimestampsIn string
}

// WithDefaults returns s with the documented defaults filled in.
func (s Spec) WithDefaults() Spec {
	if s.Ready.QuietFor > 0 && s.Ready.MinFiles == 0 {
		s.Ready.MinFiles = MinFilesDefault
	}
	return s
}

// Validate checks s on its own, naming the field and the fix. It does not
// touch the store.
func (s Spec) Validate() error {
	var errs []error
	if _, err := parseURL(s.URL); err != nil {
		errs = append(errs, fmt.Errorf("url: %w", err))
	}
	switch s.Format {
	case CSV, NDJSON, Parquet:
	case "":
		errs = append(errs, errors.New("format: missing; want csv, ndjson or parquet"))
	default:
		errs = append(errs, fmt.Errorf("format: %q is not a format; want csv, ndjson or parquet", s.Format))
	}
	if s.Pattern != "" {
		if _, err := path.Match(s.Pattern, ""); err != nil {
			errs = append(errs, fmt.Errorf("pattern: %q is not a path.Match glob: %v", s.Pattern, err))
		}
		if strings.HasPrefix(s.Pattern, "/") || strings.HasSuffix(s.Pattern, "/") || strings.Contains(s.Pattern, "//") {
			errs = append(errs, fmt.Errorf("pattern: %q must be relative to the prefix, without a leading, trailing or doubled /", s.Pattern))
		}
	}
	errs = append(errs, s.Ready.validate()...)
	if z := s.Allow.NaiveTimestampsIn; z != "" {
		if _, err := time.LoadLocation(z); err != nil || z == "Local" {
			errs = append(errs, fmt.Errorf("allow.naive_timestamps_in: %q is not an IANA time zone; want e.g. UTC or Europe/Paris", z))
		}
	}
	return errors.Join(errs...)
}

func (r ReadyRule) validate() []error {
	var errs []error
	rules := 0
	for _, set := range []bool{r.Marker != "", r.Manifest != "", r.QuietFor != 0} {
		if set {
			rules++
		}
	}
	if rules > 1 {
		errs = append(errs, errors.New("ready: set one of marker, manifest and quiet_for, not several"))
	}
	for _, f := range []struct{ field, name string }{{"ready.marker", r.Marker}, {"ready.manifest", r.Manifest}} {
		field, name := f.field, f.name
		if name != "" && (strings.Contains(name, "/") || name == "." || name == ".." || strings.ContainsAny(name, "{}")) {
			errs = append(errs, fmt.Errorf("%s: %q must be a plain object name at the partition prefix, e.g. _SUCCESS", field, name))
		}
	}
	if r.QuietFor < 0 {
		errs = append(errs, fmt.Errorf("ready.quiet_for: %s is negative; want how long nothing may change, e.g. 10m", r.QuietFor))
	}
	if r.MinFiles < 0 {
		errs = append(errs, fmt.Errorf("ready.min_files: %d is negative", r.MinFiles))
	}
	if r.MinFiles > 0 && r.QuietFor == 0 {
		errs = append(errs, errors.New("ready.min_files: only counts with quiet_for; set quiet_for too, or drop min_files"))
	}
	return errs
}
