package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/localpg"
)

// siteCrashes is how many site crashes TestSiteCrashSparesTheCrashBudget
// runs: one more than a message's attempts (Retries + 1), so that a
// message whose every cut attempt counted would be dead-lettered.
const siteCrashes = Retries + 2

// TestSiteCrashSparesTheCrashBudget is site_crash's mechanism with loads
// that outlast the time between crashes: one replica (max_in_flight 1)
// takes eight events whose loads sleep 5 s; the events waiting for the
// slot load together as a group. Each time a group's attempts have been in
// flight for a second, the whole site (PostgreSQL, a nats-server with
// sync_interval: always, the replica) is SIGKILLed at once and brought back
// in a drawn order, siteCrashes times. Every attempt the crashes cut is
// left `started`; none may count toward the budget, so each event must
// then be loaded exactly once and none dead-lettered (as crashed).
func TestSiteCrashSparesTheCrashBudget(t *testing.T) {
	focused(t)
	if testing.Short() {
		t.Skip("starts PostgreSQL, nats-server and idem, and crashes them")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin, natsBin, wh := binary(t), natsServerBinary(t), pg(t)
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	require.NoError(t, os.MkdirAll(logs, 0o755))

	admin, err := pgx.Connect(ctx, wh.URL(""))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+dbName)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	db, err := pgxpool.New(ctx, wh.URL(dbName))
	require.NoError(t, err)
	defer db.Close()
	const parts = 8
	require.NoError(t, createSchema(ctx, db, parts, 0, rand.New(rand.NewPCG(1, 3))))
	// Every load sleeps 5 s in its transaction.
	_, err = db.Exec(ctx, `CREATE OR REPLACE FUNCTION staging.gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF current_setting('chaos.slept', true) IS DISTINCT FROM 'y' THEN
    PERFORM set_config('chaos.slept', 'y', true);
    PERFORM pg_sleep(5);
  END IF;
  RETURN true;
END $$`)
	require.NoError(t, err)

	ns := startNATSChild(t, natsBin, dir, logs)
	// One load at a time: the events published before the replica starts
	// wait for the slot, and the load that takes it takes the others of
	// the dataset along, as a group.
	o := Options{MaxInFlight: 1}.WithDefaults()
	cfg := filepath.Join(dir, "idem.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(configYAML(ns.url(), wh.URL(dbName), o)), 0o600))
	for _, args := range [][]string{{"migrate"}, {"streams"}} {
		out, err := exec.CommandContext(ctx, bin, append(args, "--config", cfg)...).CombinedOutput()
		require.NoError(t, err, "idem %s: %s", args[0], out)
	}
	nc, err := nats.Connect(ns.url(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	var runs []string
	for p := range parts {
		run := fmt.Sprintf("budget-%d", p)
		runs = append(runs, run)
		msg := nats.NewMsg("idem.ready.replace")
		msg.Data = validBody("replace", partitionKey(p), run)
		_, err := js.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	rep := newReplica(0, bin, cfg, logs, 1, 0)
	go rep.supervise()
	defer rep.stop(20 * time.Second)

	// inFlight counts the runs with an attempt started since the warehouse
	// last started: loads now in flight.
	inFlight := func() int {
		var n int
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if db.QueryRow(qctx, `SELECT count(DISTINCT run_id) FROM idem.pipeline_audit
			WHERE dag_id = $1 AND status = 'started' AND started_at >= pg_postmaster_start_time()`, pipeline).Scan(&n) != nil {
			return -1
		}
		return n
	}
	for crash := range siteCrashes {
		deadline := time.Now().Add(90 * time.Second)
		for inFlight() < 2 {
			if dls, err := readDeadLetters(ctx, js); err == nil && len(dls) > 0 {
				t.Fatalf("before site crash %d, %d valid events were dead-lettered, the first %s: %s: the attempts the crashes cut counted",
					crash+1, len(dls), dls[0].kind, dls[0].err)
			}
			require.True(t, time.Now().Before(deadline), "crash %d: the group's loads did not start again within 90 s; logs in %s", crash, logs)
			time.Sleep(200 * time.Millisecond)
		}
		// In flight since a moment: the load's first statements ran.
		time.Sleep(time.Second)
		rep.setHeld(true)
		var errs [2]error
		done := make(chan struct{})
		go func() { errs[0] = wh.Kill(); close(done) }()
		ns.kill()
		rep.kill()
		<-done
		require.NoError(t, errs[0])
		for _, s := range siteRestartOrder(int64(crash), 1, []string{"nats"}, false) {
			time.Sleep(s.delay)
			switch s.name {
			case "postgres":
				require.NoError(t, startAfterCrash(ctx, wh))
			case "nats":
				ns.start(t)
			default:
				rep.setHeld(false)
			}
		}
		t.Logf("site crash %d done", crash+1)
	}

	// Now every load may finish: each run loaded once, nothing dead-lettered.
	deadline := time.Now().Add(90 * time.Second)
	for {
		var loaded int
		err := db.QueryRow(ctx, `SELECT count(*) FROM idem.run_ledger WHERE dag_id = $1 AND task_id = 'replace'`, pipeline).Scan(&loaded)
		if err == nil && loaded == parts {
			break
		}
		dls, _ := readDeadLetters(ctx, js)
		require.Empty(t, dls, "a valid event was dead-lettered after %d site crashes; logs in %s", siteCrashes, logs)
		require.True(t, time.Now().Before(deadline), "%d of %d runs loaded 90 s after the last site crash; logs in %s", loaded, parts, logs)
		time.Sleep(250 * time.Millisecond)
	}
	rows, err := db.Query(ctx, `SELECT run_id, count(*) FILTER (WHERE status = 'started'), count(*) FILTER (WHERE status = 'success')
		FROM idem.pipeline_audit WHERE dag_id = $1 GROUP BY run_id ORDER BY run_id`, pipeline)
	require.NoError(t, err)
	defer rows.Close()
	n, most := 0, 0
	for rows.Next() {
		var run string
		var started, success int
		require.NoError(t, rows.Scan(&run, &started, &success))
		t.Logf("%s: %d attempts cut by site crashes, %d success", run, started, success)
		require.Equal(t, 1, success, run)
		most = max(most, started)
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, parts, n)
	require.GreaterOrEqual(t, most, siteCrashes, "no run had an attempt cut by every crash")
	dls, err := readDeadLetters(ctx, js)
	require.NoError(t, err)
	require.Empty(t, dls)
}

// natsChild is one nats-server child process with JetStream on file
// storage and sync_interval: always, as deploy/nats configures it, that a
// SIGKILL crashes.
type natsChild struct {
	bin, conf, logs string
	port            int
	cmd             *exec.Cmd
	done            chan struct{}
	n               int
}

func startNATSChild(t *testing.T, bin, dir, logs string) *natsChild {
	t.Helper()
	port, err := localpg.FreePort()
	require.NoError(t, err)
	ns := &natsChild{bin: bin, logs: logs, port: port, conf: filepath.Join(dir, "nats.conf")}
	require.NoError(t, os.WriteFile(ns.conf, fmt.Appendf(nil, `listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  sync_interval: always
}
`, port, filepath.Join(dir, "jetstream")), 0o600))
	ns.start(t)
	t.Cleanup(ns.kill)
	return ns
}

func (ns *natsChild) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", ns.port) }

// start runs the server and waits until it accepts connections.
func (ns *natsChild) start(t *testing.T) {
	t.Helper()
	ns.n++
	f, err := os.Create(filepath.Join(ns.logs, fmt.Sprintf("nats-%03d.log", ns.n)))
	require.NoError(t, err)
	defer f.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cmd := exec.Command(ns.bin, "-c", ns.conf)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, cmd.Start())
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		ns.cmd, ns.done = cmd, done
		for time.Now().Before(deadline) {
			if nc, err := nats.Connect(ns.url()); err == nil {
				nc.Close()
				return
			}
			select {
			case <-done: // lost the port to a reconnecting client: again
			case <-time.After(100 * time.Millisecond):
				continue
			}
			break
		}
		require.True(t, time.Now().Before(deadline), "nats-server did not start within 20 s")
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (ns *natsChild) kill() {
	if ns.cmd == nil {
		return
	}
	_ = ns.cmd.Process.Signal(syscall.SIGKILL)
	<-ns.done
	ns.cmd = nil
}
