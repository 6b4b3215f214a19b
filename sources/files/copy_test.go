package files

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

// The target of the format tests: one column of each type a load meets
// most, and the partition column, which the files lack.
const ordersTable = `CREATE TABLE %s (
	id int NOT NULL, big bigint, amount numeric(12,2), note text,
	day date, at timestamptz, paid boolean, dt date NOT NULL)`

var ordersColumns = []Column{
	{"id", "integer"}, {"big", "bigint"}, {"amount", "numeric(12,2)"}, {"note", "text"},
	{"day", "date"}, {"at", "timestamp with time zone"}, {"paid", "boolean"}, {"dt", "date"},
}

// wantOrders is every row of the fixtures as text, NULL as ∅, at in UTC.
var wantOrders = []string{
	"1|9000000000|12.50|plain|2026-11-28|2026-11-28 10:00:00|true|2026-11-28",
	"2|∅|-0.05|tab\there, \"quoted\", comma, newline\nand backslash \\|∅|2026-11-28 23:59:59.123456|false|2026-11-28",
	"3|-1|∅|∅|2026-01-01|∅|∅|2026-11-28",
	"4|4|0.00||2026-11-28|2026-11-28 08:00:00|true|2026-11-28",
}

// The CSV fixture is two files whose headers list the columns in
// different orders, with CRLF line endings in the second.
var ordersCSV = map[string][]byte{
	"part-0.csv": lines(
		"id,big,amount,note,day,at,paid",
		"1,9000000000,12.50,plain,2026-11-28,2026-11-28T10:00:00Z,true",
		`2,,-0.05,"tab`+"\t"+`here, ""quoted"", comma, newline`,
		`and backslash \",,2026-11-28 23:59:59.123456+00,false`,
	),
	"part-1.csv": []byte("\xef\xbb\xbfpaid,note,id,big,amount,day,at\r\n" +
		",,3,-1,,2026-01-01,\r\n" +
		"t,\"\",4,4,0,2026-11-28,2026-11-28T10:00:00+02:00"), // no final newline
}

var ordersNDJSON = map[string][]byte{
	"part-0.json": lines(
		`{"id":1,"big":9000000000,"amount":12.50,"note":"plain","day":"2026-11-28","at":"2026-11-28T10:00:00Z","paid":true}`,
		`{"id":2,"big":null,"amount":"-0.05","note":"tab\there, \"quoted\", comma, newline\nand backslash \\","at":"2026-11-28 23:59:59.123456+00","paid":false}`,
		``,
		`{"id":3,"big":-1,"day":"2026-01-01"}`,
		`  {"note":"","id":4,"big":4,"amount":0,"day":"2026-11-28","at":"2026-11-28T10:00:00+02:00","paid":true}`,
	),
}

// parquetOrder is the Parquet fixture's schema: pointers are optional
// columns.
type parquetOrder struct {
	ID     int32      `parquet:"id"`
	Big    *int64     `parquet:"big,optional"`
	Amount int64      `parquet:"amount,decimal(2:12)"`
	Note   *string    `parquet:"note,optional"`
	Day    *int32     `parquet:"day,date,optional"` // days: parquet-go v0.32.1 writes a time.Time date as truncated nanoseconds
	At     *time.Time `parquet:"at,timestamp(microsecond),optional"`
	Paid   *bool      `parquet:"paid,optional"`
}

func ptr[T any](v T) *T { return &v }

// ordersParquet has no NULL amount (a required decimal column), so its
// third row differs from wantOrders there.
func ordersParquet(t *testing.T) map[string][]byte {
	d := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return &v
	}
	days := func(s string) *int32 { return ptr(int32(d(s).Unix() / 86400)) }
	return map[string][]byte{"part-0.parquet": writeParquet(t, []parquetOrder{
		{ID: 1, Big: ptr[int64](9000000000), Amount: 1250, Note: ptr("plain"), Day: days("2026-11-28T00:00:00Z"), At: d("2026-11-28T10:00:00Z"), Paid: ptr(true)},
		{ID: 2, Amount: -5, Note: ptr("tab\there, \"quoted\", comma, newline\nand backslash \\"), At: d("2026-11-28T23:59:59.123456Z"), Paid: ptr(false)},
		{ID: 3, Big: ptr[int64](-1), Amount: 0, Day: days("2026-01-01T00:00:00Z")},
		{ID: 4, Big: ptr[int64](4), Amount: 0, Note: ptr(""), Day: days("2026-11-28T00:00:00Z"), At: d("2026-11-28T08:00:00Z"), Paid: ptr(true)},
	}, 2)}
}

