package e2e

// Security against real servers: `idem serve` authenticating to nats-server
// with each method idem supports (user/password under the least-privilege
// permissions of deploy/nats, token, nkey, creds, mutual TLS), and refusing to
// run, with a clear message, when the secret is wrong; a waiting publisher
// under the publisher's permissions of deploy/nats.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/embeddednats"
	"github.com/idem-data/idem/testkit/audittest"
	"github.com/idem-data/idem/testkit/pgtest"
)

// repoPath is rel from the repository root (tests run in e2e).
func repoPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", rel))
	require.NoError(t, err)
	return p
}

// writeFile writes data to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
	return p
}

// startNATSConf starts an in-process nats-server from a config file body.
func startNATSConf(t *testing.T, dir, conf string) *embeddednats.Server {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o700))
	path := writeFile(t, dir, "nats-server.conf", conf)
	ns, err := embeddednats.Start(embeddednats.Options{StoreDir: filepath.Join(dir, "js"), Config: path})
	require.NoError(t, err)
	t.Cleanup(ns.Stop)
	return ns
}

// deployNATSConf is deploy/nats/nats-server.conf and its permissions.conf,
// copied into dir with the passwords it reads from the environment written
// in, and without the fixed monitoring port (the test server picks its own
// client port and store).
func deployNATSConf(t *testing.T, dir string, passwords map[string]string) string {
	t.Helper()
	perms, err := os.ReadFile(repoPath(t, "deploy/nats/permissions.conf"))
	require.NoError(t, err)
	writeFile(t, dir, "permissions.conf", string(perms))
	conf, err := os.ReadFile(repoPath(t, "deploy/nats/nats-server.conf"))
	require.NoError(t, err)
	s := string(conf)
	for name, pw := range passwords {
		require.Contains(t, s, "$"+name)
		s = strings.ReplaceAll(s, "$"+name, strconv.Quote(pw))
	}
	return regexp.MustCompile(`(?m)^http:.*$`).ReplaceAllString(s, "")
}

// idemYAML is the harness's config (dataset orders on analytics.t) with
// natsExtra added to its nats: block.
func idemYAML(natsURL, natsExtra, pgURL, extraYAML string) string {
	return fmt.Sprintf(`pipeline: e2e
nats:
  url: %s
  ack_wait: 2s
  max_in_flight: 4
%spostgres:
  url: %s
http:
  addr: 127.0.0.1:0
datasets:
  orders:
    strategy: delete_insert
    target: analytics.t
    partition_column: event_date
    source: SELECT id, event_date, amount, note FROM staging.src WHERE event_date = @partition AND staging.gate()
    retries: 2
    retry_delay: 300ms
    max_retry_delay: 1s
%s`, natsURL, natsExtra, pgURL, extraYAML)
}

// securedWorld is a world on a NATS server that requires authentication:
// the test connects with adminOpts, idem with the nats: lines natsExtra. db
// nil means a new database of the shared cluster, set up as newWorld does;
// pgURL "" means db.URL.
func securedWorld(t *testing.T, ns *embeddednats.Server, adminOpts []nats.Option, natsExtra string, db *pgtest.DB, pgURL string) *world {
	t.Helper()
	nc, err := nats.Connect(ns.URL(), adminOpts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	if db == nil {
		db = audittest.NewDB(t)
		_, err = audit.Migrate(context.Background(), db.Pool)
		require.NoError(t, err)
		db.Exec(t, stagingSQL)
	}
	if pgURL == "" {
		pgURL = db.URL
	}
	dir := t.TempDir()
	path := writeFile(t, dir, "idem.yaml", idemYAML(ns.URL(), natsExtra, pgURL, ""))
	return &world{t: t, ns: ns, nc: nc, js: js, db: db, cfg: path, dir: dir}
}

// runIdem runs one idem command to its end and returns its exit code and
// everything it wrote to stdout and stderr.
func runIdem(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemBin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err, "idem %v:\n%s", args, out)
	return 0, string(out)
}

// loadsOnce publishes one event through the test's connection, waits for
// idem to load it, then stops idem with SIGTERM and expects exit code 0.
func (w *world) loadsOnce(p *proc, partition string) {
	w.t.Helper()
	w.publish(partition, "r-"+partition, nil)
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success' AND partition_key = $1", partition)
	w.waitSettled()
	p.signal(syscall.SIGTERM)
	require.Equal(w.t, 0, p.exit(w.t, 30*time.Second), p.output())
	require.NotRegexp(w.t, `(?i)permissions violation|panic`, p.output())
}

