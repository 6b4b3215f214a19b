package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/deadletter"
)

// TestMixedConfigVersionsDeadLetterNothing runs the moment of a rolling
// deploy that adds a dataset: one replica on the old config (orders only),
// one on the new (orders and neworders). Every event of the new dataset
// loads once, whichever replica JetStream hands it to; none is
// dead-lettered. An event for a dataset no replica knows still is, as
// fatal, once the grace has passed.
func TestMixedConfigVersionsDeadLetterNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{unknownGrace: "3s"})
	w.db.Exec(t, "CREATE TABLE analytics.t2 (LIKE analytics.t)")
	old, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	oldCfg := string(old)
	newCfg := oldCfg + `  neworders:
    strategy: delete_insert
    target: analytics.t2
    partition_column: event_date
    source: SELECT id, event_date, amount, note FROM staging.src WHERE event_date = @partition
`
	newPath := filepath.Join(w.dir, "idem-new.yaml")
	require.NoError(t, os.WriteFile(newPath, []byte(newCfg), 0o600))

	w.streams()
	a := w.serve()
	b := w.serveConfig(newPath)
	require.NotEqual(t, a.startField("config_version"), b.startField("config_version"), "two config versions, reported at start")

	for d := 1; d <= 20; d++ {
		body := fmt.Sprintf(`{"dataset":"neworders","partition":"2026-11-%02d","run_id":"r1"}`, d)
		_, err := w.js.Publish(t.Context(), "idem.ready.neworders", []byte(body))
		require.NoError(t, err)
	}
	// Each event the old replica wins goes back for 1-3 s and is a fresh
	// draw between the two (about two deliveries each on average); two
	// minutes is some 60 draws for the unluckiest one.
	require.Eventually(t, func() bool {
		return w.count("SELECT count(*) FROM idem.run_ledger WHERE task_id = 'neworders'") == 20
	}, 2*time.Minute, 50*time.Millisecond, "every event of the new dataset loaded once")
	w.waitSettled()
	require.Empty(t, w.deadLetters(), "an event of the new dataset was dead-lettered by the old replica")
	require.EqualValues(t, 20, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'neworders' AND status = 'success'"),
		"each loaded once")
	_, metrics := get(t, "http://"+a.httpAddr()+"/metrics")
	t.Logf("the old replica left %d deliveries to the new one", metricValue(metrics, `idem_events_total{dataset="_invalid",outcome="deferred"}`))

	// A publisher's typo: no replica knows it; dead-lettered after the grace.
	sent := time.Now()
	_, err = w.js.Publish(t.Context(), "idem.ready.nosuch", []byte(`{"dataset":"nosuch","partition":"2026-11-01","run_id":"r1"}`))
	require.NoError(t, err)
	dl := w.waitDeadLetters(1)[0]
	require.Equal(t, "fatal", dl.Header.Get(deadletter.HeaderErrorKind))
	require.Contains(t, dl.Header.Get(deadletter.HeaderError), "no live replica knows it after 3s")
	require.GreaterOrEqual(t, time.Since(sent), 3*time.Second, "dead-lettered only after the grace")
	require.Equal(t, "idem.dlq._invalid", dl.Subject)
}

func (w *world) serveConfig(path string) *proc {
	saved := w.cfg
	w.cfg = path
	defer func() { w.cfg = saved }()
	return w.serve()
}

// metricValue is the value of one sample line of a /metrics page, 0 when absent.
func metricValue(page, sample string) int {
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, sample+" "); ok {
			var n float64
			_, _ = fmt.Sscan(v, &n)
			return int(n)
		}
	}
	return 0
}
