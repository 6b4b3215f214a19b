package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/internal/localpg"
)

// PgBouncerBin is where Debian's pgbouncer package (make pgbouncer) puts it.
const PgBouncerBin = "/usr/sbin/pgbouncer"

// Pool modes of pgbouncer, for StartPgBouncer.
const (
	PoolSession     = "session"
	PoolTransaction = "transaction"
	PoolStatement   = "statement"
)

// PgBouncer is a real pgbouncer process in front of a PostgreSQL server, on
// a loopback port of its own, with pgbouncer's default settings except the
// few a throwaway instance needs (see iniFor). Every database of the server
// is reachable through it.
type PgBouncer struct {
	// Port is the loopback port it listens on; Restart keeps it.
	Port int
	// Mode is its pool_mode.
	Mode string
	// Version is what pgbouncer --version says first, e.g. "PgBouncer 1.18.0".
	Version string

	user    string
	dir     string
	ini     string
	logFile string
	readyDB string
	asUser  *user.User

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
}

// PgBouncerVersion runs pgbouncer --version and returns its first line,
// e.g. "PgBouncer 1.18.0".
func PgBouncerVersion() (string, error) {
	out, err := exec.Command(PgBouncerBin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("pgbouncer --version: %w (make pgbouncer installs it)\n%s", err, out)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first), nil
}