// deployedWorld is a world whose NATS server runs deploy/nats's config,
// the test's own connection as its admin, and the users' passwords.
func deployedWorld(t *testing.T) (*world, map[string]string) {
	t.Helper()
	pw := map[string]string{
		"IDEM_SERVE_PASSWORD": "serve-pw-5b1e", "IDEM_PUBLISH_PASSWORD": "publish-pw-77c0",
		"IDEM_ADMIN_PASSWORD": "admin-pw-0d9a", "NATS_SYS_PASSWORD": "sys-pw-e41f",
	}
	dir := t.TempDir()
	ns := startNATSConf(t, dir, deployNATSConf(t, dir, pw))
	return securedWorld(t, ns, []nats.Option{nats.UserInfo("admin", pw["IDEM_ADMIN_PASSWORD"])}, "", nil, ""), pw
}

func TestNATSDeployConfigLeastPrivilege(t *testing.T) {
	t.Parallel()
	w, pw := deployedWorld(t)
	as := func(user, pass string) []string {
		return []string{"IDEM_NATS_USER=" + user, "IDEM_NATS_PASSWORD=" + pass}
	}
	serveEnv := as("idem", pw["IDEM_SERVE_PASSWORD"])

	// The service's user may not create streams: on a fresh server it stops
	// at the first stream, saying so.
	code, out := runIdem(t, serveEnv, "serve", "--config", w.cfg)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "create stream IDEM_EVENTS")
	names := w.js.StreamNames(t.Context())
	for range names.Name() {
		t.Fatal("idem's user created a stream")
	}

	// An operator creates them; then the service runs under its own user.
	code, out = runIdem(t, as("admin", pw["IDEM_ADMIN_PASSWORD"]), "streams", "--config", w.cfg)
	require.Equal(t, 0, code, out)

	// A wrong password fails at once and says why.
	code, out = runIdem(t, as("idem", "not-the-password"), "serve", "--config", w.cfg)
	require.Equal(t, 1, code, out)
	require.Contains(t, strings.ToLower(out), "authorization violation")
	require.NotContains(t, out, "not-the-password")

	// Under IDEM_SERVE_PERMISSIONS: a load, a fatal dead letter, and a
	// message that crashes every process that takes it, dead-lettered as
	// crashed once its attempts are spent.
	crash := append(serveEnv, "IDEM_TEST_CRASH=before_load:poison")
	// The publisher's user publishes through `idem publish`.
	pub := func(partition, runID string) {
		t.Helper()
		code, out := runIdem(t, as("publisher", pw["IDEM_PUBLISH_PASSWORD"]), "publish", "--config", w.cfg, "orders", partition, "--run-id", runID)
		require.Equal(t, 0, code, out)
	}
	pub("2026-11-02", "r1")
	pub("2030-01-01", "empty")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := make(chan string, 100)
	go func() { // a supervisor, as Kubernetes would be
		for ctx.Err() == nil {
			p := w.serve(crash...)
			select {
			case <-p.done:
				p.done <- nil
			case <-ctx.Done():
				p.signal(syscall.SIGTERM)
				p.exit(t, 30*time.Second)
			}
			logs <- p.output()
		}
		close(logs)
	}()
	w.waitCount(1, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success' AND run_id = 'r1'")
	w.waitDeadLetters(1)
	// Alone in flight, so the crashes it causes cost no other message a delivery.
	pub("2026-11-03", "poison")
	dl := w.waitDeadLetters(2)
	w.waitSettled()
	cancel()
	var all strings.Builder
	for l := range logs {
		all.WriteString(l)
	}
	kinds := map[string]string{}
	for _, m := range dl {
		kinds[m.Header.Get(deadletter.HeaderRunID)] = m.Header.Get(deadletter.HeaderErrorKind)
	}
	require.Equal(t, map[string]string{"empty": "fatal", "poison": "crashed"}, kinds)
	require.NotRegexp(t, `(?i)permissions violation`, all.String())
	require.Equal(t, w.expected("2026-11-02"), w.target())

	// The status page and the observer read what they show under the same
	// user: the dead letters, their count per dataset, the live replicas.
	p := w.serve(append([]string{"IDEM_LOG_LEVEL=debug"}, serveEnv...)...)
	base := "http://" + p.httpAddr()
	require.Eventually(t, func() bool {
		return strings.Contains(httpGet(t, base+"/metrics"), `idem_dead_letters_pending{dataset="orders"} 2`)
	}, 30*time.Second, 100*time.Millisecond)
	page := httpGet(t, base+"/dead-letters")
	require.Contains(t, page, "poison")
	require.Contains(t, page, "Dead letters (2)")
	// The observer lists the replicas once the consumer has written its
	// fleet entry; crashed replicas stay listed until theirs expire (30 s).
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`[1-9]\d* replicas? · `).MatchString(httpGet(t, base+"/"))
	}, 30*time.Second, 200*time.Millisecond)
	require.Contains(t, httpGet(t, base+"/"), `<td class="dead_lettered" data-i="1">`, "11-03, crashed")
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second), p.output())
	require.NotRegexp(t, `(?i)permissions violation|observer: not read`, p.output())
}

