// Package e2e runs the idem binary as a child process against a real NATS
// server (in this test process, so it outlives the children it serves) and a
// real PostgreSQL, and checks the delivery guarantees of docs/SPEC.md from
// the outside: what is in the tables, the audit, and the dead-letter stream.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/embeddednats"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/browsertest"
	"github.com/idem-data/idem/testkit/pgtest"
)

var idemBin string

func TestMain(m *testing.M) {
	// The suites wait on servers and clocks (Prometheus's scrapes and
	// rule periods, outages, ack waits) far more than they compute: run
	// six of them at once on any machine, unless -parallel
	// was given.
	pgtest.DefaultParallel(6)
	dir, err := os.MkdirTemp("", "idem-e2e-bin-")
	if err != nil {
		panic(err)
	}
	idemBin = filepath.Join(dir, "idem")
	// The test build has the crash hook (IDEM_TEST_CRASH); production builds do not.
	out, err := exec.Command("go", "build", "-tags", "idemtest", "-o", idemBin, "github.com/idem-data/idem/cmd/idem").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building idem: %v\n%s", err, out)
		os.Exit(1)
	}
	code := pgtest.Run(m)
	browsertest.Stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// stagingSQL: the tables of the orders dataset and the gate for slow loads.
const stagingSQL = stagingTablesSQL + pgtest.GateSQL

const stagingTablesSQL = `
CREATE SCHEMA staging; CREATE SCHEMA analytics;
CREATE TABLE staging.src (id bigint, event_date date, amount numeric(12,2), note text);
CREATE TABLE analytics.t (id bigint, event_date date NOT NULL, amount numeric(12,2), note text);
INSERT INTO staging.src
SELECT d * 1000 + i, date '2026-11-01' + d, i * 1.5, 'row ' || i
  FROM generate_series(0, 29) d, generate_series(1, 10) i;
`

// world is one test's NATS server, database and config.
type world struct {
	t   *testing.T
	ns  *embeddednats.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	db  *pgtest.DB
	cfg string
	dir string
}

type opts struct {
	ackWait   string
	retries   int
	timeout   string
	inFlight  int
	extraYAML string
	then      string // orders' then: list, e.g. "[b]"
	// noRetries sets orders' retries to 0 (retries 0 means the default 3).
	noRetries bool
	// orderFields are more YAML lines for orders, each "    key: value\n".
	orderFields string
	// pgAdmin is the admin URL of a cluster of the test's own (one it may
	// stop); the shared cluster when empty.
	pgAdmin string
	// unknownGrace sets nats.unknown_dataset_grace.
	unknownGrace string
	// serveURL, when set, rewrites the config's postgres.url: it is given the
	// database's URL and returns the one idem serve connects with.
	serveURL func(dbURL string) string
}

func newWorld(t *testing.T, o opts) *world {
	t.Helper()
	if o.ackWait == "" {
		o.ackWait = "2s"
	}
	if o.inFlight == 0 {
		o.inFlight = 4
	}
	if o.retries == 0 {
		o.retries = 3
	}
	dir := t.TempDir()
	ns, err := embeddednats.Start(embeddednats.Options{StoreDir: filepath.Join(dir, "js")})
	require.NoError(t, err)
	t.Cleanup(ns.Stop)
	nc, err := nats.Connect(ns.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	var db *pgtest.DB
	if o.pgAdmin != "" {
		db = audittest.NewDBAt(t, o.pgAdmin)
	} else {
		db = audittest.NewDB(t)
	}
	_, err = audit.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	db.Exec(t, stagingSQL)

	timeout := ""
	if o.timeout != "" {
		timeout = "\n    timeout: " + o.timeout
	}
	if o.then != "" {
		timeout += "\n    then: " + o.then
	}
	retries := fmt.Sprint(o.retries)
	if o.noRetries {
		retries = "0"
	}
	if o.orderFields != "" {
		timeout += "\n" + strings.TrimRight(o.orderFields, "\n")
	}
	natsExtra := ""
	if o.unknownGrace != "" {
		natsExtra = "\n  unknown_dataset_grace: " + o.unknownGrace
	}
	serveURL := db.URL
	if o.serveURL != nil {
		serveURL = o.serveURL(db.URL)
	}
	cfg := fmt.Sprintf(`pipeline: e2e
nats:
  url: %s
  ack_wait: %s
  max_in_flight: %d%s
postgres:
  url: %s
http:
  addr: 127.0.0.1:0
datasets:
  orders:
    strategy: delete_insert
    target: analytics.t
    partition_column: event_date
    source: SELECT id, event_date, amount, note FROM staging.src WHERE event_date = @partition AND staging.gate()
    retries: %s
    retry_delay: 300ms
    max_retry_delay: 1s%s
%s`, ns.URL(), o.ackWait, o.inFlight, natsExtra, serveURL, retries, timeout, o.extraYAML)
	path := filepath.Join(dir, "idem.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return &world{t: t, ns: ns, nc: nc, js: js, db: db, cfg: path, dir: dir}
}

// streams creates the streams and the consumer, as `idem streams` does for an
// operator before any publisher starts.
func (w *world) streams() {
	w.t.Helper()
	out, err := exec.Command(idemBin, "streams", "--config", w.cfg).CombinedOutput()
	require.NoError(w.t, err, "%s", out)
}

// proc is one `idem serve` child process.
type proc struct {
	cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   *sync.Mutex
	done chan error
}

type syncBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (s syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (w *world) serve(env ...string) *proc { return w.serveGrace("10s", env...) }

// startServe starts `idem serve` without waiting for it to be ready.
func (w *world) startServe(grace string, env ...string) *proc {
	w.t.Helper()
	cmd := exec.Command(idemBin, "serve", "--config", w.cfg, "--grace", grace)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan error, 1)}
	cmd.Stdout = syncBuf{p.mu, p.log}
	cmd.Stderr = syncBuf{p.mu, p.log}
	require.NoError(w.t, cmd.Start())
	go func() { p.done <- cmd.Wait() }()
	w.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if w.t.Failed() {
			w.t.Logf("idem serve (pid %d) output:\n%s", cmd.Process.Pid, p.output())
		}
	})
	return p
}

