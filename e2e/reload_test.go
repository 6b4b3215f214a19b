package e2e

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// reloadWorld is a running serve and the config file it reads on SIGHUP.
type reloadWorld struct {
	*world
	p    *proc
	base string // the config as written by newWorld
}

func newReloadWorld(t *testing.T) *reloadWorld {
	w := newWorld(t, opts{unknownGrace: "1m"})
	w.db.Exec(t, "CREATE TABLE analytics.t2 (LIKE analytics.t)")
	b, err := os.ReadFile(w.cfg)
	require.NoError(t, err)
	return &reloadWorld{world: w, p: w.serve(), base: string(b)}
}

// hup rewrites the config and signals the process, then waits for its verdict.
func (r *reloadWorld) hup(cfg, verdict string) {
	r.t.Helper()
	require.NoError(r.t, os.WriteFile(r.cfg, []byte(cfg), 0o600))
	before := strings.Count(r.p.output(), verdict)
	r.p.signal(syscall.SIGHUP)
	require.Eventually(r.t, func() bool { return strings.Count(r.p.output(), verdict) > before }, 30*time.Second, 20*time.Millisecond,
		"no %q after SIGHUP:\n%s", verdict, r.p.output())
}

const newOrdersYAML = `  neworders:
    strategy: delete_insert
    target: analytics.t2
    partition_column: event_date
    source: SELECT id, event_date, amount, note FROM staging.src WHERE event_date = @partition
`

func TestSIGHUPAddsADatasetWithoutARestart(t *testing.T) {
	t.Parallel()
	r := newReloadWorld(t)
	before := r.p.startField("config_version")
	r.hup(r.base+newOrdersYAML, "config reloaded")
	require.Contains(t, r.p.output(), `"added":["neworders"]`)
	for d := 1; d <= 5; d++ {
		_, err := r.js.Publish(t.Context(), "idem.ready.neworders", []byte(fmt.Sprintf(`{"dataset":"neworders","partition":"2026-11-%02d","run_id":"r1"}`, d)))
		require.NoError(t, err)
	}
	r.waitCount(5, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'neworders'")
	r.waitSettled()
	require.Empty(t, r.deadLetters())
	require.True(t, r.p.alive(), "the same process loads the new dataset")
	code, body := get(t, "http://"+r.p.httpAddr()+"/readyz")
	require.Equal(t, 200, code)
	require.NotContains(t, body, before, "/readyz reports the new config version")
	_, metrics := get(t, "http://"+r.p.httpAddr()+"/metrics")
	require.Contains(t, metrics, `idem_config_reloads_total{result="applied"} 1`)
}

func TestSIGHUPWithABrokenConfigKeepsTheOldOne(t *testing.T) {
	t.Parallel()
	r := newReloadWorld(t)
	// A table that does not exist: refused after checking the database.
	r.hup(r.base+strings.ReplaceAll(newOrdersYAML, "analytics.t2", "analytics.nope"), "config reload refused")
	require.Contains(t, r.p.output(), "analytics.nope")
	// Not even YAML.
	r.hup(r.base+"  : [\n", "config reload refused")
	// A wall-clock source: refused by validation.
	r.hup(strings.Replace(r.base, "WHERE event_date = @partition", "WHERE event_date = CURRENT_DATE", 1), "config reload refused")

	r.publish("2026-11-02", "r1", nil)
	r.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE task_id = 'orders'")
	r.waitSettled()
	require.Equal(t, r.expected("2026-11-02"), r.target(), "the old config still loads")
	require.Empty(t, r.deadLetters())
	_, metrics := get(t, "http://"+r.p.httpAddr()+"/metrics")
	require.Contains(t, metrics, `idem_config_reloads_total{result="refused"} 3`)
	require.NotContains(t, metrics, `result="applied"`)
}

func TestSIGHUPDuringALongLoadLetsItFinish(t *testing.T) {
	t.Parallel()
	r := newReloadWorld(t)
	r.db.Exec(t, "INSERT INTO staging.gate_on VALUES (3000)")
	r.publish("2026-11-03", "r1", nil)
	r.waitSleeping()
	// The new config loads only the rows with amount > 5 of a partition.
	narrowed := strings.Replace(r.base, "WHERE event_date = @partition", "WHERE event_date = @partition AND amount > 5", 1)
	require.NotEqual(t, r.base, narrowed)
	r.hup(narrowed, "config reloaded")
	require.Contains(t, r.p.output(), `"changed":["orders"]`)
	r.waitCount(1, "SELECT count(*) FROM idem.run_ledger")
	r.db.Exec(t, "DELETE FROM staging.gate_on")
	r.publish("2026-11-04", "r1", nil)
	r.waitCount(2, "SELECT count(*) FROM idem.run_ledger")
	r.waitSettled()
	require.Empty(t, r.deadLetters())
	require.EqualValues(t, 2, r.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'"), "each loaded once, acked")
	// The load that was running finished under the config it started with.
	require.EqualValues(t, 10, r.count("SELECT count(*) FROM analytics.t WHERE event_date = '2026-11-03'"))
	require.Equal(t, r.count("SELECT count(*) FROM staging.src WHERE event_date = '2026-11-04' AND amount > 5"),
		r.count("SELECT count(*) FROM analytics.t WHERE event_date = '2026-11-04'"), "the next load used the new config")
	require.Less(t, r.count("SELECT count(*) FROM analytics.t WHERE event_date = '2026-11-04'"), int64(10))
}
