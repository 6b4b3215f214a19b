package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/testkit/pgtest"
)

// TestHistoryCosts measures the audit lookups and small-event throughput on
// a 100k and a 10M-attempt history when IDEM_BENCH_HISTORY is set (to
// "small" for 10k and 100k and fewer events, a quick check of the harness).
// It writes the table and the plans into IDEM_BENCH_HISTORY_OUT (a folder)
// when set, and logs them. It never
// checks a speed: the ratios are for bench/HISTORY-COSTS.md.
func TestHistoryCosts(t *testing.T) {
	mode := os.Getenv("IDEM_BENCH_HISTORY")
	if mode == "" {
		t.Skip("set IDEM_BENCH_HISTORY=1 (10M attempts: minutes) or small")
	}
	sizes, events := HistorySizes, 1500
	if mode == "small" {
		sizes, events = []HistorySize{{Datasets: 50, Days: 40}, sizes[0]}, 300
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	rep, err := RunHistory(ctx, pgtest.AdminURL(), sizes, 15, events, testLog{t})
	require.NoError(t, err)
	for _, l := range rep.Lookups {
		require.Len(t, l.Medians, len(sizes), l.Name)
	}
	require.Len(t, rep.Throughput, len(historyInFlight))
	for _, tp := range rep.Throughput {
		require.Len(t, tp.PerSec, len(sizes))
		for _, v := range tp.PerSec {
			require.Greater(t, v, 0.0, "events/s at concurrency %d", tp.InFlight)
		}
	}
	require.NotEmpty(t, rep.Steps)
	lookups := []string{"status before", "status after", "missing before", "missing after"}
	plans := slices.Clone(lookups)
	for _, sz := range sizes[:len(sizes)-1] {
		for _, name := range lookups {
			plans = append(plans, historyPlanAt(name, sz))
		}
	}
	for _, sz := range sizes {
		plans = append(plans, historyLoadPlan(sz))
	}
	var b strings.Builder
	b.WriteString(rep.Markdown())
	for _, name := range plans {
		require.NotEmpty(t, rep.Plans[name], name)
		b.WriteString("\n## " + name + "\n\n" + rep.Plans[name] + "\n")
	}
	t.Log("\n" + b.String())
	if dir := os.Getenv("IDEM_BENCH_HISTORY_OUT"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "history-costs.md"), []byte(b.String()), 0o644))
	}
}