// StartPgBouncer starts pgbouncer in pool mode mode (PoolSession,
// PoolTransaction or PoolStatement) in front of the server serverURL points
// at (pgtest.AdminURL(), or a localpg.Server's URL), and waits until a query
// passes through it. Clients connect as serverURL's user; t's cleanup stops
// it and, when t failed, logs the tail of pgbouncer's log.
func StartPgBouncer(t testing.TB, serverURL, mode string) *PgBouncer {
	t.Helper()
	switch mode {
	case PoolSession, PoolTransaction, PoolStatement:
	default:
		t.Fatalf("pgtest: pgbouncer pool mode %q: want session, transaction or statement", mode)
	}
	version, err := PgBouncerVersion()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	server, err := pgconn.ParseConfig(serverURL)
	if err != nil {
		t.Fatalf("pgtest: pgbouncer: server URL: %v", err)
	}
	port, err := localpg.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its parents are root's and closed to the postgres user.
	dir, err := os.MkdirTemp("", "idem-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	b := &PgBouncer{
		Port: port, Mode: mode, Version: version,
		user: server.User, dir: dir, readyDB: server.Database,
		ini: filepath.Join(dir, "pgbouncer.ini"), logFile: filepath.Join(dir, "pgbouncer.log"),
	}
	t.Cleanup(func() {
		b.Stop()
		if t.Failed() {
			t.Logf("pgtest: pgbouncer (%s, %s mode, port %d) log tail:\n%s", b.Version, b.Mode, b.Port, tail(b.Log(), 4000))
		}
		_ = os.RemoveAll(dir)
	})
	if err := os.WriteFile(b.ini, []byte(iniFor(b, server)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The password, if the server wants one: with auth_type trust pgbouncer
	// logs in to the server with what auth_file holds for the client's user.
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(quote(server.User)+" "+quote(server.Password)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// pgbouncer refuses to run as root (FATAL PgBouncer should not
		// run as root); -u postgres, simpler than runuser (signals reach
		// pgbouncer itself), makes it drop to
		// that user after reading its files, and what it writes (log, pid
		// file) must be the postgres user's to write.
		if b.asUser, err = user.Lookup("postgres"); err != nil {
			t.Fatalf("pgtest: running pgbouncer as root needs the 'postgres' user: %v", err)
		}
		if err := chownAll(dir, b.asUser); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.start(ctx); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return b
}

// iniFor writes pgbouncer.ini. Only what a throwaway instance needs is set;
// everything else (pool sizes, server_reset_query, server_round_robin,
// ignore_startup_parameters, and from 1.21 max_prepared_statements...)
// keeps pgbouncer's default, since what the tests exercise is a pooler as
// shipped.
func iniFor(b *PgBouncer, server *pgconn.Config) string {
	return strings.Join([]string{
		"[databases]",
		// The wildcard: each test's own database goes through as named.
		fmt.Sprintf("* = host=%s port=%d", server.Host, server.Port),
		"",
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(b.Port),
		// No unix socket: the default (/tmp) would leave a socket file
		// behind any pgbouncer that is killed.
		"unix_socket_dir =",
		"pool_mode = " + b.Mode,
		"logfile = " + b.logFile,
		"pidfile = " + filepath.Join(b.dir, "pgbouncer.pid"),
		// localpg's clusters trust every loopback connection (initdb -A
		// trust), so the pooler need not check passwords either: trust
		// takes the client's user name as given, which must be listed in
		// auth_file (1.18 refuses an unlisted one: FATAL "trust"
		// authentication failed).
		"auth_type = trust",
		"auth_file = " + filepath.Join(b.dir, "userlist.txt"),
		"",
	}, "\n")
}

func (b *PgBouncer) start(ctx context.Context) error {
	args := []string{b.ini}
	if b.asUser != nil {
		args = []string{"-u", b.asUser.Username, b.ini}
	}
	// What it says on stderr (its log lines, and what goes wrong before
	// its log file is open).
	console, err := os.OpenFile(filepath.Join(b.dir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer console.Close()
	cmd := exec.Command(PgBouncerBin, args...)
	cmd.Stdout, cmd.Stderr = console, console
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	b.mu.Lock()
	b.cmd, b.exit = cmd, exit
	b.mu.Unlock()

	url := b.URL(b.readyDB)
	var lastErr error
	for {
		select {
		case <-exit:
			out, _ := os.ReadFile(console.Name())
			return fmt.Errorf("pgbouncer exited at start (%v):\n%s", cmd.ProcessState, tail(string(out), 2000))
		case <-ctx.Done():
			b.Stop()
			return fmt.Errorf("pgbouncer on port %d did not pass a query: %v (last: %v)\n%s", b.Port, ctx.Err(), lastErr, tail(b.Log(), 2000))
		case <-time.After(20 * time.Millisecond):
		}
		if lastErr = ping(ctx, url); lastErr == nil {
			return nil
		}
	}
}

func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := connectSimple(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "SELECT 1")
	return err
}

// URL is a postgres URL for database db through the pooler, as the server
// URL's user.
func (b *PgBouncer) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", b.user, b.Port, db)
}

// Log returns pgbouncer's log so far (every start's, appended).
func (b *PgBouncer) Log() string {
	out, _ := os.ReadFile(b.logFile)
	return string(out)
}

// Restart stops pgbouncer (SIGTERM: its immediate shutdown, every client
// and server connection dropped) and starts it again on the same port, with
// the same settings; it returns once a query passes through it again.
func (b *PgBouncer) Restart(ctx context.Context) error {
	b.Stop()
	return b.start(ctx)
}

// Stop ends pgbouncer: SIGTERM (in 1.18 an immediate shutdown), then
// SIGKILL if it is still there after 10 s. It returns once the process is
// gone; stopping a stopped pgbouncer does nothing. A test binary killed
// before its cleanup leaves pgbouncer running, as it leaves localpg's
// cluster: a parent-death signal would not survive pgbouncer's setuid.
func (b *PgBouncer) Stop() {
	b.mu.Lock()
	cmd, exit := b.cmd, b.exit
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exit:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exit
	}
}

// connectSimple connects with the simple protocol only: no statement is
// prepared, named or not, so the connection leaves nothing behind on the
// server connection it used.
func connectSimple(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return pgx.ConnectConfig(ctx, cfg)
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// tail is the last n bytes of s or fewer, from the start of a line.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func chownAll(dir string, u *user.User) error {
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
