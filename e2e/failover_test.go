package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/testkit/browsertest"
)

// failover is a primary and its asynchronous streaming standby, started
// from PostgreSQL's own tools on 127.0.0.1, and a world whose idem serve
// connects with a URL naming both (target_session_attrs=read-write).
type failover struct {
	*world
	primary, standby *localpg.Server
	// newDB is the world's database on the standby, for after the promotion.
	newDB          *pgxpool.Pool
	standbyStopped bool
}

func newFailover(t *testing.T) *failover {
	t.Helper()
	ctx := context.Background()
	primary, err := localpg.Start(ctx, localpg.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Close() })
	standbyPort, err := localpg.FreePort()
	require.NoError(t, err)
	f := &failover{primary: primary}
	f.world = newWorld(t, opts{pgAdmin: primary.URL(""), then: "[b]", extraYAML: chainYAML, serveURL: func(u string) string {
		hosts := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", primary.Port, standbyPort)
		return strings.Replace(u, fmt.Sprintf("127.0.0.1:%d", primary.Port), hosts, 1) + "&target_session_attrs=read-write"
	}})
	f.db.Exec(t, chainSQL)
	// The standby is made after the world's database, so it has it.
	standby, err := primary.Standby(ctx, standbyPort)
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Close() })
	f.standby = standby
	pool, err := pgxpool.New(ctx, strings.Replace(f.db.URL, fmt.Sprintf(":%d/", primary.Port), fmt.Sprintf(":%d/", standby.Port), 1))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	f.newDB = pool
	return f
}

// caughtUp waits until the standby has replayed everything the primary wrote.
func (f *failover) caughtUp() {
	f.t.Helper()
	ctx := context.Background()
	var lsn string
	require.NoError(f.t, f.db.Pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn))
	require.Eventually(f.t, func() bool {
		var ok bool
		err := f.newDB.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&ok)
		return err == nil && ok
	}, 30*time.Second, 50*time.Millisecond, "the standby did not catch up")
}

// promote kills the primary (SIGKILL) and promotes the standby.
func (f *failover) promote() {
	f.t.Helper()
	ctx := context.Background()
	require.NoError(f.t, f.primary.Kill())
	if f.standbyStopped {
		// Started again with the dead primary as its upstream: it has only
		// the WAL it received before it stopped.
		require.NoError(f.t, f.standby.Restart(ctx, ""))
	}
	require.NoError(f.t, f.standby.Promote(ctx))
}

// newCount reads a count on the new primary; its pool's sessions from
// before the promotion may be gone, so it tries again.
func (f *failover) newCount(sql string, args ...any) int64 {
	f.t.Helper()
	var n int64
	var err error
	require.Eventually(f.t, func() bool {
		err = f.newDB.QueryRow(context.Background(), sql, args...).Scan(&n)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "%s: %v", sql, err)
	return n
}

func (f *failover) waitNewCount(want int64, sql string, args ...any) {
	f.t.Helper()
	var got int64
	var err error
	require.Eventually(f.t, func() bool {
		err = f.newDB.QueryRow(context.Background(), sql, args...).Scan(&got)
		return err == nil && got == want
	}, 90*time.Second, 100*time.Millisecond, "want %d from %s on the new primary (last %d, %v)", want, sql, got, err)
}

// TestFailoverToAStandbyThatLacksTheLastCommits: the standby stops
// receiving WAL while more events load and are acknowledged on the primary;
// the primary dies (SIGKILL); the standby is promoted. idem reaches the new
// primary through the multi-host URL, finds the events whose loads the new
// primary lacks, and loads them again: every partition ends with exactly
// its rows, downstream datasets match their upstreams, every run is in the
// ledger once, nothing is dead-lettered, and the log says how many events
// were loaded again.
func TestFailoverToAStandbyThatLacksTheLastCommits(t *testing.T) {
	t.Parallel()
	f := newFailover(t)
	p := f.serve()
	parts := f.loadBeforeFailover(true)
	// The primary dies; for a while only the standby answers, read-only:
	// the circuit opens and its probes fail on both hosts.
	require.NoError(t, f.primary.Kill())
	require.NoError(t, f.standby.Restart(context.Background(), ""))
	f.publish("2026-11-12", "during", nil)
	parts = append(parts, "2026-11-12")
	addr := p.httpAddr()
	var reason string
	require.Eventually(t, func() bool {
		code, body := get(t, "http://"+addr+"/readyz")
		reason = body
		return code == 503 && strings.Contains(body, fmt.Sprint(f.standby.Port))
	}, 30*time.Second, 100*time.Millisecond, "/readyz should name both hosts: %s", reason)
	t.Logf("/readyz while no host takes writes: %s", reason)
	require.Contains(t, reason, fmt.Sprint(f.primary.Port))
	time.Sleep(3 * time.Second) // several probes fail
	require.NoError(t, f.standby.Promote(context.Background()))
	require.GreaterOrEqual(t, f.newCount(ledgerCount), int64(15))

	f.afterFailover(p, parts)
	res := f.passWith(p, func(r passLog) bool { return r.Reloaded > 0 })
	require.Equal(t, 15, res.Reloaded, "the five lost loads of each dataset, before anything else loaded")
	require.Zero(t, res.Failed)

	metrics := scrape(t, addr)
	require.Regexp(t, `(?m)^idem_reverify_reloaded_total [1-9]`, metrics)
	require.Regexp(t, `(?m)^idem_reverify_passes_total\{result="ok"\} [1-9]`, metrics)

	// The status page's health strip says when it ran, in a real browser.
	bctx := browsertest.New(t)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible("#h-reverify")))
	chip := browsertest.Eval[string](t, bctx, `document.querySelector('#h-reverify').textContent`)
	require.Regexp(t, `^re-verified \d+s ago: \d+ of \d+ recent events loaded again$`, chip)
}

