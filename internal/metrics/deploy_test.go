package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// registered lists the metric names New registers, read from the
// collectors' descriptions (a vector without samples is not gathered).
func registered(t *testing.T) map[string]bool {
	t.Helper()
	m := New("test")
	names := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([a-z_:]+)"`)
	for _, c := range []prometheus.Collector{m.Events, m.LoadDuration, m.RowsWritten, m.DeadLetters, m.Duplicates,
		m.Redeliveries, m.Heartbeats, m.InFlight, m.LaneInFlight, m.OutboxPublished, m.OutboxPublishFailures, m.OutboxBacklog,
		m.OutboxOldestPending, m.WarehouseUp, m.CircuitOpens, m.BuildInfo, m.ConfigInfo, m.ConfigReloads,
		m.Ready, m.ConsumerPending, m.ConsumerAckPending, m.BackfillPending, m.DeadLettersPending, m.PartitionsMissing, m.PartitionsLate,
		m.NewestPartitionAge, m.AuditPruned, m.ReverifyPasses, m.ReverifyReloaded, m.ReverifyLast, m.Checks, m.SchemaChanges} {
		ch := make(chan *prometheus.Desc, 4)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			mm := fq.FindStringSubmatch(d.String())
			require.NotNil(t, mm, d.String())
			names[mm[1]] = true
		}
	}
	// Registered too: every collector above must be on the registry.
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "idem_") {
			require.True(t, names[mf.GetName()], "%s is registered but not listed here", mf.GetName())
		}
	}
	return names
}

// TestShippedRulesAndDashboardUseRealMetrics: every idem_ metric named by
// the alert rules and the Grafana dashboard in deploy/ is one idem exports,
// so a rename cannot leave an alert that never fires.
func TestShippedRulesAndDashboardUseRealMetrics(t *testing.T) {
	names := registered(t)
	ref := regexp.MustCompile(`\bidem_[a-z_]+`)
	for _, f := range []string{"../../deploy/prometheus/idem-alerts.yaml", "../../deploy/grafana/idem-dashboard.json"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		used := map[string]bool{}
		for _, n := range ref.FindAllString(string(b), -1) {
			// Histograms are queried through their series.
			n = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
			if n == "idem_dlq" || strings.HasPrefix(n, "idem_alerts") {
				continue
			}
			used[n] = true
		}
		require.NotEmpty(t, used, f)
		var unknown []string
		for n := range used {
			if !names[n] {
				unknown = append(unknown, n)
			}
		}
		sort.Strings(unknown)
		require.Empty(t, unknown, "%s names metrics idem does not export", filepath.Base(f))
	}
}
