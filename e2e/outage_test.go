package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/localpg"
)

// worstRetrySchedule is the longest a message's whole retry schedule can
// take with the harness's settings (retry_delay 300ms, max_retry_delay 1s,
// retries 3): every backoff at its largest jitter.
func worstRetrySchedule() time.Duration {
	r := consumer.Retry{MaxAttempts: 4, Delay: 300 * time.Millisecond, MaxDelay: time.Second}
	var total time.Duration
	for attempt := 1; attempt < r.MaxAttempts; attempt++ {
		total += r.Backoff(attempt, 0.999999)
	}
	return total
}

// TestWarehouseOutagesDeadLetterNothing takes the warehouse away three ways
// while events arrive, each time for longer than the whole retry schedule:
// the server stopped (a maintenance window), the service's password changed
// under it (28P01 at connect), and the database turned read-only with its
// sessions cut (25006, as after a failover to a standby). With the default
// three retries, nothing may reach the dead-letter stream and every event
// must load exactly once after the warehouse is back.
func TestWarehouseOutagesDeadLetterNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := localpg.Start(ctx, localpg.Options{HBA: []string{"host all idem_app 127.0.0.1/32 scram-sha-256"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	admin := func(sql string) {
		t.Helper()
		c, err := pgx.Connect(ctx, srv.URL(""))
		require.NoError(t, err)
		defer c.Close(ctx)
		_, err = c.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	admin("CREATE ROLE idem_app LOGIN SUPERUSER PASSWORD 'pw-one'")

	w := newWorld(t, opts{ackWait: "2s", pgAdmin: srv.URL(""), serveURL: func(u string) string {
		return strings.Replace(u, "postgres@", "idem_app:pw-one@", 1)
	}})
	p := w.serve()
	base := "http://" + p.httpAddr()
	const outage = 10 * time.Second
	require.Greater(t, outage, 3*worstRetrySchedule(), "the outage must outlast the whole retry schedule")

	w.publish("2026-11-20", "warm", nil)
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger")

	cutSessions := "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'idem_app'"
	db := pgx.Identifier{w.db.Name}.Sanitize()
	phases := []struct {
		name       string
		start, end func()
		reason     string // in /readyz while the circuit is open
	}{
		{"stopped", func() { require.NoError(t, srv.Stop(ctx, "fast")) }, func() { require.NoError(t, srv.Restart(ctx, "")) }, "circuit open"},
		{"password", func() { admin("ALTER ROLE idem_app PASSWORD 'pw-two'"); admin(cutSessions) },
			func() { admin("ALTER ROLE idem_app PASSWORD 'pw-one'") }, "refused the login of idem_app: password authentication failed"},
		{"readonly", func() { admin("ALTER DATABASE " + db + " SET default_transaction_read_only = on"); admin(cutSessions) },
			func() { admin("ALTER DATABASE " + db + " RESET default_transaction_read_only") }, "25006"},
	}
	day := 1
	for _, ph := range phases {
		ph.start()
		began := time.Now()
		for i := range 6 {
			w.publish(fmt.Sprintf("2026-11-%02d", day+i), ph.name, nil)
		}
		// An operator sees why: not ready, the gauge down, the reason.
		require.Eventually(t, func() bool {
			code, body := get(t, base+"/readyz")
			return code == 503 && strings.Contains(body, ph.reason)
		}, outage, 50*time.Millisecond, "%s: /readyz does not say the circuit is open", ph.name)
		_, metrics := get(t, base+"/metrics")
		require.Contains(t, metrics, "idem_warehouse_up 0", ph.name)
		refused := "idem_warehouse_refused 0"
		if ph.name == "password" {
			refused = "idem_warehouse_refused 1"
		}
		require.Contains(t, metrics, refused, "%s: a login refused is told apart from an outage that passes", ph.name)
		time.Sleep(time.Until(began.Add(outage))) // the outage lasts; nothing to wait for
		require.Empty(t, w.deadLetters(), "%s: dead letters during the outage", ph.name)
		ph.end()

		w.waitCount(6, "SELECT count(*) FROM idem.run_ledger WHERE run_id = $1", ph.name)
		require.EqualValues(t, 6, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = $1 AND status = 'success'", ph.name),
			"%s: each event loaded once", ph.name)
		require.Eventually(t, func() bool { code, _ := get(t, base+"/readyz"); return code == 200 }, 30*time.Second, 50*time.Millisecond)
		t.Logf("%s: %d attempts failed transiently, %d found the warehouse gone", ph.name,
			w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = $1 AND error_kind = 'transient'", ph.name),
			w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = $1 AND error_kind = 'unavailable'", ph.name))
		day += 6
	}
	w.waitSettled()
	require.Empty(t, w.deadLetters(), "an outage dead-lettered a valid event")
	var parts []string
	for d := 1; d < day; d++ {
		parts = append(parts, fmt.Sprintf("2026-11-%02d", d))
	}
	require.Equal(t, w.expected(append(parts, "2026-11-20")...), w.target())
	_, metrics := get(t, base+"/metrics")
	require.Contains(t, metrics, "idem_warehouse_up 1")
	require.Contains(t, metrics, "idem_warehouse_circuit_opens_total 3", "opened once per outage")
	out := p.output()
	require.Equal(t, 3, strings.Count(out, "circuit open;"), "one line per state change, not one per message")
	require.Equal(t, 3, strings.Count(out, "circuit closed"))
	require.True(t, p.alive(), "idem serve stayed up")
}

// alive reports that the process has not exited.
func (p *proc) alive() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return false
	default:
		return true
	}
}

// TestRollingRestartsUnderABacklogDeadLetterNothing restarts two replicas
// one after the other ten times (SIGTERM, as a rolling deploy does) while a
// backlog of one dataset with max_concurrency 1 drains, with retries: 0. The
// messages a stop returns, and those deferred for want of a turn, spend no
// attempt: nothing is dead-lettered and every run loads once.
func TestRollingRestartsUnderABacklogDeadLetterNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{noRetries: true, inFlight: 4, orderFields: "    max_concurrency: 1\n"})
	// Every load takes a second while the replicas restart, so the restarts
	// meet a backlog however slow the machine; then 50 ms, to drain it.
	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (1000)")
	w.streams()
	var parts []string
	for d := 1; d <= 30; d++ {
		p := fmt.Sprintf("2026-11-%02d", d)
		parts = append(parts, p)
		w.publish(p, "a", nil)
		w.publish(p, "b", nil)
	}
	procs := []*proc{w.serve(), w.serve()}
	for i := range 10 {
		p := procs[i%2]
		p.signal(syscall.SIGTERM)
		require.Equal(t, 0, p.exit(t, 60*time.Second), p.output())
		procs[i%2] = w.serve()
	}
	require.Less(t, w.count("SELECT count(*) FROM idem.run_ledger"), int64(60), "the backlog outlived the restarts")
	w.db.Exec(t, "UPDATE staging.gate_on SET ms = 50")
	w.waitCount(60, "SELECT count(*) FROM idem.run_ledger")
	w.waitSettled()
	require.Empty(t, w.deadLetters(), "a restart dead-lettered a valid event")
	require.EqualValues(t, 60, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'"), "each run loaded once")
	require.EqualValues(t, 0, w.count(`SELECT count(*) FROM (SELECT 1 FROM idem.pipeline_audit WHERE status = 'success'
		GROUP BY partition_key, run_id HAVING count(*) > 1) d`))
	require.Equal(t, w.expected(parts...), w.target())
}

// TestServeStartedDuringAnOutageWaitsForTheWarehouse: a replica started (or
// restarted by a deploy) while PostgreSQL is down waits for it instead of
// exiting into a supervisor's growing restart delay, and loads as soon as it
// is back.
func TestServeStartedDuringAnOutageWaitsForTheWarehouse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := localpg.Start(ctx, localpg.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	w := newWorld(t, opts{pgAdmin: srv.URL("")})
	w.streams()
	w.publish("2026-11-09", "r1", nil)
	require.NoError(t, srv.Stop(ctx, "fast"))

	p := w.startServe("10s")
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "waiting for the server to start") }, 30*time.Second, 50*time.Millisecond)
	time.Sleep(3 * time.Second) // several attempts: the process must still be there
	require.True(t, p.alive(), "idem serve exited while the warehouse was down:\n%s", p.output())
	require.Equal(t, 1, strings.Count(p.output(), "waiting for the server to start"), "one line, not one per attempt")

	require.NoError(t, srv.Restart(ctx, ""))
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "idem serve started") }, 60*time.Second, 50*time.Millisecond)
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger")
	w.waitSettled()
	require.Empty(t, w.deadLetters())
}

