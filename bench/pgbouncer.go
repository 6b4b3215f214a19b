package bench

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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/internal/localpg"
)

// pgBouncerBin is where Debian's pgbouncer package (make pgbouncer) puts it.
const pgBouncerBin = "/usr/sbin/pgbouncer"

// errNoPgBouncer: no pgbouncer on this machine; the pooled figures stay
// empty.
var errNoPgBouncer = errors.New("pgbouncer not found (make pgbouncer installs it)")

// pgBouncer is a pgbouncer process the harness started in front of the
// benchmark's server, with pgbouncer's defaults except what a throwaway
// instance needs: a loopback port of its own, the pool mode, every
// database of the server behind `*`, and trust on the client side (the
// harness's clusters trust loopback connections; pgbouncer logs in to the
// server as the client's user, with the password auth_file holds).
type pgBouncer struct {
	Version string
	Mode    string
	user    string
	port    int
	dir     string
	cmd     *exec.Cmd
	done    chan struct{}
}

// startPgBouncer starts pgbouncer in pool mode mode in front of the server
// serverURL names and returns once a query passes through it.
func startPgBouncer(ctx context.Context, serverURL, mode string) (*pgBouncer, error) {
	bin := pgBouncerBin
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("pgbouncer"); err != nil {
			return nil, errNoPgBouncer
		}
	}
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer --version: %w\n%s", err, out)
	}
	server, err := pgconn.ParseConfig(serverURL)
	if err != nil {
		return nil, err
	}
	b := &pgBouncer{Mode: mode, user: server.User, done: make(chan struct{})}
	b.Version, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	if b.port, err = localpg.FreePort(); err != nil {
		return nil, err
	}
	// Not under the harness's work directory: that is root's and closed to
	// the postgres user pgbouncer runs as.
	if b.dir, err = os.MkdirTemp("", "idembench-pgbouncer-"); err != nil {
		return nil, err
	}
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	ini := strings.Join([]string{
		"[databases]",
		fmt.Sprintf("* = host=%s port=%d", server.Host, server.Port),
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(b.port),
		"unix_socket_dir =", // no socket file left behind a killed pgbouncer
		"pool_mode = " + mode,
		"logfile = " + filepath.Join(b.dir, "pgbouncer.log"),
		"pidfile = " + filepath.Join(b.dir, "pgbouncer.pid"),
		"auth_type = trust", // the user must still be listed in auth_file
		"auth_file = " + filepath.Join(b.dir, "userlist.txt"),
		"",
	}, "\n")
	files := map[string]string{"pgbouncer.ini": ini, "userlist.txt": quote(server.User) + " " + quote(server.Password) + "\n"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(b.dir, name), []byte(body), 0o600); err != nil {
			b.remove()
			return nil, err
		}
	}
	args := []string{filepath.Join(b.dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		// pgbouncer refuses to run as root: -u drops to the postgres user
		// once it has read its files, in the same process (whose CPU the
		// harness reads), and what it writes must be that user's to write.
		u, err := user.Lookup("postgres")
		if err != nil {
			b.remove()
			return nil, fmt.Errorf("pgbouncer as root needs the postgres user: %w", err)
		}
		if err := chownTree(b.dir, u); err != nil {
			b.remove()
			return nil, err
		}
		args = append([]string{"-u", u.Username}, args...)
	}
	console, err := os.Create(filepath.Join(b.dir, "console.log"))
	if err != nil {
		b.remove()
		return nil, err
	}
	b.cmd = exec.Command(bin, args...)
	b.cmd.Stdout, b.cmd.Stderr = console, console
	if err := b.cmd.Start(); err != nil {
		console.Close()
		b.remove()
		return nil, err
	}
	go func() { _ = b.cmd.Wait(); console.Close(); close(b.done) }()
	target := b.url(server.Database)
	err = waitFor(ctx, 30*time.Second, 20*time.Millisecond, "pgbouncer to pass a query", func() (bool, error) {
		select {
		case <-b.done:
			return false, fmt.Errorf("pgbouncer exited at start:\n%s", b.tail())
		default:
		}
		return ping(ctx, target) == nil, nil
	})
	if err != nil {
		b.stop()
		return nil, fmt.Errorf("%w\n%s", err, b.tail())
	}
	return b, nil
}

// url is database db through the pooler, as the server URL's user.
func (b *pgBouncer) url(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(b.user), Host: "127.0.0.1:" + strconv.Itoa(b.port), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

func (b *pgBouncer) pid() int { return b.cmd.Process.Pid }

func (b *pgBouncer) tail() string {
	var out []string
	for _, f := range []string{"console.log", "pgbouncer.log"} {
		if s, err := os.ReadFile(filepath.Join(b.dir, f)); err == nil {
			if len(s) > 2000 {
				s = s[len(s)-2000:]
			}
			out = append(out, string(s))
		}
	}
	return strings.Join(out, "\n")
}

// stop ends pgbouncer (SIGTERM, SIGKILL after 10 s) and removes its files.
func (b *pgBouncer) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	b.remove()
}

func (b *pgBouncer) remove() { _ = os.RemoveAll(b.dir) }

// ping runs one query on the simple protocol: nothing prepared, nothing
// left on the server connection the pooler lent.
func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, "SELECT 1")
	return err
}

func chownTree(dir string, u *user.User) error {
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
