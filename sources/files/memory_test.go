package files

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"
)

// heapLimit is what streaming a file of any size may hold on the heap.
const heapLimit = 64 << 20

// csvGen generates a CSV of about size bytes, row by row, never holding
// more than one row.
type csvGen struct {
	size, n int64
	row     int64
	buf     []byte
}

func (g *csvGen) Read(p []byte) (int, error) {
	if len(g.buf) == 0 {
		if g.n >= g.size {
			return 0, io.EOF
		}
		if g.row == 0 {
			g.buf = append(g.buf, "id,name,amount,at,note\n"...)
		}
		g.row++
		g.buf = strconv.AppendInt(g.buf, g.row, 10)
		g.buf = append(g.buf, ",customer-"...)
		g.buf = strconv.AppendInt(g.buf, g.row*7919%100003, 10)
		g.buf = append(g.buf, ',')
		g.buf = strconv.AppendInt(g.buf, g.row%100000, 10)
		g.buf = append(g.buf, ".25,2026-11-28T10:00:00Z,\"a note, quoted, with \"\"quotes\"\" and\na newline\"\n"...)
	}
	n := copy(p, g.buf)
	g.buf = g.buf[n:]
	g.n += int64(n)
	return n, nil
}

// peakHeap samples HeapInuse until stop is called, and returns its peak.
func peakHeap() (stop func() uint64) {
	var (
		mu   sync.Mutex
		peak uint64
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	sample := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		mu.Lock()
		peak = max(peak, m.HeapInuse)
		mu.Unlock()
	}
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				sample()
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		sample()
		return peak
	}
}

// drain reads a stream as COPY does, 64 KiB at a time.
func drain(t *testing.T, s *Stream) int64 {
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{s}, make([]byte, 64<<10))
	require.NoError(t, err)
	return n
}

// A 100 MB CSV streams through its row source (with fill columns, so every
// record is rewritten) while the heap stays small: the file is never held.
func TestBoundedMemoryCSV(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100 MB")
	}
	dir := t.TempDir()
	const size = 100 << 20
	f, err := os.Create(filepath.Join(dir, "big.csv"))
	require.NoError(t, err)
	_, err = io.Copy(f, &csvGen{size: size})
	require.NoError(t, err)
	require.NoError(t, f.Close())

	store, err := NewLocal(dir)
	require.NoError(t, err)
	file, err := store.Stat(context.Background(), "big.csv")
	require.NoError(t, err)
	target := Target{Table: pgx.Identifier{"t"}, Columns: []Column{
		{"id", "bigint"}, {"name", "text"}, {"amount", "numeric"}, {"at", "timestamptz"}, {"note", "text"}, {"dt", "date"},
	}, Fill: map[string]string{"dt": "2026-11-28"}}

	runtime.GC()
	stop := peakHeap()
	s, err := OpenStream(context.Background(), store, Spec{Format: CSV}, &file, target)
	require.NoError(t, err)
	n := drain(t, s)
	require.NoError(t, s.Close())
	peak := stop()
	t.Logf("%d MiB read, %d MiB streamed, heap in use peaked at %.1f MiB", file.Size>>20, n>>20, float64(peak)/(1<<20))
	require.Greater(t, n, file.Size, "every record gained the fill column")
	require.Less(t, peak, uint64(heapLimit))
	require.Len(t, file.SHA256, 64)
}

// A Parquet file streams one row group at a time: memory is the row
// group's pages, not the file.
func TestBoundedMemoryParquet(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a large Parquet file")
	}
	type row struct {
		ID     int64   `parquet:"id"`
		Amount float64 `parquet:"amount"`
		Name   string  `parquet:"name"`
		At     int64   `parquet:"at,timestamp(microsecond)"`
	}
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big.parquet"))
	require.NoError(t, err)
	w := parquet.NewGenericWriter[row](f, parquet.PageBufferSize(256<<10))
	batch := make([]row, 10000)
	const rows = 2_000_000
	for i := int64(0); i < rows; i += int64(len(batch)) {
		for j := range batch {
			k := i + int64(j)
			batch[j] = row{ID: k, Amount: float64(k*7919%100003) / 100, Name: "customer-" + strconv.FormatInt(k*104729%1000003, 36), At: 1795860000000000 + k*1000003}
		}
		_, err := w.Write(batch)
		require.NoError(t, err)
		if (i+int64(len(batch)))%200_000 == 0 {
			require.NoError(t, w.Flush()) // a row group
		}
	}
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())

	store, err := NewLocal(dir)
	require.NoError(t, err)
	file, err := store.Stat(context.Background(), "big.parquet")
	require.NoError(t, err)
	target := Target{Table: pgx.Identifier{"t"}, Columns: []Column{
		{"id", "bigint"}, {"amount", "double precision"}, {"name", "text"}, {"at", "timestamptz"}, {"dt", "date"},
	}, Fill: map[string]string{"dt": "2026-11-28"}}

	runtime.GC()
	stop := peakHeap()
	s, err := OpenStream(context.Background(), store, Spec{Format: Parquet}, &file, target)
	require.NoError(t, err)
	n := drain(t, s)
	require.NoError(t, s.Close())
	peak := stop()
	t.Logf("%d MiB of Parquet (%d rows), %d MiB of COPY text, heap in use peaked at %.1f MiB", file.Size>>20, rows, n>>20, float64(peak)/(1<<20))
	require.Less(t, peak, uint64(heapLimit))
}
