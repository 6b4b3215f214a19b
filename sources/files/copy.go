package files

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgconn"
)

// Copier runs one COPY ... FROM STDIN with r as its data: the load
// transaction's connection, tx.Conn().PgConn().
type Copier interface {
	CopyFrom(ctx context.Context, r io.Reader, sql string) (pgconn.CommandTag, error)
}

var _ Copier = (*pgconn.PgConn)(nil)

// Copy loads every file of l into t, one COPY per file, on conn (the load
// transaction's connection), and returns the rows written. Each file's
// Rows is set as it completes, and its SHA256 for local files. The first
// error stops it: the caller rolls the transaction back.
func Copy(ctx context.Context, conn Copier, store Store, spec Spec, l *Listing, t Target) (int64, error) {
	var total int64
	for i := range l.Files {
		n, err := CopyFile(ctx, conn, store, spec, &l.Files[i], t)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// CopyFile loads one file into t on conn and returns the rows written
// (also set in f.Rows). The file's columns are checked against t before
// COPY starts. An error from the file's side (a *ChangedError, a
// *SchemaError met in a later NDJSON object, a *FormatError) is returned
// as itself, not as the "COPY from stdin failed" PostgreSQL answers it
// with; PostgreSQL's own errors (a value its type refuses, a NOT NULL) are
// returned wrapped, their *pgconn.PgError reachable with errors.As.
func CopyFile(ctx context.Context, conn Copier, store Store, spec Spec, f *File, t Target) (int64, error) {
	s, err := OpenStream(ctx, store, spec, f, t)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if s.Empty() {
		f.Rows = 0
		return 0, nil
	}
	tag, err := conn.CopyFrom(ctx, s, s.SQL())
	if serr := s.Err(); serr != nil {
		return 0, serr
	}
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", f.URL, err)
	}
	f.Rows = tag.RowsAffected()
	return f.Rows, nil
}

// Stream is one file as COPY input: SQL is the statement, Read gives its
// data. Reading it to io.EOF has read the file to its end and passed the
// store's change checks; any other error is kept for Err.
type Stream struct {
	sql   string
	r     io.Reader
	close func() error
	err   error
	empty bool
}

// OpenStream opens f and checks its columns against t before any row:
// the CSV header, the first NDJSON object's keys, the Parquet footer. A
// mismatch is a *SchemaError listing every difference.
//
// CSV streams through untouched (COPY ... FORMAT csv) after its header,
// unless t.Fill adds columns, which are appended to each record. NDJSON
// and Parquet are re-encoded, row by row, into COPY's text format. Memory
// stays bounded whatever the file's size: a CSV or NDJSON reads through a
// 256 KiB buffer, a Parquet file one page per column at a time through
// ranged reads.
func OpenStream(ctx context.Context, store Store, spec Spec, f *File, t Target) (*Stream, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	switch spec.Format {
	case CSV, NDJSON:
		body, err := store.Open(ctx, f)
		if err != nil {
			return nil, err
		}
		var s *Stream
		if spec.Format == CSV {
			s, err = openCSV(f, body, t)
		} else {
			s, err = openNDJSON(f, body, t)
		}
		if err != nil {
			body.Close()
			return nil, err
		}
		return s, nil
	case Parquet:
		ra, err := store.OpenAt(ctx, f)
		if err != nil {
			return nil, err
		}
		s, err := openParquet(f, ra, spec.Allow, t)
		if err != nil {
			ra.Close()
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("format: %q is not a format; want csv, ndjson or parquet", spec.Format)
}

// SQL is the COPY statement the data is for: the target's identifiers
// quoted, the file's column order.
func (s *Stream) SQL() string { return s.sql }

// Empty says the file holds no row and not even a header: there is
// nothing to COPY.
func (s *Stream) Empty() bool { return s.empty }

// Read gives COPY data.
func (s *Stream) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = err
	}
	return n, err
}

// Err is the error Read met, other than io.EOF.
func (s *Stream) Err() error { return s.err }

// Close releases the file.
func (s *Stream) Close() error {
	if s.close == nil {
		return nil
	}
	c := s.close
	s.close = nil
	return c()
}
