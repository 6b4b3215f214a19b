package localpg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PgBouncerBin is where Debian's pgbouncer package (make pgbouncer) puts it.
// Without it, StartPgBouncer takes the pgbouncer on PATH.
const PgBouncerBin = "/usr/sbin/pgbouncer"

// ErrNoPgBouncer: neither PgBouncerBin nor a pgbouncer on PATH.
var ErrNoPgBouncer = errors.New("pgbouncer not found (make pgbouncer installs it)")

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

	bin     string
	user    string
	dir     string
	ini     string
	logFile string
	console string
	readyDB string
	asUser  *user.User

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
}

func pgBouncerBin() (string, error) {
	if _, err := os.Stat(PgBouncerBin); err == nil {
		return PgBouncerBin, nil
	}
	if bin, err := exec.LookPath("pgbouncer"); err == nil {
		return bin, nil
	}
	return "", ErrNoPgBouncer
}

// PgBouncerVersion runs pgbouncer --version and returns its first line,
// e.g. "PgBouncer 1.18.0". Without a pgbouncer the error is ErrNoPgBouncer.
func PgBouncerVersion() (string, error) {
	bin, err := pgBouncerBin()
	if err != nil {
		return "", err
	}
	return pgBouncerVersion(bin)
}

func pgBouncerVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("pgbouncer --version: %w (make pgbouncer installs it)\n%s", err, out)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first), nil
}

// StartPgBouncer starts pgbouncer in pool mode mode (PoolSession,
// PoolTransaction or PoolStatement) in front of the server serverURL points
// at (a Server's URL, or any server's), and waits until a query passes
// through it, within 30 s or ctx's deadline, whichever is first. Clients
// connect as serverURL's user. Its files (ini, auth file, log) go in a new
// directory under dir (empty: the system's temporary directory), which
// Close removes; run as root, pgbouncer runs as the postgres user, who must
// be able to reach dir. Without a pgbouncer the error is ErrNoPgBouncer.
func StartPgBouncer(ctx context.Context, serverURL, mode, dir string) (*PgBouncer, error) {
	switch mode {
	case PoolSession, PoolTransaction, PoolStatement:
	default:
		return nil, fmt.Errorf("pgbouncer pool mode %q: want session, transaction or statement", mode)
	}
	bin, err := pgBouncerBin()
	if err != nil {
		return nil, err
	}
	version, err := pgBouncerVersion(bin)
	if err != nil {
		return nil, err
	}
	server, err := pgconn.ParseConfig(serverURL)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: server URL: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	if dir, err = os.MkdirTemp(dir, "idem-pgbouncer-"); err != nil {
		return nil, err
	}
	b := &PgBouncer{
		Port: port, Mode: mode, Version: version,
		bin: bin, user: server.User, dir: dir, readyDB: server.Database,
		ini: filepath.Join(dir, "pgbouncer.ini"), logFile: filepath.Join(dir, "pgbouncer.log"),
		console: filepath.Join(dir, "console.log"),
	}
	if err := b.setUp(server); err != nil {
		_ = b.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.startOn(ctx, server); err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

// startOn starts b on the port drawn for it and, when another process took
// that port between the draw and pgbouncer's bind (a test server starting
// at the same moment), on another drawn port, up to portTries, as
// Server.startOn does.
func (b *PgBouncer) startOn(ctx context.Context, server *pgconn.Config) error {
	start := func() error { return b.start(ctx) }
	inUse := func(err error) bool { return strings.Contains(err.Error()+b.Log(), "Address already in use") }
	return onAnotherPortIfTaken(start, inUse, func(port int) error {
		b.Port = port
		// The next failure's message must show the next start's log only.
		_ = os.Truncate(b.logFile, 0)
		_ = os.Truncate(b.console, 0)
		return b.setUp(server)
	})
}

// setUp writes pgbouncer's files and, run as root, hands them to the
// postgres user.
func (b *PgBouncer) setUp(server *pgconn.Config) error {
	if err := os.WriteFile(b.ini, []byte(iniFor(b, server)), 0o644); err != nil {
		return err
	}
	// The password, if the server wants one: with auth_type trust pgbouncer
	// logs in to the server with what auth_file holds for the client's user.
	if err := os.WriteFile(filepath.Join(b.dir, "userlist.txt"), []byte(quote(server.User)+" "+quote(server.Password)+"\n"), 0o600); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return nil
	}
	// pgbouncer refuses to run as root (FATAL PgBouncer should not run as
	// root); -u postgres, simpler than runuser (signals reach pgbouncer
	// itself, and its processor time is that of the process started here),
	// makes it drop to that user after reading its files, and what it
	// writes (log, pid file) must be the postgres user's to write.
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running pgbouncer as root needs the 'postgres' user: %w", err)
	}
	b.asUser = u
	if err := os.Chmod(b.dir, 0o755); err != nil {
		return err
	}
	return chownTo(b.dir, u)
}

