package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/embeddednats"
)

// natsOutage is how long NATS stays down: the promise is "60 s or more".
const natsOutage = 60 * time.Second

// TestNATSOutageDuringLoadsLosesNothingAndDoublesNothing stops NATS for 60 s
// while loads run, lets those loads commit while it is away (so serve cannot
// get their acks confirmed), and brings it back on the same port with the
// same JetStream store. The one `idem serve` must stay up, reconnect and
// resume; nothing committed while NATS was away may load again, and events
// published afterwards must load: 0 lost, 0 doubled.
//
// nats.go keeps what a client publishes while disconnected (the acks among
// it) and sends it on reconnect, so the restarted server usually gets the
// late acks before its ack wait runs out and redelivers nothing. The test
// therefore also publishes those events again after the restart, as a
// publisher unsure of its confirmation would: the run ledger written while
// NATS was away must skip them. A redelivery by JetStream, if there is one,
// must be skipped in the same way.
func TestNATSOutageDuringLoadsLosesNothingAndDoublesNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, opts{ackWait: "5s", inFlight: 8})
	w.movePort()
	gate := w.holdLockGate()
	p := w.serve()
	base := "http://" + p.httpAddr()

	// Four loads in progress, held inside their transactions, with free
	// slots left so the fetch loop keeps pulling through the outage.
	away := natsRuns("away", 1, 4)
	for i := range away {
		away[i].seq = w.publish(away[i].partition, away[i].runID, nil)
	}
	w.waitCount(int64(len(away)), lockGateWaiters)

	w.ns.Stop()
	down := time.Now()
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "nats: disconnected") }, 10*time.Second, 20*time.Millisecond,
		"idem serve did not notice NATS going away")

	// The loads commit while NATS is away; serve cannot get their acks confirmed.
	gate.release()
	w.waitCount(int64(len(away)), "SELECT count(*) FROM idem.run_ledger")
	code, _ := get(t, base+"/healthz")
	require.Equal(t, 200, code, "idem serve is not alive while NATS is away")
	code, body := get(t, base+"/readyz")
	require.Equal(t, 503, code, "idem serve says it is ready while NATS is away: %s", body)
	require.Less(t, time.Since(down), natsOutage, "the loads did not commit within the outage")

	// The rest of the outage: serve must not exit meanwhile.
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("idem serve exited while NATS was away (%v):\n%s", err, p.output())
	case <-time.After(time.Until(down.Add(natsOutage))):
	}
	w.restartNATS()
	// Usually still unsettled here: serve reconnects a moment later.
	pendingAtRestart, _ := w.pending()
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "nats: reconnected") }, 30*time.Second, 20*time.Millisecond,
		"idem serve did not reconnect")

	after := natsRuns("after", 5, 8)
	for i := range after {
		after[i].seq = w.publish(after[i].partition, after[i].runID, nil)
	}
	for _, e := range away {
		w.publish(e.partition, e.runID, nil)
	}
	all := append(away, after...)
	w.waitCount(int64(len(all)), "SELECT count(*) FROM idem.run_ledger")
	w.waitCount(int64(len(away)), "SELECT count(DISTINCT run_id) FROM idem.pipeline_audit WHERE status = 'skipped'")
	w.waitSettled()

	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("idem serve exited (%v):\n%s", err, p.output())
	default:
	}
	require.Eventually(t, func() bool { c, _ := get(t, base+"/readyz"); return c == 200 }, 10*time.Second, 50*time.Millisecond,
		"idem serve is not ready again after NATS came back")
	var parts []string
	for _, e := range all {
		parts = append(parts, e.partition)
		require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.run_ledger WHERE run_id = $1 AND partition_key = $2 AND loads = 1", e.runID, e.partition),
			"run %s: not exactly one ledger entry", e.runID)
		require.EqualValues(t, 1, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = $1 AND status = 'success'", e.runID),
			"run %s: not exactly one successful load", e.runID)
		require.EqualValues(t, 10, w.count("SELECT count(*) FROM analytics.t WHERE event_date = $1::date", e.partition),
			"partition %s: lost or doubled rows", e.partition)
	}
	for _, e := range after {
		require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = $1 AND status = 'skipped'", e.runID),
			"run %s was delivered twice", e.runID)
	}
	require.Zero(t, w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status NOT IN ('success', 'skipped')"),
		"an attempt failed or never finished")
	require.Equal(t, w.expected(parts...), w.target())
	require.Empty(t, w.deadLetters())

	redelivered := 0
	for _, e := range away {
		redelivered += int(w.count("SELECT count(*) FROM idem.pipeline_audit WHERE run_id = $1 AND status = 'skipped' AND stream_seq = $2", e.runID, e.seq))
	}
	t.Logf("NATS down %s; %d loads committed while it was away (%d acks not confirmed); %d unsettled when NATS came back; "+
		"JetStream redelivered %d of them (skipped), late acks settled the rest",
		natsOutage, len(away), strings.Count(p.output(), "ack not confirmed"), pendingAtRestart, redelivered)
}

