package handlers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
	"github.com/idem-data/idem/sources/pgsource"
	"github.com/idem-data/idem/strategies"
)

// Fingerprint is a dataset's recheck: each attempt takes a fingerprint of
// its partition's source before it loads, and its success stores it, so
// that a later recheck can tell whether the source changed since.
type Fingerprint struct {
	// SQL is the fingerprint query, one SELECT returning one row, bound
	// with @partition: run in the warehouse for a SELECT source, on the
	// source server for a postgres: one. "" for a files: source, whose
	// fingerprint is its listing's.
	SQL string
}

// fingerprintTimeout bounds one fingerprint query.
const fingerprintTimeout = time.Minute

// Fingerprint takes the fingerprint of a partition's source as a load of
// dataset would store it, asking the source as a load does first: the
// listing of its files (an error while they are not complete), or the
// row of its fingerprint query. ok is false
// for a dataset without recheck.
func (h *Handler) Fingerprint(ctx context.Context, dataset string, key schemas.Partition, now time.Time) (fp audit.SourceFingerprint, ok bool, err error) {
	ds, found := h.dataset(dataset)
	if !found || ds.Fingerprint == nil {
		return fp, false, nil
	}
	var st *staging
	if s := ds.Stage; s != nil {
		// Asked as before an attempt: the files' ready rule, the
		// standby's lag; not ready is an error (no wait is recorded).
		if st, err = s.ready(ctx, key, now, now); err != nil {
			return fp, true, err
		}
	}
	fp, err = h.fingerprint(ctx, ds, key, st)
	return fp, true, err
}

// fingerprint takes the fingerprint a load of ds stores, before its
// attempt: its files' listing (st's), or its query's row.
func (h *Handler) fingerprint(ctx context.Context, ds *Dataset, key schemas.Partition, st *staging) (audit.SourceFingerprint, error) {
	f := ds.Fingerprint
	if st != nil && st.listing != nil {
		return listingFingerprint(st.listing), nil
	}
	qctx, cancel := context.WithTimeout(ctx, fingerprintTimeout)
	defer cancel()
	if s := ds.Stage; s != nil && s.Postgres != nil {
		row, err := pgsource.Fingerprint(qctx, *s.Postgres, f.SQL, pgsource.Params{Partition: key.Key})
		if err != nil {
			return audit.SourceFingerprint{}, err
		}
		return fromRow(row), nil
	}
	c, err := h.DB.Acquire(qctx)
	if err != nil {
		return audit.SourceFingerprint{}, Classify(fmt.Errorf("fingerprint: %w", err))
	}
	defer c.Release()
	// The text format: a value hashes as the server writes it, whatever
	// Go type it would scan into.
	sql, args, err := strategies.Params{Partition: key.Key}.NamedArgs().RewriteQuery(qctx, c.Conn(), f.SQL, nil)
	if err != nil {
		return audit.SourceFingerprint{}, Fatal(ReasonInvalidSQL, fmt.Errorf("fingerprint: %w", err))
	}
	params := make([][]byte, len(args))
	for i, a := range args {
		if s, ok := a.(string); ok {
			params[i] = []byte(s)
		}
	}
	rr := c.Conn().PgConn().ExecParams(qctx, sql, params, nil, nil, nil)
	rows := 0
	var row pgsource.Row
	for rr.NextRow() {
		rows++
		if rows == 1 {
			row = pgsource.NewRow(rr.FieldDescriptions(), rr.Values())
		}
	}
	if _, err := rr.Close(); err != nil {
		return audit.SourceFingerprint{}, Classify(fmt.Errorf("fingerprint: %w", err))
	}
	if rows != 1 {
		return audit.SourceFingerprint{}, Fatal(ReasonInvalidSQL, fmt.Errorf("the fingerprint query returned %d rows; it must return exactly one (an aggregate such as SELECT count(*), max(updated_at) ...)", rows))
	}
	return fromRow(row), nil
}

func fromRow(r pgsource.Row) audit.SourceFingerprint {
	fp := audit.SourceFingerprint{Hash: r.Hash, Values: make([]audit.FingerprintValue, len(r.Values))}
	for i, v := range r.Values {
		fp.Values[i] = audit.FingerprintValue{Name: r.Columns[i], Value: v}
	}
	return fp
}

// listingFingerprint is a files source's fingerprint: its listing's, with
// the number of files and their bytes.
func listingFingerprint(l *files.Listing) audit.SourceFingerprint {
	var size int64
	for _, f := range l.Files {
		size += f.Size
	}
	n, b := strconv.Itoa(len(l.Files)), strconv.FormatInt(size, 10)
	return audit.SourceFingerprint{Hash: l.Fingerprint, Values: []audit.FingerprintValue{{Name: "files", Value: &n}, {Name: "bytes", Value: &b}}}
}
