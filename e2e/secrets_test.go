package e2e

// Secrets never reach a log: every line `idem serve`, `validate`, `migrate`,
// `streams` and `publish` write (stdout and stderr, debug level), through
// successful runs and failed connections, is searched for the database
// password and the NATS password and token, raw and URL-escaped.

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	const (
		pgPass    = "Pg/S3cret+7f3a=9" // needs escaping in a URL
		natsPass  = "nats-S3cret-e5b2"
		natsToken = "nats-T0ken-c41d"
		adminPass = "nats-Admin-90aa"
		wrongPass = "wrong-S3cret-0f0f"
	)
	secrets := []string{pgPass, natsPass, natsToken, adminPass, wrongPass}

	pg := startTLSPostgres(t)
	goodPG, db := pg.database(t, "idem_sec", pgPass)
	wrongPG := pg.url("idem_sec", wrongPass, db.Name, "verify-full", pg.pki.CAFile)

	dir := t.TempDir()
	usersNS := startNATSConf(t, filepath.Join(dir, "users"), fmt.Sprintf(`authorization { users = [
  { user: idem, password: %q }
  { user: admin, password: %q }
] }`, natsPass, adminPass))
	tokenNS := startNATSConf(t, filepath.Join(dir, "token"), fmt.Sprintf(`authorization { token: %q }`, natsToken))

	// Secrets from files, from the environment and inside URLs.
	urlFile := writeFile(t, dir, "pg-url", goodPG+"\n")
	passFile := writeFile(t, dir, "nats-pass", natsPass+"\n")
	cfgFiles := writeFile(t, dir, "files.yaml", idemYAML(usersNS.URL(), "  user: idem\n  password_file: "+passFile+"\n", "", ""))
	cfgFiles = rewritePostgres(t, cfgFiles, "  url_file: "+urlFile+"\n")
	cfgEnv := writeFile(t, dir, "env.yaml", idemYAML(usersNS.URL(), "", goodPG, ""))
	tokenURL := strings.Replace(tokenNS.URL(), "nats://", "nats://"+natsToken+"@", 1)
	cfgTokenURL := writeFile(t, dir, "token-url.yaml", idemYAML(tokenURL, "", goodPG, ""))
	userEnv := func(pass string) []string { return []string{"IDEM_NATS_USER=idem", "IDEM_NATS_PASSWORD=" + pass} }
	debug := []string{"IDEM_LOG_LEVEL=debug"}

	var logs strings.Builder
	run := func(wantCode int, env []string, args ...string) string {
		t.Helper()
		code, out := runIdem(t, append(append([]string{}, debug...), env...), args...)
		// The header names the command only: its arguments hold secrets.
		fmt.Fprintf(&logs, "== idem %s (exit %d)\n%s", args[0], code, out)
		require.Equal(t, wantCode, code, "idem %s:\n%s", args[0], out)
		return out
	}

	// migrate, validate, streams, publish: good, then each wrong secret.
	run(0, nil, "migrate", "--config", cfgFiles)
	run(0, nil, "migrate", "--database-url", goodPG)
	run(1, nil, "migrate", "--database-url", wrongPG)
	run(1, nil, "migrate", "--database-url", strings.Replace(goodPG, fmt.Sprint(pg.srv.Port), "notaport", 1))
	run(1, nil, "migrate", "--database-url", strings.Replace(goodPG, fmt.Sprint(pg.srv.Port), "1", 1))
	run(1, []string{"IDEM_DATABASE_URL=" + wrongPG}, "migrate")
	// The password in the other places a connection string can hold it.
	kv := fmt.Sprintf("host=127.0.0.1 port=%d user=idem_sec password='%s' dbname=%s sslmode=verify-full sslrootcert=%s",
		pg.srv.Port, pgPass, db.Name, pg.pki.CAFile)
	run(0, nil, "migrate", "--database-url", kv)
	run(1, nil, "migrate", "--database-url", strings.Replace(kv, fmt.Sprint(pg.srv.Port), "notaport", 1))
	run(1, nil, "migrate", "--database-url", strings.Replace(kv, pgPass, wrongPass, 1))
	inQuery := "postgres://idem_sec@127.0.0.1:PORT/" + db.Name + "?sslmode=verify-full&sslrootcert=" +
		url.QueryEscape(pg.pki.CAFile) + "&password=" + url.QueryEscape(pgPass)
	run(0, nil, "migrate", "--database-url", strings.Replace(inQuery, "PORT", fmt.Sprint(pg.srv.Port), 1))
	run(1, nil, "migrate", "--database-url", strings.Replace(inQuery, "PORT", "notaport", 1))
	run(0, nil, "validate", "--config", cfgFiles)
	run(1, []string{"IDEM_DATABASE_URL=" + wrongPG}, "validate", "--config", cfgFiles)
	run(0, nil, "streams", "--config", cfgFiles)
	run(1, userEnv(wrongPass), "streams", "--config", cfgEnv)
	run(0, userEnv(natsPass), "publish", "--config", cfgEnv, "orders", "2026-11-02", "--run-id", "r1")
	run(1, userEnv(wrongPass), "publish", "--config", cfgEnv, "orders", "2026-11-03", "--run-id", "r1")
	run(1, []string{"IDEM_NATS_TOKEN=" + wrongPass}, "publish", "--config", writeFile(t, dir, "token.yaml", idemYAML(tokenNS.URL(), "", goodPG, "")),
		"orders", "2026-11-03")
	run(1, nil, "publish", "--config", writeFile(t, dir, "unreachable.yaml",
		idemYAML("nats://idem:"+natsPass+"@127.0.0.1:1", "", goodPG, "")), "orders", "2026-11-03")

	// serve: failed connections of every kind.
	run(1, userEnv(wrongPass), "serve", "--config", cfgEnv)
	run(1, []string{"IDEM_DATABASE_URL=" + wrongPG}, "serve", "--config", cfgFiles)
	// A NATS nobody answers on: serve waits for it (one line), and a
	// SIGTERM while waiting ends it.
	waiting := exec.Command(idemBin, "serve", "--config", cfgFiles)
	waiting.Env = append(append(os.Environ(), debug...), "IDEM_NATS_URL=nats://"+natsToken+"@127.0.0.1:1")
	var wout syncBuf = syncBuf{&sync.Mutex{}, &bytes.Buffer{}}
	waiting.Stdout, waiting.Stderr = wout, wout
	require.NoError(t, waiting.Start())
	wdone := make(chan error, 1)
	go func() { wdone <- waiting.Wait() }()
	waitedOut := func() string { wout.mu.Lock(); defer wout.mu.Unlock(); return wout.b.String() }
	require.Eventually(t, func() bool { return strings.Contains(waitedOut(), "waiting for the server to start") }, 30*time.Second, 20*time.Millisecond, waitedOut())
	require.NoError(t, waiting.Process.Signal(syscall.SIGTERM))
	select {
	case <-wdone:
	case <-time.After(30 * time.Second):
		_ = waiting.Process.Kill()
		t.Fatalf("idem serve waiting for NATS did not stop on SIGTERM:\n%s", waitedOut())
	}
	require.Equal(t, 1, strings.Count(waitedOut(), "waiting for the server to start"), waitedOut())
	fmt.Fprintf(&logs, "== idem serve (NATS unreachable)\n%s", waitedOut())
	run(1, []string{"IDEM_NATS_URL=" + strings.Replace(tokenURL, natsToken, wrongPass, 1)}, "serve", "--config", cfgEnv)

	// serve: a full run with secrets from files, a load, a dead letter, a
	// stop; then one with the token in the URL that loses its server.
	w := securedWorld(t, usersNS, []nats.Option{nats.UserInfo("admin", adminPass)}, "", db, goodPG)
	w.cfg = cfgFiles
	p := w.serve(debug...)
	w.publish("2026-11-04", "r1", nil)
	w.publish("2030-01-01", "empty", nil)
	w.waitCount(2, "SELECT count(*) FROM idem.pipeline_audit WHERE status = 'success'") // r1 of 11-02 and 11-04
	w.waitDeadLetters(1)
	w.waitSettled()
	p.signal(syscall.SIGTERM)
	require.Equal(t, 0, p.exit(t, 30*time.Second), p.output())
	fmt.Fprintf(&logs, "== idem serve (files)\n%s", p.output())

	w2 := securedWorld(t, tokenNS, []nats.Option{nats.Token(natsToken)}, "", db, goodPG)
	w2.cfg = cfgTokenURL
	p2 := w2.serve(debug...)
	tokenNS.Stop() // the server goes away under a running idem
	require.Eventually(t, func() bool { return strings.Contains(p2.output(), "nats: disconnected") }, 30*time.Second, 20*time.Millisecond)
	p2.signal(syscall.SIGTERM)
	p2.exit(t, 60*time.Second)
	fmt.Fprintf(&logs, "== idem serve (token in URL)\n%s", p2.output())

	all := logs.String()
	for _, s := range secrets {
		for _, form := range []string{s, url.QueryEscape(s), url.PathEscape(s)} {
			require.NotContains(t, all, form, "a secret reached the logs:\n%s", all)
		}
	}
	// The failures above said what failed, without the secret.
	for _, want := range []string{"password authentication failed", "Authorization Violation", "cannot reach NATS at nats://REDACTED@127.0.0.1:1"} {
		require.Contains(t, all, want)
	}
}

// rewritePostgres replaces the postgres: block's url line of a config file
// written by idemYAML with lines.
func rewritePostgres(t *testing.T, path, lines string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := strings.Replace(string(b), "postgres:\n  url: \n", "postgres:\n"+lines, 1)
	require.NotEqual(t, string(b), s)
	require.NoError(t, os.WriteFile(path, []byte(s), 0o600))
	return path
}