func (w *world) serveGrace(grace string, env ...string) *proc {
	w.t.Helper()
	p := w.startServe(grace, env...)
	// Ready once the consumer exists and the process says so.
	require.Eventually(w.t, func() bool { return strings.Contains(p.output(), "idem serve started") }, 30*time.Second, 20*time.Millisecond,
		"idem serve did not start:\n%s", p.output())
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// httpAddr is where the process serves /metrics, from its start-up log line.
func (p *proc) httpAddr() string { return p.startField("http") }

// startField is a string field of the first log line that has it (the
// start-up line's http, config_version, replica).
func (p *proc) startField(key string) string {
	out := p.output()
	i := strings.Index(out, `"`+key+`":"`)
	if i < 0 {
		return ""
	}
	rest := out[i+len(key)+4:]
	return rest[:strings.Index(rest, `"`)]
}

func (p *proc) signal(s syscall.Signal) { _ = p.cmd.Process.Signal(s) }

// exit waits for the process to end and returns its exit code.
func (p *proc) exit(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(within):
		t.Fatalf("idem serve did not exit within %s:\n%s", within, p.output())
		return -1
	}
}

// publish sends an event through JetStream and returns its stream sequence.
func (w *world) publish(partition, runID string, hdr nats.Header) uint64 {
	w.t.Helper()
	body := fmt.Sprintf(`{"dataset":"orders","partition":%q,"run_id":%q}`, partition, runID)
	msg := &nats.Msg{Subject: "idem.ready.orders", Data: []byte(body), Header: hdr}
	ack, err := w.js.PublishMsg(context.Background(), msg)
	require.NoError(w.t, err)
	return ack.Sequence
}

func (w *world) count(sql string, args ...any) int64 { return w.db.Int(w.t, sql, args...) }

func (w *world) waitCount(want int64, sql string, args ...any) {
	w.t.Helper()
	var got int64
	require.Eventually(w.t, func() bool {
		got = w.count(sql, args...)
		return got == want
	}, 60*time.Second, 50*time.Millisecond, "want %d from %s", want, sql)
}

// deadLetters returns every message of the dead-letter stream.
func (w *world) deadLetters() []*jetstream.RawStreamMsg {
	w.t.Helper()
	ctx := context.Background()
	s, err := w.js.Stream(ctx, "IDEM_DLQ")
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx)
	require.NoError(w.t, err)
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err == nil {
			out = append(out, m)
		}
	}
	return out
}

func (w *world) waitDeadLetters(n int) []*jetstream.RawStreamMsg {
	w.t.Helper()
	var dl []*jetstream.RawStreamMsg
	require.Eventually(w.t, func() bool { dl = w.deadLetters(); return len(dl) >= n }, 60*time.Second, 50*time.Millisecond,
		"want %d dead letters", n)
	return dl
}

// pending is the events consumer's count of messages not yet settled.
func (w *world) pending() (int, uint64) {
	info, err := w.js.Consumer(context.Background(), "IDEM_EVENTS", "idem")
	require.NoError(w.t, err)
	ci, err := info.Info(context.Background())
	require.NoError(w.t, err)
	return ci.NumAckPending, ci.NumPending
}

func (w *world) waitSettled() {
	w.t.Helper()
	require.Eventually(w.t, func() bool { a, p := w.pending(); return a == 0 && p == 0 }, 60*time.Second, 50*time.Millisecond,
		"messages still pending")
}

func (w *world) expected(partitions ...string) string {
	return w.db.Checksum(w.t, "SELECT id, event_date, amount, note FROM staging.src WHERE event_date IN ('"+strings.Join(partitions, "','")+"')")
}

func (w *world) target() string {
	return w.db.Checksum(w.t, "SELECT id, event_date, amount, note FROM analytics.t")
}

// waitSleeping waits until a load sits in staging.gate()'s sleep and returns its backend pid.
func (w *world) waitSleeping() int64 {
	w.t.Helper()
	var pid int64
	require.Eventually(w.t, func() bool {
		err := w.db.Pool.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'PgSleep' LIMIT 1`).Scan(&pid)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "no load is sleeping in the gate")
	return pid
}
