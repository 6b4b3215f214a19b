package files

import (
	"bufio"
	"context"
	"errors"
	"io"

	"github.com/parquet-go/parquet-go/format"
)

// FileColumns reads f's columns as a load would meet them, reading only
// its header (CSV) or its footer (Parquet), each with the PostgreSQL type
// a column added for it would take: text for CSV, the Parquet type's own
// for Parquet (ParquetType). NDJSON declares no columns before its rows:
// nil, and its keys are checked row by row as it loads. A Parquet column
// no load can read (nested, repeated, an unknown type) is left out: the
// load reports it.
func FileColumns(ctx context.Context, store Store, spec Spec, f *File) ([]Column, error) {
	switch spec.Format {
	case CSV:
		body, err := store.Open(ctx, f)
		if err != nil {
			return nil, err
		}
		defer body.Close()
		br := bufio.NewReaderSize(body, 64<<10)
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
		header, err := readHeader(f, br)
		if err != nil {
			return nil, err
		}
		out := make([]Column, len(header))
		for i, n := range header {
			out[i] = Column{Name: n, Type: "text"}
		}
		return out, nil
	case Parquet:
		ra, err := store.OpenAt(ctx, f)
		if err != nil {
			return nil, err
		}
		defer ra.Close()
		_, pf, err := parquetFooter(f, ra)
		if err != nil {
			return nil, err
		}
		leaves, _, _ := parquetLeaves(pf.Metadata().Schema)
		out := make([]Column, len(leaves))
		for i, l := range leaves {
			out[i] = Column{Name: l.name, Type: l.pgType()}
		}
		return out, nil
	}
	return nil, nil
}

// pgType is the PostgreSQL type a column added for l takes: the one that
// holds every value of its Parquet type.
func (l leaf) pgType() string {
	switch l.kind {
	case kBool:
		return "boolean"
	case kInt:
		switch {
		case l.bits <= 16:
			return "smallint"
		case l.bits <= 32:
			return "integer"
		}
		return "bigint"
	case kUint:
		switch {
		case l.bits <= 8:
			return "smallint"
		case l.bits <= 16:
			return "integer"
		case l.bits <= 32:
			return "bigint"
		}
		return "numeric(20,0)"
	case kDecimal:
		return "numeric"
	case kFloat:
		if l.phys == format.Float {
			return "real"
		}
		return "double precision"
	case kJSON:
		return "jsonb"
	case kBytes:
		return "bytea"
	case kUUID:
		return "uuid"
	case kDate:
		return "date"
	case kTime:
		return "time"
	case kTimestamp:
		if l.utc {
			return "timestamp with time zone"
		}
		return "timestamp"
	case kInt96:
		return "timestamp"
	}
	return "text"
}
