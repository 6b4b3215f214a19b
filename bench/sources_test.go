package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
	"github.com/idem-data/idem/testkit/s3test"
)

// TestSources runs the sources benchmark against a real S3 server
// (versitygw) and a second PostgreSQL cluster. By default (make test) at
// its tiny size, 20k rows and 4 MiB files, checking only that every way
// loaded the partition's rows and that the results are recorded and
// render, never a speed. IDEM_BENCH_SOURCES=full (make bench-sources) or
// quick runs it at that mode's size on a durable cluster of its own and
// writes the results to IDEM_BENCH_SOURCES_OUT.
func TestSources(t *testing.T) {
	if testing.Short() {
		t.Skip("builds idem and runs it against two PostgreSQL clusters, NATS and versitygw")
	}
	opts := Options{Mode: ModeTiny, AdminURL: pgtest.AdminURL(), Progress: testLog{t}, Command: "go test -run TestSources ./bench/", IdemBin: idemBinary(t)}
	timeout := 10 * time.Minute
	if m := os.Getenv("IDEM_BENCH_SOURCES"); m != "" {
		opts = Options{Mode: Mode(m), Durable: true, Progress: testLog{t}, Command: "make bench-sources"}
		timeout = 3 * time.Hour
	}
	srv := s3test.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := RunSources(ctx, opts, SourcesS3{Endpoint: srv.Endpoint, Region: s3test.Region, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	require.NoError(t, err)

	sz, err := sourcesSizesFor(opts.Mode)
	require.NoError(t, err)
	require.Equal(t, sz.rows, res.Rows)
	for _, f := range srcFormats {
		require.EqualValues(t, sz.rows, res.Files[f].Rows, f)
		require.Positive(t, res.Files[f].Bytes, f)
	}
	for _, k := range []string{SrcCopyCSV, SrcStagedCSV, SrcPipe, SrcIdemCSV, SrcIdemCSVS3, SrcIdemNDJSON, SrcIdemParquet, SrcIdemPG} {
		require.Len(t, res.Loads[k], sz.reps, k)
		for _, ld := range res.Loads[k] {
			require.EqualValues(t, sz.rows, ld.Rows, k)
			require.Positive(t, ld.Ms, k)
		}
	}
	require.Len(t, res.Memory, len(srcFormats))
	for _, m := range res.Memory {
		require.Positive(t, m.Rows, m.Format)
		require.GreaterOrEqual(t, m.Bytes, sz.bigBytes, m.Format)
		require.Positive(t, m.PeakMiB, m.Format)
	}

	path := filepath.Join(t.TempDir(), "sources.json")
	if out := os.Getenv("IDEM_BENCH_SOURCES_OUT"); out != "" && opts.Mode != ModeTiny {
		path = out
	}
	require.NoError(t, res.Save(path))
	again, err := LoadSources(path)
	require.NoError(t, err)
	require.Equal(t, res.Markdown(), again.Markdown())
	require.Len(t, again.Verdicts(), 5)
	doc := (&Results{}).Document(nil, again)
	require.Contains(t, doc, "## Sources")
	require.Contains(t, (&Results{}).Figures("", nil, again), again.Markdown())
	t.Log("\n" + again.Section() + "\n" + again.Markdown())
}
