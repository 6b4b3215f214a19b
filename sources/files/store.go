package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Store is where a source's files are: an S3 bucket (NewS3) or a local
// directory (NewLocal). Keys are relative to the store, "/"-separated.
//
// Every read is checked against the identity its File had when it was
// listed: a file replaced in between gives a *ChangedError, never a mix of
// two versions.
type Store interface {
	// List returns the files and sub-prefixes directly under prefix (which
	// ends in "/"), never deeper: one level, with a delimiter.
	List(ctx context.Context, prefix string) (Dir, error)
	// Stat returns the file at key; an error wrapping ErrNotFound when
	// there is none.
	Stat(ctx context.Context, key string) (File, error)
	// Get returns the whole content of a small file (a marker, a manifest)
	// and its identity; ErrNotFound when there is none, an error when it
	// is larger than limit bytes.
	Get(ctx context.Context, key string, limit int64) ([]byte, File, error)
	// Open streams f's content. The read fails with *ChangedError when the
	// object no longer is the one f describes. Once the content has been
	// read to its end, f.SHA256 is set if the store hashes (local files).
	Open(ctx context.Context, f *File) (io.ReadCloser, error)
	// OpenAt gives random access to f's content (what Parquet needs), with
	// the same checks as Open. Close it when done.
	OpenAt(ctx context.Context, f *File) (ReaderAt, error)
	// URL names key for people and errors: s3://bucket/key, file:///path.
	URL(key string) string
}

// ReaderAt is random access to one file's content.
type ReaderAt interface {
	io.ReaderAt
	io.Closer
}

// Dir is one level of a listing.
type Dir struct {
	Files    []File
	Prefixes []string // sub-prefixes, each ending in "/"
}

// File is one file's identity as a listing saw it, and what reading it
// found.
type File struct {
	Key     string    // relative to the store
	URL     string    // s3://bucket/key or file:///abs/path
	Size    int64     // bytes
	ModTime time.Time // last modified, as the store says
	// ETag is the S3 entity tag as listed, quotes included; reads send it
	// back in If-Match. Empty for local files.
	ETag string
	// VersionID is the S3 object version a read was served, when the
	// bucket is versioned.
	VersionID string
	// SHA256 is the hex SHA-256 of a local file's content, set once a read
	// has gone through the whole file.
	SHA256 string
	// Rows is how many rows the load read from the file, set by Copy.
	Rows int64
}

// identity is what a ChangedError says the listing gave.
func (f *File) identity() string {
	if f.ETag != "" {
		return "etag " + f.ETag
	}
	return fmt.Sprintf("size %d, modified %s", f.Size, f.ModTime.UTC().Format(time.RFC3339Nano))
}

// Listing is the set of files one load reads, in key order, and a
// fingerprint of it.
type Listing struct {
	// Prefix is the partition prefix the files were listed under.
	Prefix string
	Files  []File
	// Fingerprint is the hex SHA-256 of every file's key, size and ETag
	// (local files: modification time in nanoseconds instead), in key
	// order: equal fingerprints mean the same files, as far as the store
	// can tell without reading them. Compare it with the last committed
	// load's to see whether a partition changed.
	Fingerprint string
}

// NewListing sorts files by key and fingerprints them.
func NewListing(prefix string, files []File) Listing {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Key, b.Key) })
	h := sha256.New()
	for _, f := range files {
		id := f.ETag
		if id == "" {
			id = "mtime:" + strconv.FormatInt(f.ModTime.UnixNano(), 10)
		}
		fmt.Fprintf(h, "%q %d %q %q\n", f.Key, f.Size, id, f.VersionID)
	}
	return Listing{Prefix: prefix, Files: files, Fingerprint: hex.EncodeToString(h.Sum(nil))}
}

// Bytes is the total size of the listing's files.
func (l Listing) Bytes() int64 {
	var n int64
	for _, f := range l.Files {
		n += f.Size
	}
	return n
}
