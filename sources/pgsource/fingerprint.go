package pgsource

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Fingerprint runs sql, a query returning one row that summarises
// partition p on the source (e.g. SELECT count(*), max(updated_at) FROM
// orders WHERE event_date = @partition), and returns that row and its hash: the
// same rows give the same hash on any later call, on the primary or on any of
// its standbys, so a moved hash says the partition changed since it was
// loaded.
//
// It runs as Copy reads: a dedicated connection, one REPEATABLE READ READ
// ONLY transaction with the pinned text settings (so a timestamp hashes the
// same whatever the server's TimeZone), the lag gate of spec, and retries of
// recovery conflicts. sql is held to the rules of Spec.SQL; spec.SQL itself
// is not used. Errors are those of Copy; a query that does not return
// exactly one row is a fatal *Error (ReasonSourceSQL).
//
// The hash is the hex SHA-256 of the row's column count and of each value's
// text (or NULL), length-prefixed: values never run into each other.
func Fingerprint(ctx context.Context, spec Spec, sql string, p Params) (Row, error) {
	var errs []error
	if err := spec.Validate(); err != nil {
		// spec.SQL is not used here: keep every problem but its own.
		for _, e := range flatten(err) {
			var se *SpecError
			if errors.As(e, &se) && se.Field == "sql" {
				continue
			}
			errs = append(errs, e)
		}
	}
	for _, pr := range checkSQL(sql, "one row summarising the partition") {
		errs = append(errs, &SpecError{Field: "fingerprint", Problem: pr.text, reason: pr.reason})
	}
	if err := errors.Join(errs...); err != nil {
		return Row{}, err
	}
	bound, err := bind(sql, p)
	if err != nil {
		return Row{}, err
	}
	var row Row
	_, err = withSource(ctx, spec, func(s *session, _ Source) error {
		rr := s.conn.PgConn().ExecParams(ctx, bound, nil, nil, nil, nil)
		rows := 0
		for rr.NextRow() {
			rows++
			if rows == 1 {
				row = NewRow(rr.FieldDescriptions(), rr.Values())
			}
		}
		if _, err := rr.Close(); err != nil {
			return err
		}
		if rows != 1 {
			return &Error{Kind: KindFatal, Reason: ReasonSourceSQL, Source: s.addr, Op: "fingerprint",
				Message: fmt.Sprintf("the fingerprint query returned %d rows; it must return exactly one (an aggregate such as SELECT count(*), max(updated_at) ...)", rows)}
		}
		return nil
	})
	if err != nil {
		return Row{}, err
	}
	return row, nil
}

// Row is a fingerprint query's row: its hash, and each column's name and
// text (nil: NULL), for people.
type Row struct {
	Hash    string
	Columns []string
	Values  []*string
}

// NewRow hashes one row of text-format values, with its columns' names:
// the hash is the hex SHA-256 of the column count and of each value's
// text (or NULL), length-prefixed, so values never run into each other.
func NewRow(fields []pgconn.FieldDescription, vals [][]byte) Row {
	h := sha256.New()
	h.Write(binary.AppendUvarint([]byte("idem-pgsource-fingerprint-v1"), uint64(len(vals))))
	r := Row{Columns: make([]string, len(vals)), Values: make([]*string, len(vals))}
	for i, v := range vals {
		if i < len(fields) {
			r.Columns[i] = fields[i].Name
		}
		if v == nil {
			h.Write([]byte{0})
			continue
		}
		h.Write(binary.AppendUvarint([]byte{1}, uint64(len(v))))
		h.Write(v)
		s := string(v)
		r.Values[i] = &s
	}
	r.Hash = hex.EncodeToString(h.Sum(nil))
	return r
}

// flatten lists the errors errors.Join put together, or err alone.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