// serverViolations collects the permission violations a nats-server logs,
// whichever client caused them (a one-shot idem command logs none itself).
type serverViolations struct {
	mu    sync.Mutex
	lines []string
}

func (v *serverViolations) Errorf(format string, a ...any) {
	if s := fmt.Sprintf(format, a...); strings.Contains(s, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, s)
		v.mu.Unlock()
	}
}
func (v *serverViolations) Noticef(string, ...any) {}
func (v *serverViolations) Warnf(string, ...any)   {}
func (v *serverViolations) Fatalf(string, ...any)  {}
func (v *serverViolations) Debugf(string, ...any)  {}
func (v *serverViolations) Tracef(string, ...any)  {}

// take returns the violations logged since the last take.
func (v *serverViolations) take() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := v.lines
	v.lines = nil
	return out
}

// waitRun is one idem command's exit code, stdout's last line decoded
// (nil when stdout is empty), and stderr.
type waitRun struct {
	code   int
	last   map[string]any
	stderr string
}

// runIdemWaiting runs one idem command with env added and its stdout and
// stderr apart.
func runIdemWaiting(t *testing.T, env []string, args ...string) waitRun {
	t.Helper()
	return startIdemWaiting(t, env, args...)()
}

// startIdemWaiting starts what runIdemWaiting runs and returns the wait
// for its end, to be called on the test's goroutine.
func startIdemWaiting(t *testing.T, env []string, args ...string) func() waitRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	cmd := exec.CommandContext(ctx, idemBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		require.NoError(t, err)
	}
	return func() waitRun {
		t.Helper()
		defer cancel()
		err := cmd.Wait()
		require.NoError(t, ctx.Err(), "idem %v did not exit:\n%s", args, stderr.String())
		r := waitRun{stderr: stderr.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
		if last := lines[len(lines)-1]; strings.HasPrefix(last, "{") {
			require.NoError(t, json.Unmarshal([]byte(last), &r.last), "stdout: %s\nstderr: %s", stdout.String(), r.stderr)
		}
		return r
	}
}

// consumerNames are the consumers on stream.
func consumerNames(t *testing.T, js jetstream.JetStream, stream string) []string {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	require.NoError(t, err)
	names := s.ConsumerNames(t.Context())
	var out []string
	for n := range names.Name() {
		out = append(out, n)
	}
	require.NoError(t, names.Err())
	return out
}

// eventsLastSeq is the events stream's last sequence.
func eventsLastSeq(t *testing.T, w *world) uint64 {
	t.Helper()
	s, err := w.js.Stream(t.Context(), "IDEM_EVENTS")
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	return info.State.LastSeq
}

