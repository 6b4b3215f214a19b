package files

import (
	"errors"
	"fmt"
	"strings"
)

// Reason words: the first word of each error's text, and the FatalReason of
// the fatal ones, so a dead letter can be selected by reason without parsing
// the rest. handlers names its own reasons; these are the file source's.
const (
	ReasonSchemaMismatch = "schema_mismatch" // a file's columns or types do not fit the target
	ReasonMissingFiles   = "missing_files"   // nothing to load and no ready rule to wait on
	ReasonFileChanged    = "file_changed"    // a file was replaced or rewritten after it was listed
	ReasonManifest       = "manifest"        // the manifest names files that are absent or of another size
	ReasonNotReady       = "not_ready"       // the ready rule is not met yet
	ReasonBadFile        = "bad_file"        // a file cannot be parsed in its format
)

// ErrNotFound is what a Store's Stat and Get wrap when no object has the
// key; test it with errors.Is.
var ErrNotFound = errors.New("not found")

// SchemaError is a file whose columns, keys or types do not fit the target
// columns, found before its first row is sent. It lists every difference,
// so one attempt tells the whole story. Retrying cannot help: it is fatal.
type SchemaError struct {
	URL      string   // the file
	Problems []string // one line per difference, e.g. `unknown column "x"`
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("%s: %s: %s", ReasonSchemaMismatch, e.URL, strings.Join(e.Problems, "; "))
}

// Fatal reports true: the same file fails the same way on every attempt.
func (e *SchemaError) Fatal() bool { return true }

// FatalReason is schema_mismatch, the word handlers uses for the same fate.
func (e *SchemaError) FatalReason() string { return ReasonSchemaMismatch }

// MissingFilesError is a partition prefix that holds no file to load while
// the source has no ready rule: the event said the partition is ready, and
// there is nothing there. It is fatal, as an empty SQL source is: retrying
// the same event does not make files appear. A source whose files may land
// after the event should have a ready rule (Marker, Manifest or QuietFor).
type MissingFilesError struct {
	URL     string // the partition prefix
	Pattern string // the glob files had to match, "" for any
}

func (e *MissingFilesError) Error() string {
	if e.Pattern != "" {
		return fmt.Sprintf("%s: no file matching %q at %s, and the source has no ready rule to wait on", ReasonMissingFiles, e.Pattern, e.URL)
	}
	return fmt.Sprintf("%s: no file at %s, and the source has no ready rule to wait on", ReasonMissingFiles, e.URL)
}

// Fatal reports true.
func (e *MissingFilesError) Fatal() bool { return true }

// FatalReason is missing_files.
func (e *MissingFilesError) FatalReason() string { return ReasonMissingFiles }

// ChangedError is a file that differs from what its listing said when it is
// read: S3 answered 412 to the If-Match of the listed ETag, or a local
// file's size or modification time moved. The file was replaced mid-load;
// the load must roll back and start again from a new listing, so it is
// transient.
type ChangedError struct {
	URL    string
	Listed string // the identity the listing gave, e.g. `etag "abc"`
	Found  string // what the read found, e.g. "precondition failed (412)"
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("%s: %s was replaced after it was listed (listed %s, found %s); retry with a new listing", ReasonFileChanged, e.URL, e.Listed, e.Found)
}

// Fatal reports false: a new attempt lists the new file.
func (e *ChangedError) Fatal() bool { return false }

// ManifestError is a manifest that does not match the objects it names: a
// mandatory entry is absent, a size differs from meta.content_length, or an
// entry is outside the source's bucket or root. A manifest is written after
// its files, so this is a broken promise rather than a wait; it is still
// transient, because a writer that rewrites a partition rewrites its
// manifest too, and a retry bounded by the retry budget reads the new one.
type ManifestError struct {
	URL      string   // the manifest
	Problems []string // e.g. "manifest names 3 files, 1 missing: s3://b/k"
}

func (e *ManifestError) Error() string {
	return fmt.Sprintf("%s: %s: %s", ReasonManifest, e.URL, strings.Join(e.Problems, "; "))
}

// Fatal reports false.
func (e *ManifestError) Fatal() bool { return false }

// NotReadyError is a partition whose ready rule is not met yet (see
// Readiness.Err): transient, worth a retry after a delay.
type NotReadyError struct {
	URL    string // the partition prefix
	Reason string // e.g. "marker _SUCCESS not found"
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("%s: %s: %s", ReasonNotReady, e.URL, e.Reason)
}

// Fatal reports false.
func (e *NotReadyError) Fatal() bool { return false }

// FormatError is a file that cannot be parsed in its format: a CSV record
// with an unterminated quote, a line of NDJSON that is not an object, a
// Parquet file with a damaged footer. It is fatal: the same bytes fail the
// same way. (A file that changed while it was read is a ChangedError.)
type FormatError struct {
	URL string
	Err error
}

func (e *FormatError) Error() string { return fmt.Sprintf("%s: %s: %v", ReasonBadFile, e.URL, e.Err) }
func (e *FormatError) Unwrap() error { return e.Err }

// Fatal reports true.
func (e *FormatError) Fatal() bool { return true }

// FatalReason is bad_file.
func (e *FormatError) FatalReason() string { return ReasonBadFile }