// writeParquet encodes rows, perRowGroup rows to a row group.
func writeParquet[T any](t testing.TB, rows []T, perRowGroup int) []byte {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf)
	for len(rows) > 0 {
		n := min(perRowGroup, len(rows))
		_, err := w.Write(rows[:n])
		require.NoError(t, err)
		require.NoError(t, w.Flush())
		rows = rows[n:]
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// load runs what a load does with a file source: readiness, then every
// file COPYed in one transaction, committed.
func load(t *testing.T, db *pgtest.DB, store Store, spec Spec, partition string, target Target) (Listing, error) {
	t.Helper()
	ctx := context.Background()
	r, err := ready(t, store, spec, partition, time.Now())
	require.NoError(t, err)
	require.True(t, r.Ready, r.Reason)
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	if _, err := Copy(ctx, tx.Conn().PgConn(), store, spec, &r.Listing, target); err != nil {
		return r.Listing, err
	}
	require.NoError(t, tx.Commit(ctx))
	return r.Listing, nil
}

// dump reads a table as text rows, columns joined by |, NULL as ∅.
func dump(t *testing.T, db *pgtest.DB, table string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT id::text, big::text, amount::text, note, day::text,
		(at AT TIME ZONE 'UTC')::text, paid::text, dt::text FROM `+pgx.Identifier{table}.Sanitize()+` ORDER BY id`)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		vals := make([]*string, 8)
		dst := make([]any, 8)
		for i := range vals {
			dst[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(dst...))
		s := make([]string, 8)
		for i, v := range vals {
			s[i] = "∅"
			if v != nil {
				s[i] = *v
			}
		}
		out = append(out, strings.Join(s, "|"))
	}
	require.NoError(t, rows.Err())
	return out
}

// Each format, from each store, lands in a real table through COPY: types,
// NULLs, quoting, the fill column, and per-file row counts.
func TestFormatsIntoTable(t *testing.T) {
	db := pgtest.NewDB(t)
	for _, b := range backends(t) {
		for _, tc := range []struct {
			format Format
			files  map[string][]byte
			want   []string
		}{
			{CSV, ordersCSV, wantOrders},
			{NDJSON, ordersNDJSON, wantOrders},
			{Parquet, ordersParquet(t), append(append(wantOrders[:2:2], strings.Replace(wantOrders[2], "|∅|∅|2026-01-01", "|0.00|∅|2026-01-01", 1)), wantOrders[3])},
		} {
			t.Run(b.name+"/"+string(tc.format), func(t *testing.T) {
				table := "orders_" + b.name + "_" + string(tc.format)
				db.Exec(t, strings.Replace(ordersTable, "%s", table, 1))
				prefix := "orders/" + string(tc.format) + "/dt=2026-11-28/"
				var want int64
				for name, body := range tc.files {
					b.put(t, prefix+name, body)
				}
				spec := Spec{URL: b.base + "orders/" + string(tc.format) + "/dt={partition}/", Format: tc.format}
				require.NoError(t, spec.Validate())
				target := Target{Table: pgx.Identifier{table}, Columns: ordersColumns, Fill: map[string]string{"dt": "2026-11-28"}}
				l, err := load(t, db, b.storeFor(t, spec), spec, "2026-11-28", target)
				require.NoError(t, err)
				require.Equal(t, tc.want, dump(t, db, table))
				for _, f := range l.Files {
					require.Positive(t, f.Rows, f.URL)
					want += f.Rows
					if b.s3 == nil {
						require.Len(t, f.SHA256, 64, f.URL)
					}
				}
				require.EqualValues(t, 4, want)
			})
		}
	}
}

func TestCSVHeaderMismatch(t *testing.T) {
	b := localBackend(t)
	b.put(t, "o/dt=2026-11-28/part-0.csv", lines("id,Big,extra,note,note", "1,2,3,4,5"))
	spec := Spec{URL: b.base + "o/dt={partition}/", Format: CSV}
	store := b.storeFor(t, spec)
	r, err := ready(t, store, spec, "2026-11-28", time.Now())
	require.NoError(t, err)
	_, err = OpenStream(context.Background(), store, spec, &r.Listing.Files[0], Target{Table: pgx.Identifier{"o"}, Columns: ordersColumns})
	var se *SchemaError
	require.ErrorAs(t, err, &se)
	require.True(t, se.Fatal())
	require.Equal(t, []string{
		`unknown column "Big": the target has no such column (names match exactly; the target has "big")`,
		`unknown column "extra": the target has no such column`,
		`column "note" appears twice in the header`,
		`missing column "big": the header lacks it and nothing fills it`,
		`missing column "amount": the header lacks it and nothing fills it`,
		`missing column "day": the header lacks it and nothing fills it`,
		`missing column "at": the header lacks it and nothing fills it`,
		`missing column "paid": the header lacks it and nothing fills it`,
		`missing column "dt": the header lacks it and nothing fills it`,
	}, se.Problems)
	require.True(t, strings.HasPrefix(err.Error(), "schema_mismatch: "+b.base+"o/dt=2026-11-28/part-0.csv: unknown column"), err.Error())
}

func TestNDJSONUnknownKey(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, strings.Replace(ordersTable, "%s", "o", 1))
	b := localBackend(t)
	target := Target{Table: pgx.Identifier{"o"}, Columns: ordersColumns, Fill: map[string]string{"dt": "2026-11-28"}}
	spec := Spec{URL: b.base + "o/dt={partition}/", Format: NDJSON}
	store := b.storeFor(t, spec)

	// In the first object: refused before COPY starts.
	b.put(t, "o/dt=2026-11-28/a.json", lines(`{"id":1,"colour":"red","Note":"x"}`))
	r, err := ready(t, store, spec, "2026-11-28", time.Now())
	require.NoError(t, err)
	_, err = OpenStream(context.Background(), store, spec, &r.Listing.Files[0], target)
	var se *SchemaError
	require.ErrorAs(t, err, &se)
	require.Equal(t, []string{
		`object 1: unknown key "Note": the target has no such column (names match exactly; the target has "note")`,
		`object 1: unknown key "colour": the target has no such column`,
	}, se.Problems)

	// In a later object: the COPY fails with the SchemaError itself, not
	// PostgreSQL's "COPY from stdin failed", and nothing is committed.
	b.put(t, "o/dt=2026-11-28/a.json", lines(`{"id":1}`, `{"id":2}`, `{"id":3,"colour":"red"}`))
	_, err = load(t, db, store, spec, "2026-11-28", target)
	require.ErrorAs(t, err, &se)
	require.Equal(t, []string{`object 3: unknown key "colour": the target has no such column`}, se.Problems)
	require.Empty(t, dump(t, db, "o"))

	// Not an object.
	b.put(t, "o/dt=2026-11-28/a.json", lines(`{"id":1}`, `[2]`))
	_, err = load(t, db, store, spec, "2026-11-28", target)
	var fe *FormatError
	require.ErrorAs(t, err, &fe)
	require.Contains(t, err.Error(), "object 2 (byte 8): not a JSON object")
}

// What PostgreSQL refuses comes back as its own error, with the file.
func TestPostgresErrorKeepsItsCode(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, strings.Replace(ordersTable, "%s", "o", 1))
	b := localBackend(t)
	spec := Spec{URL: b.base + "o/dt={partition}/", Format: CSV}
	b.put(t, "o/dt=2026-11-28/a.csv", lines("id,note", "1,x", "two,y"))
	target := Target{Table: pgx.Identifier{"o"}, Columns: []Column{{"id", "integer"}, {"note", "text"}, {"dt", "date"}}, Fill: map[string]string{"dt": "2026-11-28"}}
	_, err := load(t, db, b.storeFor(t, spec), spec, "2026-11-28", target)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "22P02", pe.Code)
	require.Contains(t, err.Error(), "copy "+b.base+"o/dt=2026-11-28/a.csv: ")
}

// Parquet's footer is checked against the target: uint64 into bigint and
// timestamps without isAdjustedToUTC into timestamptz are refused unless
// the spec allows them; allowed, they load as documented.
func TestParquetRefusals(t *testing.T) {
	type risky struct {
		ID    int32   `parquet:"id"`
		Count uint64  `parquet:"count"`
		Local int64   `parquet:"local,timestamp(microsecond:local)"`
		Ratio float64 `parquet:"ratio"`
	}
	wall := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC).UnixMicro() // noon on Paris's clocks
	body := writeParquet(t, []risky{{ID: 1, Count: 42, Local: wall, Ratio: 0.5}}, 10)

	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE r (id int, count bigint, local timestamptz, ratio integer)`)
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			db.Exec(t, `TRUNCATE r`)
			b.put(t, "r/dt=2026-11-28/a.parquet", body)
			spec := Spec{URL: b.base + "r/dt={partition}/", Format: Parquet}
			store := b.storeFor(t, spec)
			target := Target{Table: pgx.Identifier{"r"}, Columns: []Column{{"id", "integer"}, {"count", "bigint"}, {"local", "timestamp with time zone"}, {"ratio", "integer"}}}
			_, err := load(t, db, store, spec, "2026-11-28", target)
			var se *SchemaError
			require.ErrorAs(t, err, &se)
			require.Len(t, se.Problems, 3, se.Problems)
			require.Contains(t, se.Problems[0], `column "count": INT64 INT(64,false) cannot load into bigint: PostgreSQL has no unsigned integer`)
			require.Contains(t, se.Problems[1], `column "local": INT64 TIMESTAMP(isAdjustedToUTC=false,unit=MICROS) cannot load into timestamp with time zone: its timestamps are wall-clock times`)
			require.Contains(t, se.Problems[2], `column "ratio": DOUBLE cannot load into integer: a floating-point number would need rounding`)

			target.Columns[3].Type = "double precision"
			db.Exec(t, `ALTER TABLE r ALTER ratio TYPE double precision`)
			spec.Allow = Allow{Uint64AsBigint: true, NaiveTimestampsIn: "Europe/Paris"}
			_, err = load(t, db, store, spec, "2026-11-28", target)
			require.NoError(t, err)
			var got string
			require.NoError(t, db.Pool.QueryRow(context.Background(),
				`SELECT concat_ws('|', id, count, local AT TIME ZONE 'UTC', ratio) FROM r`).Scan(&got))
			require.Equal(t, "1|42|2026-07-01 10:00:00|0.5", got)
			db.Exec(t, `ALTER TABLE r ALTER ratio TYPE integer`)
		})
	}

	// Allowed, a uint64 above bigint's range still fails, in PostgreSQL.
	b := localBackend(t)
	b.put(t, "r/dt=2026-11-28/a.parquet", writeParquet(t, []risky{{ID: 2, Count: 1 << 63, Local: wall}}, 10))
	spec := Spec{URL: b.base + "r/dt={partition}/", Format: Parquet, Allow: Allow{Uint64AsBigint: true, NaiveTimestampsIn: "UTC"}}
	_, err := load(t, db, b.storeFor(t, spec), spec, "2026-11-28", Target{Table: pgx.Identifier{"r"},
		Columns: []Column{{"id", "integer"}, {"count", "bigint"}, {"local", "timestamptz"}, {"ratio", "double precision"}}})
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "22003", pe.Code) // numeric_value_out_of_range
}