// TestNATSDeployConfigReverifies: a warehouse that is not the one last
// verified (a failover) holds the loads until a re-verification pass has
// read the recent events and loaded again the ones it lost; under
// IDEM_SERVE_PERMISSIONS that pass must be able to read the events stream,
// or the loads wait for ever.
func TestNATSDeployConfigReverifies(t *testing.T) {
	t.Parallel()
	w, pw := deployedWorld(t)
	code, out := runIdem(t, []string{"IDEM_NATS_USER=admin", "IDEM_NATS_PASSWORD=" + pw["IDEM_ADMIN_PASSWORD"]}, "streams", "--config", w.cfg)
	require.Equal(t, 0, code, out)
	serveEnv := []string{"IDEM_NATS_USER=idem", "IDEM_NATS_PASSWORD=" + pw["IDEM_SERVE_PASSWORD"]}

	w.loadsOnce(w.serve(serveEnv...), "2026-11-02")
	// What a failover to a standby that missed the last commit leaves: a
	// new timeline, and no trace of the load the consumer acknowledged.
	w.db.Exec(t, `UPDATE idem.warehouse_identity SET timeline = timeline + 1;
	              DELETE FROM idem.outbox; DELETE FROM idem.run_ledger; DELETE FROM idem.pipeline_audit;
	              DELETE FROM analytics.t`)
	p := w.serve(serveEnv...)
	w.waitCount(1, "SELECT count(*) FROM idem.run_ledger WHERE run_id = 'r-2026-11-02'")
	require.Eventually(t, func() bool { return strings.Contains(p.output(), "warehouse verified: loads resume") }, 30*time.Second, 100*time.Millisecond)
	w.loadsOnce(p, "2026-11-03")
	require.Equal(t, w.expected("2026-11-02", "2026-11-03"), w.target(), "the lost load is back, and the next one loaded")
	require.Contains(t, p.output(), `"reloaded":1`)
	require.NotRegexp(t, `(?i)permissions violation|re-verification did not finish`, p.output())
}

// TestNATSDeployConfigWaitingPublisher: under IDEM_PUBLISH_PERMISSIONS a
// scheduler follows its events to their outcome (`idem publish --wait`,
// loaded and dead-lettered, and `idem backfill --wait`) with no violation on
// the server, even when its readers are deleted under it or the events
// stream serves direct gets, while `idem serve` publishes the results under
// IDEM_SERVE_PERMISSIONS. A publisher allowed only to publish events, as
// is enough without --wait, is told before anything is published.
func TestNATSDeployConfigWaitingPublisher(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pw := map[string]string{
		"IDEM_SERVE_PASSWORD": "serve-pw-91d4", "IDEM_PUBLISH_PASSWORD": "publish-pw-3e07",
		"IDEM_ADMIN_PASSWORD": "admin-pw-c25b", "NATS_SYS_PASSWORD": "sys-pw-6fa8",
	}
	conf := deployNATSConf(t, dir, pw)
	// A user of this test only, with the publisher's rights before --wait.
	const publisher = "permissions: $IDEM_PUBLISH_PERMISSIONS }"
	require.Contains(t, conf, publisher)
	conf = strings.Replace(conf, publisher, publisher+`
      { user: plain, password: "plain-pw-58b2", permissions: { publish = { allow = ["idem.ready.>"] }, subscribe = { allow = ["_INBOX.>"] } } }`, 1)
	ns := startNATSConf(t, dir, conf)
	violations := &serverViolations{}
	ns.SetLogger(violations, false, false)
	w := securedWorld(t, ns, []nats.Option{nats.UserInfo("admin", pw["IDEM_ADMIN_PASSWORD"])}, "", nil, "")
	as := func(user, pass string) []string {
		return []string{"IDEM_NATS_USER=" + user, "IDEM_NATS_PASSWORD=" + pass}
	}
	code, out := runIdem(t, as("admin", pw["IDEM_ADMIN_PASSWORD"]), "streams", "--config", w.cfg)
	require.Equal(t, 0, code, out)
	p := w.serve(as("idem", pw["IDEM_SERVE_PASSWORD"])...)
	waiter := as("publisher", pw["IDEM_PUBLISH_PASSWORD"])
	startWait := func(env []string, partition, runID string) func() waitRun {
		t.Helper()
		return startIdemWaiting(t, env, "publish", "--config", w.cfg, "orders", partition, "--run-id", runID, "--wait", "--timeout", "60s")
	}
	wait := func(env []string, partition, runID string) waitRun {
		t.Helper()
		return startWait(env, partition, runID)()
	}

	// A load longer than the 10 s between progress lines, which read where
	// the durable consumer is. Meanwhile the waiter's ordered consumers are
	// deleted under it: it replaces them (deleting the old one, as after any
	// gap) and still gets its result.
	w.db.Exec(t, "INSERT INTO staging.gate_on VALUES (12000)")
	done := startWait(waiter, "2026-11-04", "w1")
	var followers []string
	require.Eventually(t, func() bool {
		followers = append(consumerNames(t, w.js, "IDEM_RESULTS"), consumerNames(t, w.js, "IDEM_DLQ")...)
		return len(followers) == 2
	}, 10*time.Second, 50*time.Millisecond, "the waiter follows the results and the dead letters")
	for _, stream := range []string{"IDEM_RESULTS", "IDEM_DLQ"} {
		for _, name := range consumerNames(t, w.js, stream) {
			require.NoError(t, w.js.DeleteConsumer(t.Context(), stream, name))
		}
	}
	r := done()
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "loaded", r.last["status"], r.stderr)
	require.Contains(t, r.stderr, "delivered: loading", "the progress line read the consumer")
	w.db.Exec(t, "DELETE FROM staging.gate_on")
	require.Empty(t, violations.take())

	// A dead letter's result, published by idem serve, read by the waiter.
	r = wait(waiter, "2030-01-01", "w-empty")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "dead_lettered", r.last["status"], r.stderr)

	r = runIdemWaiting(t, waiter, "backfill", "--config", w.cfg, "orders", "--from", "2026-11-05", "--to", "2026-11-06", "--wait", "--timeout", "60s")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stderr, "cannot follow")
	require.NotContains(t, r.stderr, "could not be followed")
	require.Equal(t, int64(2), w.count("SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success' AND partition_key IN ('2026-11-05', '2026-11-06')"))
	require.Empty(t, violations.take(), "IDEM_PUBLISH_PERMISSIONS are all a waiting publisher uses")

	// With direct gets allowed on the events stream, the client reads the
	// event's time through them.
	events, err := w.js.Stream(t.Context(), "IDEM_EVENTS")
	require.NoError(t, err)
	sc := events.CachedInfo().Config
	sc.AllowDirect = true
	_, err = w.js.UpdateStream(t.Context(), sc)
	require.NoError(t, err)
	r = wait(waiter, "2026-11-08", "w-direct")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "loaded", r.last["status"], r.stderr)
	require.Empty(t, violations.take())

	// Without the right to read the results stream the wait exits 4 naming
	// it, and the event is not sent: nobody could follow it.
	before := eventsLastSeq(t, w)
	r = wait(as("plain", "plain-pw-58b2"), "2026-11-07", "w-plain")
	require.Equal(t, 4, r.code, r.stderr)
	require.Contains(t, r.stderr, "results stream IDEM_RESULTS")
	require.Equal(t, before, eventsLastSeq(t, w), "nothing published")
	require.Contains(t, strings.Join(violations.take(), "\n"), "$JS.API.STREAM.INFO.IDEM_RESULTS")

	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second), p.output())
	require.NotRegexp(t, `(?i)permissions violation`, p.output())
}