type natsRun struct {
	partition, runID string
	seq              uint64 // stream sequence of its first publication
}

// natsRuns names one event per day of November 2026, from..to.
func natsRuns(prefix string, from, to int) []natsRun {
	var out []natsRun
	for d := from; d <= to; d++ {
		out = append(out, natsRun{partition: fmt.Sprintf("2026-11-%02d", d), runID: fmt.Sprintf("%s-%d", prefix, d)})
	}
	return out
}

// movePort restarts the world's fresh NATS server (nothing stored yet) on a
// port below the kernel's ephemeral range and points the config at it: while
// NATS is down, no socket of a parallel test can take its port, which is
// where it must come back.
func (w *world) movePort() {
	w.t.Helper()
	old := w.ns.URL()
	w.ns.Stop()
	w.nc.Close()
	port := freeFixedPort(w.t)
	ns, err := embeddednats.Start(embeddednats.Options{Port: port, StoreDir: filepath.Join(w.dir, "js")})
	require.NoError(w.t, err)
	w.t.Cleanup(func() { w.ns.Stop() })
	w.ns = ns
	cfg, err := os.ReadFile(w.cfg)
	require.NoError(w.t, err)
	require.Contains(w.t, string(cfg), old)
	require.NoError(w.t, os.WriteFile(w.cfg, []byte(strings.ReplaceAll(string(cfg), old, ns.URL())), 0o600))
	w.dialNATS()
}

// restartNATS brings NATS back on the same port with the same JetStream
// store, as a restarted broker would.
func (w *world) restartNATS() {
	w.t.Helper()
	u, err := net.ResolveTCPAddr("tcp", strings.TrimPrefix(w.ns.URL(), "nats://"))
	require.NoError(w.t, err)
	ns, err := embeddednats.Start(embeddednats.Options{Port: u.Port, StoreDir: filepath.Join(w.dir, "js")})
	require.NoError(w.t, err, "NATS could not come back on port %d", u.Port)
	w.ns = ns
	w.nc.Close()
	w.dialNATS()
}

func (w *world) dialNATS() {
	w.t.Helper()
	nc, err := nats.Connect(w.ns.URL())
	require.NoError(w.t, err)
	w.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(w.t, err)
	w.nc, w.js = nc, js
}

// freeFixedPort is a free 127.0.0.1 port below the ephemeral range, which
// the kernel never hands out for port 0 or an outgoing connection.
func freeFixedPort(t *testing.T) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 100 {
		port := 10000 + rand.IntN(low-10000)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			require.NoError(t, ln.Close())
			return port
		}
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

// lockGateWaiters counts loads blocked on the lock gate.
const lockGateWaiters = `SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND NOT granted AND classid = 4242 AND objid = 1 AND objsubid = 2
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// lockGate holds every load inside its transaction until released, unlike
// pgtest.GateSQL's timed sleep: the test decides the moment they commit.
type lockGate struct {
	t    *testing.T
	conn *pgxpool.Conn
}

// holdLockGate replaces staging.gate() with one that waits for a shared
// advisory lock, and takes that lock exclusively.
func (w *world) holdLockGate() *lockGate {
	w.t.Helper()
	w.db.Exec(w.t, `CREATE OR REPLACE FUNCTION staging.gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(4242, 1);
  RETURN true;
END $$`)
	ctx := context.Background()
	conn, err := w.db.Pool.Acquire(ctx)
	require.NoError(w.t, err)
	w.t.Cleanup(conn.Release)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock(4242, 1)")
	require.NoError(w.t, err)
	return &lockGate{t: w.t, conn: conn}
}

func (g *lockGate) release() {
	g.t.Helper()
	var ok bool
	require.NoError(g.t, g.conn.QueryRow(context.Background(), "SELECT pg_advisory_unlock(4242, 1)").Scan(&ok))
	require.True(g.t, ok, "the gate was not held")
}