// A Parquet file replaced mid-load on S3 fails its next ranged read with
// the ChangedError, not with whatever parquet-go makes of it.
func TestParquetChangedOnS3(t *testing.T) {
	b := s3Backend(t)
	type one struct {
		ID int64 `parquet:"id"`
	}
	rows := make([]one, 50000) // more than the footer's read
	for i := range rows {
		rows[i].ID = int64(i) * 7919
	}
	key := "p/dt=2026-11-28/a.parquet"
	b.put(t, key, writeParquet(t, rows, 1000))
	spec := Spec{URL: b.base + "p/dt={partition}/", Format: Parquet}
	store := b.storeFor(t, spec)
	r, err := ready(t, store, spec, "2026-11-28", time.Now())
	require.NoError(t, err)
	s, err := OpenStream(context.Background(), store, spec, &r.Listing.Files[0], Target{Table: pgx.Identifier{"p"}, Columns: []Column{{"id", "bigint"}}})
	require.NoError(t, err)
	defer s.Close()
	b.put(t, key, writeParquet(t, rows[:10], 1000))
	_, err = bytesRead(s)
	var ce *ChangedError
	require.ErrorAs(t, err, &ce)
	require.ErrorAs(t, s.Err(), &ce)
}

func bytesRead(s *Stream) (int64, error) {
	var n int64
	buf := make([]byte, 32<<10)
	for {
		m, err := s.Read(buf)
		n += int64(m)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// versitygw moves a new object's data into place before it writes the new
// ETag beside it: for a moment a GET with If-Match of the old ETag passes
// and serves the new bytes. A Parquet file replaced by a larger one in that
// moment (written here straight into the backend, the ETag left as it
// was) is a ChangedError, found by the size the ranged reads answer with,
// not a bad_file made of the wrong bytes at the old size's end.
func TestParquetReplacedUnderItsOldETagIsChanged(t *testing.T) {
	b := s3Backend(t)
	type one struct {
		ID int64 `parquet:"id"`
	}
	rows := make([]one, 200)
	for i := range rows {
		rows[i].ID = int64(i) * 7919
	}
	key := "q/dt=2026-11-28/a.parquet"
	b.put(t, key, writeParquet(t, rows[:20], 1000))
	spec := Spec{URL: b.base + "q/dt={partition}/", Format: Parquet}
	store := b.storeFor(t, spec)
	r, err := ready(t, store, spec, "2026-11-28", time.Now())
	require.NoError(t, err)
	larger := writeParquet(t, rows, 1000)
	require.Greater(t, int64(len(larger)), r.Listing.Files[0].Size)
	require.NoError(t, os.WriteFile(filepath.Join(b.s3.Dir, bucket, key), larger, 0o644))

	s, err := OpenStream(context.Background(), store, spec, &r.Listing.Files[0], Target{Table: pgx.Identifier{"q"}, Columns: []Column{{"id", "bigint"}}})
	if err == nil {
		defer s.Close()
		_, err = bytesRead(s)
	}
	var ce *ChangedError
	require.ErrorAs(t, err, &ce)
}