// httpGet returns the body of a 200 answer.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, b)
	return string(b)
}

func TestNATSToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const token = "tok-3f9d1c77"
	ns := startNATSConf(t, dir, `authorization { token: "`+token+`" }`)
	writeFile(t, dir, "token", token+"\n")
	w := securedWorld(t, ns, []nats.Option{nats.Token(token)}, "  token_file: "+filepath.Join(dir, "token")+"\n", nil, "")
	w.loadsOnce(w.serve(), "2026-11-02")

	code, out := runIdem(t, []string{"IDEM_NATS_TOKEN=tok-wrong"}, "serve", "--config", writeFile(t, dir, "wrong.yaml",
		idemYAML(ns.URL(), "", w.db.URL, "")))
	require.Equal(t, 1, code, out)
	require.Contains(t, strings.ToLower(out), "authorization violation")
	require.NotContains(t, out, "tok-")
}

func TestNATSNKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := user.PublicKey()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	ns := startNATSConf(t, dir, `authorization { users = [ { nkey: "`+pub+`" } ] }`)
	seedFile := writeFile(t, dir, "idem.nk", string(seed))
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	require.NoError(t, err)
	w := securedWorld(t, ns, []nats.Option{opt}, "  nkey: "+seedFile+"\n", nil, "")
	w.loadsOnce(w.serve(), "2026-11-02")

	other, err := nkeys.CreateUser()
	require.NoError(t, err)
	otherSeed, err := other.Seed()
	require.NoError(t, err)
	code, out := runIdem(t, []string{"IDEM_NATS_NKEY=" + writeFile(t, dir, "other.nk", string(otherSeed))}, "serve", "--config", w.cfg)
	require.Equal(t, 1, code, out)
	require.Contains(t, strings.ToLower(out), "authorization violation")
	require.NotContains(t, out, string(seed))
	require.NotContains(t, out, string(otherSeed))
}

