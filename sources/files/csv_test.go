package files

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

// csvFill appends the fill columns to every record, whatever the quoting,
// the line endings and where the reads cut the stream: the records a CSV
// parser sees in its output are the input's, each with the fill values.
func TestCSVFillKeepsRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", ",", `"`, "\n", "\r\n", " ", "é", "\\", "\t"}
	field := func() string {
		var b strings.Builder
		for range rng.IntN(6) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		s := b.String()
		if strings.ContainsAny(s, ",\"\r\n") || s == "" && rng.IntN(2) == 0 {
			return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
		}
		return s
	}
	for i := range 2000 {
		eol := "\n"
		if rng.IntN(2) == 0 {
			eol = "\r\n"
		}
		cols := 1 + rng.IntN(3)
		var in strings.Builder
		for r := range rng.IntN(6) {
			if r > 0 && rng.IntN(8) == 0 {
				in.WriteString(eol) // a blank line
			}
			fs := make([]string, cols)
			for c := range fs {
				fs[c] = field()
			}
			if cols == 1 && fs[0] == "" {
				fs[0] = "x" // a lone empty field would be a blank line
			}
			in.WriteString(strings.Join(fs, ","))
			in.WriteString(eol)
		}
		text := in.String()
		if rng.IntN(3) == 0 {
			text = strings.TrimSuffix(text, eol)
		}
		fill := &csvFill{f: &File{URL: "t"}, src: bufio.NewReaderSize(strings.NewReader(text), 16+rng.IntN(20)), suffix: []byte(`,"F ""x"""`)}
		out, err := io.ReadAll(fill)
		require.NoError(t, err, "case %d: %q", i, text)

		want, err := csv.NewReader(strings.NewReader(text)).ReadAll()
		require.NoError(t, err, "case %d: %q", i, text)
		for j := range want {
			want[j] = append(want[j], `F "x"`)
		}
		r := csv.NewReader(bytes.NewReader(out))
		got, err := r.ReadAll()
		require.NoError(t, err, "case %d: %q -> %q", i, text, out)
		require.Equal(t, want, got, "case %d: %q -> %q", i, text, out)
		if eol == "\r\n" && len(want) > 1 {
			require.NotRegexp(t, `[^\r]\n$`, string(out), "case %d: the last line ends as the others", i)
		}
	}
}

func TestCSVFillUnterminatedQuote(t *testing.T) {
	fill := &csvFill{f: &File{URL: "file:///x.csv"}, src: bufio.NewReader(strings.NewReader("1,\"open\n2,3\n")), suffix: []byte(",f")}
	_, err := io.ReadAll(fill)
	var fe *FormatError
	require.ErrorAs(t, err, &fe)
	require.EqualError(t, err, "bad_file: file:///x.csv: the last record has an unterminated quote")
}

// Without fill columns a CSV streams to COPY as it is; a column the file
// has is read from it even when Fill names it too; an empty file is no
// rows, and a header alone is no rows either.
func TestCSVPassThrough(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE o (id int, dt date, run_id text)`)
	b := localBackend(t)
	p := "o/dt=2026-11-28/"
	b.put(t, p+"a.csv", lines("dt,id", "2026-11-28,1", "2026-11-27,2"))
	b.put(t, p+"b.csv", nil)
	b.put(t, p+"c.csv", []byte("id,dt"))
	spec := Spec{URL: b.base + "o/dt={partition}/", Format: CSV}
	store := b.storeFor(t, spec)

	s, err := OpenStream(context.Background(), store, spec, &File{Key: "dt=2026-11-28/a.csv", URL: b.base + p + "a.csv", Size: -1}, Target{})
	require.ErrorContains(t, err, "target.table: missing")
	require.Nil(t, s)

	target := Target{Table: pgx.Identifier{"o"}, Columns: []Column{{"id", "int"}, {"dt", "date"}}}
	l, err := load(t, db, store, spec, "2026-11-28", target)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 0, 0}, []int64{l.Files[0].Rows, l.Files[1].Rows, l.Files[2].Rows})

	db.Exec(t, `TRUNCATE o`)
	target.Columns = append(target.Columns, Column{"run_id", "text"})
	target.Fill = map[string]string{"dt": "2026-11-28", "run_id": `run "7", it's`}
	_, err = load(t, db, store, spec, "2026-11-28", target)
	require.NoError(t, err)
	var got string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT string_agg(concat_ws('|', id, dt, run_id), ';' ORDER BY id) FROM o`).Scan(&got))
	require.Equal(t, `1|2026-11-28|run "7", it's;2|2026-11-27|run "7", it's`, got)
}

// The fill rewriter runs at memory speed (1.5 GB/s on the development
// machine), far above what COPY parses.
func BenchmarkCSVFill(b *testing.B) {
	data, err := io.ReadAll(&csvGen{size: 32 << 20})
	require.NoError(b, err)
	b.SetBytes(int64(len(data)))
	buf := make([]byte, 64<<10)
	for b.Loop() {
		f := &csvFill{f: &File{}, src: bufio.NewReaderSize(bytes.NewReader(data), readBuffer), suffix: []byte(`,"2026-11-28"`)}
		_, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
		require.NoError(b, err)
	}
}