// TestFailoverToACaughtUpStandbyReloadsNothing: the same failover with the
// standby fully caught up costs one pass that loads nothing.
func TestFailoverToACaughtUpStandbyReloadsNothing(t *testing.T) {
	t.Parallel()
	f := newFailover(t)
	p := f.serve()
	parts := f.loadBeforeFailover(false)
	f.caughtUp()
	f.promote()
	require.EqualValues(t, 30, f.newCount(ledgerCount))
	f.afterFailover(p, parts)
	res := f.passWith(p, func(passLog) bool { return true })
	require.Zero(t, res.Reloaded)
	require.Zero(t, res.Failed)
	require.Positive(t, res.Checked)
}

// loadBeforeFailover loads ten partitions of the chain orders -> b -> c;
// with lag, the standby receives no WAL of the last five.
func (f *failover) loadBeforeFailover(lag bool) []string {
	f.t.Helper()
	var parts []string
	for d := 1; d <= 10; d++ {
		parts = append(parts, fmt.Sprintf("2026-11-%02d", d))
	}
	for _, d := range parts[:5] {
		f.publish(d, "r-"+d, nil)
	}
	f.waitCount(15, ledgerCount) // orders, b and c for each
	f.waitSettled()
	f.caughtUp()
	if lag {
		require.NoError(f.t, f.standby.Stop(context.Background(), "fast"))
		f.standbyStopped = true
	}
	for _, d := range parts[5:] {
		f.publish(d, "r-"+d, nil)
	}
	f.waitCount(30, ledgerCount)
	f.waitSettled() // every event acknowledged
	return parts
}

// afterFailover: an event published after the promotion loads; then every
// table on the new primary holds what its partitions imply, once.
func (f *failover) afterFailover(p *proc, parts []string) {
	f.t.Helper()
	f.publish("2026-11-11", "after", nil)
	parts = append(parts, "2026-11-11")
	f.waitNewCount(int64(3*len(parts)), ledgerCount)
	f.waitSettled()
	f.db.Pool = f.newDB // the checks below read the new primary
	f.requireChain(parts...)
	// Downstream events are forced (each upstream load triggers one load),
	// so a run may load once per message; no message loads twice.
	require.Zero(f.t, f.count(`SELECT count(*) FROM (SELECT 1 FROM idem.pipeline_audit WHERE status = 'success'
		GROUP BY task_id, partition_key, run_id, stream_seq HAVING count(*) > 1) d`), "a message loaded twice")
	require.Zero(f.t, f.count(`SELECT count(*) FROM idem.run_ledger l WHERE NOT EXISTS
		(SELECT 1 FROM idem.pipeline_audit a WHERE a.id = l.audit_id AND a.status = 'success')`), "a ledger entry without its success")
	require.Empty(f.t, f.deadLetters())
	// The CLI follows the promotion through the same URL.
	out, err := exec.Command(idemBin, "audit", "status", "orders", "--from", "2026-11-01", "--to", "2026-11-11", "--config", f.cfg).CombinedOutput()
	require.NoError(f.t, err, "%s", out)
	require.Contains(f.t, string(out), "11 partition(s), 0 not loaded")
}

// passLog is the line a re-verification pass logs.
type passLog struct {
	Reason                                      string
	Checked, Missing, Reloaded, Skipped, Failed int
	Ahead                                       int `json:"loaded_ahead"`
}

// passWith waits for a pass whose line satisfies ok and returns it.
func (f *failover) passWith(p *proc, ok func(passLog) bool) passLog {
	f.t.Helper()
	var found passLog
	require.Eventually(f.t, func() bool {
		for _, line := range strings.Split(p.output(), "\n") {
			if !strings.Contains(line, "warehouse re-verified") {
				continue
			}
			var r passLog
			if json.Unmarshal([]byte(line), &r) == nil && ok(r) {
				found = r
				return true
			}
		}
		return false
	}, 60*time.Second, 100*time.Millisecond, "no re-verification pass logged:\n%s", p.output())
	f.t.Logf("re-verification: %+v", found)
	return found
}

// TestLoadsKeepTheServersRemoteApply: a database whose sessions default to
// synchronous_commit = remote_apply (synchronous standbys) gets its loads
// committed that way, not weakened to on by idem's own setting.
func TestLoadsKeepTheServersRemoteApply(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{extraYAML: `  levels:
    strategy: delete_insert
    target: analytics.levels
    partition_column: event_date
    source: SELECT DISTINCT event_date, current_setting('synchronous_commit') AS level FROM staging.src WHERE event_date = @partition
`})
	w.db.Exec(t, "CREATE TABLE analytics.levels (event_date date NOT NULL, level text)")
	w.db.Exec(t, "ALTER DATABASE "+w.db.Name+" SET synchronous_commit = remote_apply")
	p := w.serve()
	_, err := w.js.Publish(context.Background(), "idem.ready.levels", []byte(`{"dataset":"levels","partition":"2026-11-03","run_id":"r1"}`))
	require.NoError(t, err)
	w.waitCount(1, ledgerCount)
	var level string
	require.NoError(t, w.db.Pool.QueryRow(context.Background(), "SELECT level FROM analytics.levels").Scan(&level))
	require.Equal(t, "remote_apply", level)
	require.Contains(t, p.output(), "loads commit so too")
}