// TestWarehouseDiskFullHoldsAndResumes: the target's tablespace fills up
// mid-load (53100, a real full file system); idem holds the event like any
// outage (no dead letter, no retry budget spent) and loads it once when
// there is room again.
func TestWarehouseDiskFullHoldsAndResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgUser, err := user.Lookup("postgres")
	require.NoError(t, err)
	// Its own directory under /tmp: the server's user must reach it.
	small, err := os.MkdirTemp("", "idem-small-fs-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(small) })
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700,uid="+pgUser.Uid, "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small file system here (%v: %s): the disk-full test needs root and mount", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", small).Run() })
	srv, err := localpg.Start(ctx, localpg.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	w := newWorld(t, opts{pgAdmin: srv.URL(""), extraYAML: `  big:
    strategy: delete_insert
    target: analytics.big
    partition_column: event_date
    source: SELECT g AS id, @partition::date AS event_date, repeat('x', 200) AS note FROM generate_series(1, 20000) g
`})
	w.db.Exec(t, "CREATE TABLESPACE small LOCATION '"+small+"'")
	w.db.Exec(t, "CREATE TABLE analytics.big (id int, event_date date NOT NULL, note text) TABLESPACE small")
	p := w.serve()
	_, err = w.js.Publish(ctx, "idem.ready.big", []byte(`{"dataset":"big","partition":"2026-11-03","run_id":"r1"}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "warehouse unavailable: circuit open") }, 30*time.Second, 50*time.Millisecond)
	require.Contains(t, p.output(), "53100")
	time.Sleep(3 * time.Second) // trials fail while the disk stays full
	require.Empty(t, w.deadLetters())
	require.Zero(t, w.count("SELECT count(*) FROM idem.run_ledger"))

	require.NoError(t, exec.Command("mount", "-o", "remount,size=64m", small).Run())
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger")
	w.waitSettled()
	require.EqualValues(t, 20000, w.count("SELECT count(*) FROM analytics.big"))
	require.Empty(t, w.deadLetters())
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE error_kind IN ('transient', 'fatal')"), "nothing counted against the budget")
	require.Positive(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE error_kind = 'unavailable'"))
}
