package e2e

// Security against real servers: `idem serve` authenticating to nats-server
// with each method idem supports (user/password under the least-privilege
// permissions of deploy/nats, token, nkey, creds, mutual TLS), and refusing to
// run, with a clear message, when the secret is wrong.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
	"github.com/idem-data/idem/internal/pgtest"
)

// repoPath is rel from the repository root (tests run in internal/e2e).
func repoPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", rel))
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
		db = pgtest.NewDB(t)
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

func TestNATSDeployConfigLeastPrivilege(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pw := map[string]string{
		"IDEM_SERVE_PASSWORD": "serve-pw-5b1e", "IDEM_PUBLISH_PASSWORD": "publish-pw-77c0",
		"IDEM_ADMIN_PASSWORD": "admin-pw-0d9a", "NATS_SYS_PASSWORD": "sys-pw-e41f",
	}
	ns := startNATSConf(t, dir, deployNATSConf(t, dir, pw))
	w := securedWorld(t, ns, []nats.Option{nats.UserInfo("admin", pw["IDEM_ADMIN_PASSWORD"])}, "", nil, "")
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
