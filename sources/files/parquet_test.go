package files

import (
	"context"
	"math"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

// Every Parquet type the reader knows lands in its PostgreSQL column with
// the value it had: decimals of any width, UUIDs, JSON, bytes, times,
// special floats, small and unsigned integers, millisecond and INT96
// timestamps.
func TestParquetTypes(t *testing.T) {
	type typed struct {
		Dec   []byte           `parquet:"dec,decimal(4:38)"`
		Dec32 int32            `parquet:"dec32,decimal(3:9)"`
		U     [16]byte         `parquet:"u,uuid"`
		J     string           `parquet:"j,json"`
		Raw   []byte           `parquet:"raw"`
		Tm    int64            `parquet:"tm,time(microsecond)"`
		F32   float32          `parquet:"f32"`
		F64   float64          `parquet:"f64"`
		Small int8             `parquet:"small,int(8)"`
		U32   uint32           `parquet:"u32"`
		Ms    int64            `parquet:"ms,timestamp(millisecond)"`
		Old   deprecated.Int96 `parquet:"old"`
		Num   int64            `parquet:"num"`
		Kind  string           `parquet:"kind,enum"`
	}
	// -123456789012345678901234.5678 as 16 bytes of two's complement.
	unscaled, ok := new(big.Int).SetString("-1234567890123456789012345678", 10)
	require.True(t, ok)
	dec := make([]byte, 16)
	new(big.Int).Add(unscaled, new(big.Int).Lsh(big.NewInt(1), 128)).FillBytes(dec)
	// INT96: nanoseconds of the day, then the Julian day.
	at := time.Date(2026, 11, 28, 13, 14, 15, 123456000, time.UTC)
	nanos := uint64(at.Sub(at.Truncate(24 * time.Hour)))
	julian := uint32(at.Unix()/86400 + 2440588)
	var old deprecated.Int96
	old[0], old[1], old[2] = uint32(nanos), uint32(nanos>>32), julian
	u := [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}
	body := writeParquet(t, []typed{{
		Dec: dec, Dec32: -5, U: u, J: `{"a": [1, "x\ty"]}`, Raw: []byte{0, 1, 0xfe, '\\'},
		Tm: (13*3600+14*60+15)*1e6 + 250000, F32: float32(math.NaN()), F64: math.Inf(-1), Small: -128, U32: math.MaxUint32,
		Ms: at.UnixMilli(), Old: old, Num: 48, Kind: "paid",
	}}, 10)

	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TYPE kind AS ENUM ('open', 'paid');
		CREATE TABLE p (dec numeric(38,4), dec32 numeric, u uuid, j jsonb, raw bytea, tm time, f32 real,
		f64 double precision, small smallint, u32 bigint, ms timestamp, old timestamp, num text, kind kind)`)
	cols := []Column{{"dec", "numeric(38,4)"}, {"dec32", "numeric"}, {"u", "uuid"}, {"j", "jsonb"}, {"raw", "bytea"},
		{"tm", "time without time zone"}, {"f32", "real"}, {"f64", "double precision"}, {"small", "smallint"},
		{"u32", "bigint"}, {"ms", "timestamp without time zone"}, {"old", "timestamp without time zone"}, {"num", "text"}, {"kind", "USER-DEFINED"}}
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			db.Exec(t, `TRUNCATE p`)
			b.put(t, "p/dt=2026-11-28/a.parquet", body)
			spec := Spec{URL: b.base + "p/dt={partition}/", Format: Parquet}
			_, err := load(t, db, b.storeFor(t, spec), spec, "2026-11-28", Target{Table: pgx.Identifier{"p"}, Columns: cols})
			require.NoError(t, err)
			var got string
			require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT concat_ws(' | ', dec, dec32, u, j, raw, tm,
				f32, f64, small, u32, ms, old, num, kind) FROM p`).Scan(&got))
			require.Equal(t, strings.Join([]string{
				"-123456789012345678901234.5678", "-0.005", "123e4567-e89b-12d3-a456-426614174000", `{"a": [1, "x\ty"]}`,
				`\x0001fe5c`, "13:14:15.25", "NaN", "-Infinity", "-128", "4294967295",
				"2026-11-28 13:14:15.123", "2026-11-28 13:14:15.123456", "48", "paid",
			}, " | "), got)
		})
	}
}

// Columns the reader cannot load say so, all at once, before any row.
func TestParquetUnsupported(t *testing.T) {
	type nested struct {
		ID   int64    `parquet:"id"`
		Tags []string `parquet:"tags,list"`
		F16  []int32  `parquet:"reps"`
	}
	b := localBackend(t)
	b.put(t, "n/dt=2026-11-28/a.parquet", writeParquet(t, []nested{{ID: 1, Tags: []string{"a"}, F16: []int32{1}}}, 10))
	b.put(t, "n/dt=2026-11-28/b.parquet", []byte("PAR1 not really"))
	spec := Spec{URL: b.base + "n/dt={partition}/", Format: Parquet}
	store := b.storeFor(t, spec)
	r, err := ready(t, store, spec, "2026-11-28", time.Now())
	require.NoError(t, err)
	target := Target{Table: pgx.Identifier{"n"}, Columns: []Column{{"id", "bigint"}, {"tags", "text[]"}, {"other", "text"}}}
	_, err = OpenStream(context.Background(), store, spec, &r.Listing.Files[0], target)
	var se *SchemaError
	require.ErrorAs(t, err, &se)
	require.Equal(t, []string{
		`unknown column "reps": the target has no such column`,
		`missing column "other": the file lacks it and nothing fills it`,
		`column "tags": nested (group) columns are not supported; flatten it`,
	}, se.Problems)
	target.Columns[2] = Column{"reps", "integer[]"}
	_, err = OpenStream(context.Background(), store, spec, &r.Listing.Files[0], target)
	require.ErrorAs(t, err, &se)
	require.Equal(t, []string{
		`column "tags": nested (group) columns are not supported; flatten it`,
		`column "reps": repeated columns are not supported`,
	}, se.Problems)

	_, err = OpenStream(context.Background(), store, spec, &r.Listing.Files[1], target)
	var fe *FormatError
	require.ErrorAs(t, err, &fe)
	require.True(t, fe.Fatal())
	require.Contains(t, err.Error(), "bad_file: "+b.base+"n/dt=2026-11-28/b.parquet: ")
}

// A Parquet file cut short between its listing and the read of its footer
// (a local file truncated in place) is a file that changed, never a bad
// file: the read found fewer bytes than listed, not zeros to parse.
func TestParquetShorterThanListedIsChanged(t *testing.T) {
	b := localBackend(t)
	body := ordersParquet(t)["part-0.parquet"]
	b.put(t, "short/dt=2026-11-28/part-0.parquet", body)
	spec := Spec{URL: b.base + "short/dt={partition}/", Format: Parquet}
	store := b.storeFor(t, spec)
	r, err := ready(t, store, spec, "2026-11-28", time.Now())
	require.NoError(t, err)
	f := r.Listing.Files[0]
	ra, err := store.OpenAt(context.Background(), &f)
	require.NoError(t, err)
	defer ra.Close()
	require.NoError(t, os.Truncate(strings.TrimPrefix(f.URL, "file://"), int64(len(body)/2)))
	target := Target{Table: pgx.Identifier{"orders"}, Columns: ordersColumns, Fill: map[string]string{"dt": "2026-11-28"}}
	_, err = openParquet(&f, ra, Allow{}, target)
	var ce *ChangedError
	require.ErrorAs(t, err, &ce, "a file shorter than listed: %v", err)
}