// iniFor writes pgbouncer.ini. Only what a throwaway instance needs is set;
// everything else (pool sizes, server_reset_query, server_round_robin,
// ignore_startup_parameters, and from 1.21 max_prepared_statements...)
// keeps pgbouncer's default, since what tests and benchmarks exercise is a
// pooler as shipped.
func iniFor(b *PgBouncer, server *pgconn.Config) string {
	return strings.Join([]string{
		"[databases]",
		// The wildcard: every database goes through as named.
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
	// Ready is a query answered on its port once its own log says it
	// listens there: another pgbouncer that drew the same port and bound
	// it first answers the query too, while this one fails to bind.
	mark := len(b.Log())
	listening := "listening on 127.0.0.1:" + strconv.Itoa(b.Port)
	// What it says on stderr (its log lines, and what goes wrong before
	// its log file is open).
	console, err := os.OpenFile(b.console, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer console.Close()
	cmd := exec.Command(b.bin, args...)
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
			out, _ := os.ReadFile(b.console)
			return fmt.Errorf("pgbouncer exited at start (%v):\n%s", cmd.ProcessState, tail(string(out), 2000))
		case <-ctx.Done():
			b.Stop()
			return fmt.Errorf("pgbouncer on port %d did not pass a query: %v (last: %v)\n%s", b.Port, ctx.Err(), lastErr, b.LogTail(2000))
		case <-time.After(20 * time.Millisecond):
		}
		if log := b.Log(); len(log) < mark || !strings.Contains(log[mark:], listening) {
			lastErr = fmt.Errorf("its log does not say %q yet", listening)
			continue
		}
		if lastErr = ping(ctx, url); lastErr == nil {
			return nil
		}
	}
}

// ping runs one query on the simple protocol: nothing prepared, nothing
// left on the server connection the pooler lent.
func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := ConnectSimple(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, "SELECT 1")
	return err
}

// ConnectSimple connects with the simple protocol only: no statement is
// prepared, named or not, so the connection leaves nothing behind on the
// server connection a pooler lent it.
func ConnectSimple(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return pgx.ConnectConfig(ctx, cfg)
}

// URL is a postgres URL for database db through the pooler, as the server
// URL's user.
func (b *PgBouncer) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(b.user), Host: "127.0.0.1:" + strconv.Itoa(b.Port), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Pid is the pgbouncer process's id (the process that serves: -u drops to
// the postgres user in place), 0 while it is stopped.
func (b *PgBouncer) Pid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// Log returns pgbouncer's log so far (every start's, appended).
func (b *PgBouncer) Log() string {
	out, _ := os.ReadFile(b.logFile)
	return string(out)
}

// LogTail is the last n bytes of Log or fewer, from the start of a line.
func (b *PgBouncer) LogTail(n int) string { return tail(b.Log(), n) }

// Restart stops pgbouncer (SIGTERM: its immediate shutdown, every client
// and server connection dropped) and starts it again on the same port, with
// the same settings; it returns once a query passes through it again.
func (b *PgBouncer) Restart(ctx context.Context) error {
	b.Stop()
	return b.start(ctx)
}

// Stop ends pgbouncer: SIGTERM (in 1.18 an immediate shutdown), then
// SIGKILL if it is still there after 10 s. It returns once the process is
// gone; stopping a stopped pgbouncer does nothing. A program killed before
// it stops pgbouncer leaves it running, as it leaves a Server: a
// parent-death signal would not survive pgbouncer's setuid.
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

// Close stops pgbouncer and removes its files, log included.
func (b *PgBouncer) Close() error {
	b.Stop()
	return os.RemoveAll(b.dir)
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
