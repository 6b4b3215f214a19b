package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"
)

// The rows of the sources benchmark: one orders table, the same rows in
// every format and in the source cluster.
const (
	srcCols = "id, event_date, customer, amount, created_at"
	srcDDL  = "(id bigint, event_date date, customer text, amount numeric(12,2), created_at timestamptz)"
)

// srcRow is one row as Parquet holds it, the way a data lake's writer
// would: the date as a DATE, the amount as a DECIMAL(12,2) of cents, the
// time as a UTC TIMESTAMP in microseconds, the customer dictionary-encoded.
type srcRow struct {
	ID        int64  `parquet:"id"`
	EventDate int32  `parquet:"event_date,date"`
	Customer  string `parquet:"customer,dict"`
	Amount    int64  `parquet:"amount,decimal(2:12)"`
	CreatedAt int64  `parquet:"created_at,timestamp(microsecond)"`
}

// srcRowAt is the row of id on day: about 100,000 customers, amounts up to
// 99,999.99, times spread over the day.
func srcRowAt(day time.Time, id int64) srcRow {
	const dayMicros = 86_400_000_000
	return srcRow{
		ID:        id,
		EventDate: int32(day.Unix() / 86400),
		Customer:  "customer-" + strconv.FormatInt(id*7919%100_003, 10),
		Amount:    id * 104_729 % 10_000_000,
		CreatedAt: day.UnixMicro() + id*1_000_003%dayMicros,
	}
}

// Formats of the files, as the dataset's format: names them.
const (
	fmtCSV     = "csv"
	fmtNDJSON  = "ndjson"
	fmtParquet = "parquet"
)

// srcFormats are the file formats, in the order the report lists them.
var srcFormats = []string{fmtCSV, fmtNDJSON, fmtParquet}

// appendCSV appends r as a CSV record, as a warehouse export writes it.
func appendCSV(b []byte, r srcRow, day string) []byte {
	b = strconv.AppendInt(b, r.ID, 10)
	b = append(b, ',')
	b = append(b, day...)
	b = append(b, ',')
	b = append(b, r.Customer...)
	b = append(b, ',')
	b = appendCents(b, r.Amount)
	b = append(b, ',')
	b = time.UnixMicro(r.CreatedAt).UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z")
	return append(b, '\n')
}

// appendNDJSON appends r as one JSON object and a newline.
func appendNDJSON(b []byte, r srcRow, day string) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, r.ID, 10)
	b = append(b, `,"event_date":"`...)
	b = append(b, day...)
	b = append(b, `","customer":"`...)
	b = append(b, r.Customer...)
	b = append(b, `","amount":`...)
	b = appendCents(b, r.Amount)
	b = append(b, `,"created_at":"`...)
	b = time.UnixMicro(r.CreatedAt).UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z")
	return append(b, "\"}\n"...)
}

func appendCents(b []byte, cents int64) []byte {
	b = strconv.AppendInt(b, cents/100, 10)
	b = append(b, '.')
	if c := cents % 100; c < 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, cents%100, 10)
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// srcFile is one file the benchmark wrote.
type srcFile struct {
	Path  string
	Rows  int64
	Bytes int64
}

// writeSrcFile writes rows of day in format into path, ids from firstID:
// exactly rows rows when rows > 0, else rows until the file holds at
// least minBytes. Parquet gets a row group every groupRows rows. It never
// holds more than one row group in memory.
func writeSrcFile(path, format string, day time.Time, firstID, rows, minBytes int64, groupRows int) (srcFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return srcFile{}, err
	}
	f, err := os.Create(path)
	if err != nil {
		return srcFile{}, err
	}
	out := srcFile{Path: path}
	cw := &countingWriter{w: f}
	// pending is what a writer holds that has not reached the file yet.
	var pending func() int64
	done := func(n int64) bool {
		if rows > 0 {
			return n >= rows
		}
		return cw.n+pending() >= minBytes
	}
	dayKey := day.Format(time.DateOnly)
	var n int64
	switch format {
	case fmtCSV, fmtNDJSON:
		bw := bufio.NewWriterSize(cw, 1<<20)
		pending = func() int64 { return int64(bw.Buffered()) }
		if format == fmtCSV {
			_, err = bw.WriteString("id,event_date,customer,amount,created_at\n")
		}
		var line []byte
		for ; err == nil && !done(n); n++ {
			r := srcRowAt(day, firstID+n)
			if format == fmtCSV {
				line = appendCSV(line[:0], r, dayKey)
			} else {
				line = appendNDJSON(line[:0], r, dayKey)
			}
			_, err = bw.Write(line)
		}
		if err == nil {
			err = bw.Flush()
		}
	case fmtParquet:
		// The file grows a row group at a time.
		pending = func() int64 { return 0 }
		w := parquet.NewGenericWriter[srcRow](cw, parquet.Compression(&parquet.Snappy), parquet.CreatedBy("idembench", "", ""))
		group := int64(groupRows)
		batch := make([]srcRow, 0, 8192)
		for err == nil && !done(n) {
			k := min(int64(cap(batch)), group-n%group)
			if rows > 0 {
				k = min(k, rows-n)
			}
			batch = batch[:0]
			for range k {
				batch = append(batch, srcRowAt(day, firstID+n))
				n++
			}
			if _, err = w.Write(batch); err == nil && n%group == 0 {
				err = w.Flush() // a row group
			}
		}
		if err == nil {
			err = w.Close()
		}
	default:
		err = fmt.Errorf("unknown format %q", format)
	}
	out.Rows = n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	out.Bytes = cw.n
	return out, err
}
