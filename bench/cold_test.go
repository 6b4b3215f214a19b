package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestColdSmoke runs the day-one scenario at its tiny size (0 and 1k
// attempts, 200 events) on a cluster of its own, with pg_stat_statements,
// and checks every figure exists and is sane. It never checks a speed.
func TestColdSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds idem and nats-server and runs them against PostgreSQL")
	}
	if os.Getenv("IDEM_BENCH_COLD") != "1" {
		t.Skip("set IDEM_BENCH_COLD=1 (about a minute: two databases, a nats-server each, five idem serve runs and pgbench)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := RunCold(ctx, Options{Mode: ModeTiny, Progress: testLog{t}})
	require.NoError(t, err)
	require.Equal(t, 200, res.Events)
	require.Len(t, res.Sizes, 2)
	require.Equal(t, 0, res.Sizes[0].Rows)
	require.Equal(t, 1000, res.Sizes[1].Rows)

	for _, s := range res.Sizes {
		for name, p := range map[string]*ColdPass{"cold": s.Cold, "warm": s.Warm, "skipped": s.Skipped, "max_in_flight 1": s.InFlight1} {
			require.NotNil(t, p, "%s at %d attempts", name, s.Rows)
			require.Positive(t, p.Events, name)
			require.Positive(t, p.SpanSeconds, name)
			require.Positive(t, p.PerSec, name)
			require.Positive(t, p.PeakMiB, "%s: serve's VmHWM", name)
			// The cluster is on this machine: CPU is measured, and idem's
			// includes its start-up, never nothing.
			require.NotNil(t, p.CPU, name)
			require.Positive(t, p.CPU.Idem, name)
			require.GreaterOrEqual(t, min(p.CPU.Postgres, p.CPU.NATS, p.CPU.Harness), 0.0, name)
			require.NotEmpty(t, p.Top, "%s: top statements", name)
			require.LessOrEqual(t, len(p.Top), 8)
			for _, st := range p.Top {
				require.NotEmpty(t, st.Query)
				require.LessOrEqual(t, len([]rune(st.Query)), 100)
				require.Positive(t, st.Calls)
			}
		}
		require.Equal(t, res.Events, s.Cold.Events)
		require.Equal(t, res.Events/4, s.Skipped.Events)
		require.Equal(t, 1, s.InFlight1.InFlight)
		require.Equal(t, "skipped", s.Skipped.Status)
		for _, pb := range []*ColdPgbench{s.Pgbench4, s.Pgbench1} {
			require.NotNil(t, pb, "pgbench at %d attempts", s.Rows)
			require.Positive(t, pb.TPS)
			require.Positive(t, pb.Transactions)
		}
	}
	require.True(t, res.Sizes[0].Autovacuum.Settled, "an empty history leaves autovacuum nothing to do")

	// The section renders from the saved file, first in the report.
	path := filepath.Join(t.TempDir(), "cold.json")
	require.NoError(t, res.Save(path))
	again, err := LoadCold(path)
	require.NoError(t, err)
	md := again.Markdown()
	for _, want := range []string{"## Day one: a fresh install's first backfill", "cold ÷ pgbench -c 4", "flat: PostgreSQL CPU per event", "**Method.**", "Top statements at 1k attempts, cold pass"} {
		require.Contains(t, md, want)
	}
	doc := (&Results{}).Document(again, nil)
	require.Contains(t, doc, "| day one: cold ÷ pgbench -c 4 ≥ 1.00× |", "the day-one targets lead BENCHMARKS.md's table")
	require.NotContains(t, doc, "Top statements at", "the details go to bench/FIGURES.md")
	require.NotContains(t, (&Results{}).Document(nil, nil), "day one")
	figures := (&Results{}).Figures("", again, nil)
	require.Less(t, strings.Index(figures, "## Day one"), strings.Index(figures, "## The main run"))
	for _, want := range []string{"cold ÷ pgbench -c 4", "**Method.**", "Top statements at 1k attempts, cold pass"} {
		require.Contains(t, figures, want)
	}
}