// operatorMode is a nats-server config in operator mode (JWTs in memory)
// with one JetStream account, and a creds file for a user of that account.
func operatorMode(t *testing.T, dir string) (conf, creds string) {
	t.Helper()
	kp := func(f func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string) {
		k, err := f()
		require.NoError(t, err)
		pub, err := k.PublicKey()
		require.NoError(t, err)
		return k, pub
	}
	op, opPub := kp(nkeys.CreateOperator)
	sys, sysPub := kp(nkeys.CreateAccount)
	acc, accPub := kp(nkeys.CreateAccount)
	_ = sys

	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	require.NoError(t, err)
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "IDEM"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(op)
	require.NoError(t, err)
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "test-operator"
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	require.NoError(t, err)

	creds = userCreds(t, dir, "idem.creds", acc)
	conf = fmt.Sprintf(`operator: %q
system_account: %s
resolver: MEMORY
resolver_preload: {
  %s: %q
  %s: %q
}
`, writeFile(t, dir, "operator.jwt", opJWT), sysPub, sysPub, sysJWT, accPub, accJWT)
	return conf, creds
}

// userCreds writes a creds file for a new user signed by account.
func userCreds(t *testing.T, dir, name string, account nkeys.KeyPair) string {
	t.Helper()
	u, err := nkeys.CreateUser()
	require.NoError(t, err)
	upub, err := u.PublicKey()
	require.NoError(t, err)
	useed, err := u.Seed()
	require.NoError(t, err)
	uc := jwt.NewUserClaims(upub)
	uc.Name = "idem"
	ujwt, err := uc.Encode(account)
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	require.NoError(t, err)
	return writeFile(t, dir, name, string(creds))
}

func TestNATSCredsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf, creds := operatorMode(t, dir)
	ns := startNATSConf(t, dir, conf)
	w := securedWorld(t, ns, []nats.Option{nats.UserCredentials(creds)}, "  creds: "+creds+"\n", nil, "")
	w.loadsOnce(w.serve(), "2026-11-02")

	// A user of an account this server does not know.
	stranger, err := nkeys.CreateAccount()
	require.NoError(t, err)
	bad := userCreds(t, dir, "stranger.creds", stranger)
	code, out := runIdem(t, []string{"IDEM_NATS_CREDS=" + bad}, "serve", "--config", w.cfg)
	require.Equal(t, 1, code, out)
	require.Contains(t, strings.ToLower(out), "authorization violation")
}

func TestNATSMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newPKI(t, dir, "nats")
	ns := startNATSConf(t, dir, fmt.Sprintf(`tls {
  cert_file: %q
  key_file: %q
  ca_file: %q
  verify: true
}
`, p.ServerCertFile, p.ServerKeyFile, p.CAFile))
	require.True(t, strings.HasPrefix(ns.URL(), "tls://"), ns.URL())
	tlsYAML := func(ca string) string {
		return fmt.Sprintf("  tls:\n    ca: %s\n    cert: %s\n    key: %s\n", ca, p.ClientCertFile, p.ClientKeyFile)
	}
	w := securedWorld(t, ns, []nats.Option{nats.RootCAs(p.CAFile), nats.ClientCert(p.ClientCertFile, p.ClientKeyFile)},
		tlsYAML(p.CAFile), nil, "")
	w.loadsOnce(w.serve(), "2026-11-02")

	// A server certificate from another CA is refused.
	other := newPKI(t, dir, "other")
	code, out := runIdem(t, nil, "serve", "--config", writeFile(t, dir, "wrong-ca.yaml",
		idemYAML(ns.URL(), tlsYAML(other.CAFile), w.db.URL, "")))
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "certificate signed by unknown authority")

	// Without a client certificate the server refuses idem.
	code, out = runIdem(t, nil, "serve", "--config", writeFile(t, dir, "no-cert.yaml",
		idemYAML(ns.URL(), "  tls:\n    ca: "+p.CAFile+"\n", w.db.URL, "")))
	require.Equal(t, 1, code, out)
	// "certificate required" or the connection closed after the handshake,
	// depending on which side notices first.
	require.Regexp(t, `nats connect: .*(tls|certificate)`, out)
}
