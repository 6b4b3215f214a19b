package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pauseHold is how long TestPauseHoldsADatasetAcrossTheFleet keeps its
// dataset paused: IDEM_E2E_PAUSE_HOLD, 5s by default so that make test
// stays fast; IDEM_E2E_PAUSE_HOLD=2m is the long variant, a hold long
// enough for the paused messages sent back to come round several times.
func pauseHold(t *testing.T) time.Duration {
	v := os.Getenv("IDEM_E2E_PAUSE_HOLD")
	if v == "" {
		return 5 * time.Second
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "IDEM_E2E_PAUSE_HOLD")
	return d
}

// idem runs an idem command against the world's config.
func (w *world) idem(args ...string) string {
	w.t.Helper()
	out, err := exec.Command(idemBin, append(args, "--config", w.cfg)...).CombinedOutput()
	require.NoError(w.t, err, "%s", out)
	return string(out)
}

// Two replicas: a paused dataset's 100 events are held (no attempt, no
// dead letter) while another dataset loads; after the resume each loads
// exactly once.
func TestPauseHoldsADatasetAcrossTheFleet(t *testing.T) {
	t.Parallel()
	hold := pauseHold(t)
	w := newWorld(t, opts{extraYAML: clicksYAML})
	w.db.Exec(t, "CREATE TABLE analytics.clicks (id bigint, event_date date NOT NULL)")
	w.streams()
	out := w.idem("pause", "orders", "--reason", "upstream re-export", "--by", "alice")
	require.Contains(t, out, "orders dataset paused by alice at ")
	a, b := w.serve(), w.serve()

	for i := range 100 {
		w.publish(fmt.Sprintf("2026-11-%02d", i%30+1), fmt.Sprintf("p%03d", i), nil)
	}
	for i := range 30 {
		w.publishTo("clicks", fmt.Sprintf("2026-11-%02d", i+1), "c")
	}
	// The other dataset loads behind the paused one's backlog.
	w.waitCount(30, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'clicks'")
	// Both replicas hold or send back orders' events: delivered, not loaded.
	require.Eventually(t, func() bool {
		_, ma := get(t, "http://"+a.httpAddr()+"/metrics")
		_, mb := get(t, "http://"+b.httpAddr()+"/metrics")
		return metricValue(ma, `idem_dataset_paused{dataset="orders"}`) == 1 && metricValue(mb, `idem_dataset_paused{dataset="orders"}`) == 1 &&
			metricValue(ma, `idem_dataset_paused{dataset="clicks"}`) == 0
	}, 30*time.Second, 50*time.Millisecond, "idem_dataset_paused on both replicas")
	// Held for the whole hold: no attempt, no dead letter, at any moment.
	deadline := time.Now().Add(hold)
	for time.Now().Before(deadline) {
		require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'orders'"), "a paused dataset attempts nothing")
		require.Empty(t, w.deadLetters(), "a pause dead-letters nothing")
		time.Sleep(200 * time.Millisecond) // the pace of the checks above, not a wait for an outcome
	}
	ackPending, _ := w.pending()
	require.Positive(t, ackPending, "the replicas hold some of the paused events")

	w.idem("resume", "orders", "--reason", "export fixed", "--by", "bob")
	// A message sent back comes round after its PauseDelay, at most twice
	// the hold after the resume.
	require.Eventually(t, func() bool {
		return w.count("SELECT count(*) FROM idem.run_ledger WHERE task_id = 'orders'") == 100
	}, 2*hold+time.Minute, 100*time.Millisecond, "every orders event loads after the resume")
	w.waitSettled()
	require.EqualValues(t, 100, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'orders' AND status = 'success'"),
		"each event loaded exactly once")
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE task_id = 'orders' AND status <> 'success'"), "no attempt failed")
	require.Empty(t, w.deadLetters())
	require.EqualValues(t, 2, w.count("SELECT count(*) FROM idem.operator_actions WHERE action IN ('pause', 'resume')"))
}

// A pause with --until ends by itself: its events load once it passes.
func TestPauseUntilEndsByItself(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{})
	w.streams()
	w.idem("pause", "orders", "--reason", "short window", "--until", "3s")
	var until time.Time
	require.NoError(t, w.db.Pool.QueryRow(context.Background(), "SELECT until FROM idem.dataset_pauses").Scan(&until))
	w.serve()
	for i := range 10 {
		w.publish(fmt.Sprintf("2026-11-%02d", i+1), "u", nil)
	}
	w.waitCount(10, "SELECT count(*) FROM idem.run_ledger")
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE started_at < $1", until), "nothing started before the pause's end")
	require.Empty(t, w.deadLetters())
	require.Zero(t, w.count("SELECT count(*) FROM idem.dataset_pauses WHERE resumed_at IS NOT NULL"), "no writer ended it")
}
