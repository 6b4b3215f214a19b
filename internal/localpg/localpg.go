// Package localpg starts a throwaway PostgreSQL cluster from the binaries of the
// Debian package, for tests, benchmarks and `idem dev`, and a real pgbouncer
// (StartPgBouncer) in front of one, for the tests and benchmarks that go
// through a pooler.
//
// It runs the server and the pooler as the unprivileged "postgres" user when the
// caller is root (PostgreSQL and pgbouncer refuse to run as root, and CI and
// sessions run as root); both listen on 127.0.0.1 only, on a port of their own,
// the server's socket inside its data directory, the pooler's nowhere.
// It must never touch a cluster or a pooler it did not create.
package localpg

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options tune the throwaway cluster.
type Options struct {
	// Dir is the data directory's parent; empty means a new temporary directory,
	// removed by Stop.
	Dir string
	// Port to listen on; 0 picks a free one.
	Port int
	// Durable keeps fsync on (benchmarks); tests run faster without it.
	Durable bool
	// Settings are extra postgresql.conf lines, e.g. "shared_buffers = 256MB".
	Settings []string
	// Log receives the server's log file path once known; may be nil.
	Log func(format string, args ...any)
	// TLS, when set, turns ssl on with these PEM files, written into the data
	// directory as server.crt, server.key and (when CA is set) root.crt,
	// owned by the server's user with mode 0600 as PostgreSQL requires.
	TLS *TLS
	// HBA lines go before the pg_hba.conf that initdb wrote (trust for every
	// local and loopback connection); the first line matching a connection
	// decides, e.g. "hostssl all app 127.0.0.1/32 scram-sha-256".
	HBA []string
	// Copy starts the cluster from a copy of a pristine one that initdb made
	// once for these binaries and this user (kept in the temporary
	// directory), instead of running initdb: about a tenth of the CPU. Every
	// such cluster has the same system identifier, so it is for a cluster
	// nothing tells apart from another by its identity (a test binary's
	// shared cluster), never a warehouse, a source or a primary.
	Copy bool
}

// TLS holds PEM-encoded server TLS material.
type TLS struct {
	// Cert and Key are the server's certificate (chain) and private key.
	Cert, Key []byte
	// CA, when set, verifies client certificates (ssl_ca_file).
	CA []byte
}

// Server is a running throwaway cluster.
type Server struct {
	Port    int
	DataDir string
	LogFile string
	bin     string
	tmp     string
	asUser  *user.User
}

// BinDir finds the newest PostgreSQL (15 or later) server binaries.
func BinDir() (string, error) {
	if d := os.Getenv("IDEM_PG_BINDIR"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if pgVersion(d) < 15 {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL server binaries found (initdb): run scripts/ensure-postgres.sh or apt-get install -y postgresql")
}

func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start creates and starts a new cluster.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, Port: opts.Port}
	parent := opts.Dir
	if parent == "" {
		parent, err = os.MkdirTemp("", "idem-pg-")
		if err != nil {
			return nil, err
		}
		s.tmp = parent
	}
	s.DataDir = filepath.Join(parent, "data")
	s.LogFile = filepath.Join(parent, "postgres.log")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs the 'postgres' user (created by the postgresql package): %w", err)
		}
		s.asUser = u
		// The server user must be able to reach and own its directory.
		if err := os.Chmod(parent, 0o755); err != nil {
			return nil, err
		}
		if err := chownTo(parent, u); err != nil {
			return nil, err
		}
	}
	chosen := s.Port == 0
	if chosen {
		if s.Port, err = freePort(); err != nil {
			return nil, err
		}
	}
	if err := s.initdb(ctx, opts.Copy); err != nil {
		return nil, err
	}
	conf := []string{
		"listen_addresses = '127.0.0.1'",
		"port = " + strconv.Itoa(s.Port),
		"unix_socket_directories = ''",
		"max_connections = 200",
		"shared_buffers = 128MB",
		"log_min_messages = warning",
		"log_min_error_statement = panic",
		"max_prepared_transactions = 0",
		// Notice a client that died mid-query (a SIGKILLed idem) within a
		// second, instead of running its statement to the end with its locks.
		"client_connection_check_interval = 1000",
	}
	if !opts.Durable {
		conf = append(conf, "fsync = off", "synchronous_commit = off", "full_page_writes = off")
	}
	tlsConf, err := s.writeTLS(opts.TLS)
	if err != nil {
		return nil, err
	}
	conf = append(conf, tlsConf...)
	conf = append(conf, opts.Settings...)
	if err := s.prependHBA(opts.HBA); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(s.DataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString("\n# idem localpg\n" + strings.Join(conf, "\n") + "\n")
	f.Close()
	if err != nil {
		return nil, err
	}
	if err := s.startOn(ctx, chosen); err != nil {
		if s.tmp != "" {
			_ = os.RemoveAll(s.tmp) // its log is in err
		}
		return nil, err
	}
	if opts.Log != nil {
		opts.Log("localpg: PostgreSQL on 127.0.0.1:%d, data %s, log %s", s.Port, s.DataDir, s.LogFile)
	}
	return s, nil
}

// initdb makes s.DataDir a new cluster: with initdb, or as a copy of the
// pristine cluster when fromPristine is set and one can be had.
func (s *Server) initdb(ctx context.Context, fromPristine bool) error {
	if fromPristine {
		if src, err := s.pristine(ctx); err == nil {
			if err := exec.CommandContext(ctx, "cp", "-a", src, s.DataDir).Run(); err == nil {
				return nil
			}
			_ = os.RemoveAll(s.DataDir) // and initdb it
		}
	}
	if out, err := s.run(ctx, "initdb", "-D", s.DataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// pristine returns the data directory of a cluster initdb made once for
// these binaries and this server user, making it if needed. Concurrent
// makers each build their own and the first rename wins.
func (s *Server) pristine(ctx context.Context) (string, error) {
	fi, err := os.Stat(filepath.Join(s.bin, "postgres"))
	if err != nil {
		return "", err
	}
	who := strconv.Itoa(os.Geteuid())
	if s.asUser != nil {
		who = s.asUser.Username
	}
	key := sha256.Sum256([]byte(fmt.Sprint(s.bin, fi.Size(), fi.ModTime().UnixNano(), who)))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("idem-pg-pristine-%x", key[:6]))
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err == nil {
		return data, nil
	}
	tmp, err := os.MkdirTemp("", "idem-pg-pristine-new-")
	if err != nil {
		return "", err
	}
	if s.asUser != nil {
		if err := os.Chmod(tmp, 0o755); err != nil {
			return "", err
		}
		if err := chownTo(tmp, s.asUser); err != nil {
			return "", err
		}
	}
	if out, err := s.run(ctx, "initdb", "-D", filepath.Join(tmp, "data"), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		if _, serr := os.Stat(filepath.Join(data, "PG_VERSION")); serr != nil {
			return "", err
		}
	}
	return data, nil
}

// URL is a connection string for database db (default "postgres") as the superuser.
func (s *Server) URL(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// Restart starts the server if stopped, or stops it with mode ("fast",
// "immediate", "smart") and starts it again. An empty mode only starts it.
func (s *Server) Restart(ctx context.Context, mode string) error {
	if mode != "" {
		if err := s.Stop(ctx, mode); err != nil {
			return err
		}
	}
	out, err := s.run(ctx, "pg_ctl", "-D", s.DataDir, "-l", s.LogFile, "-w", "-t", "60", "start")
	if err != nil {
		log, _ := os.ReadFile(s.LogFile)
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, tail(string(log), 2000))
	}
	return nil
}

// Stop stops the server with the given shutdown mode, keeping the data.
func (s *Server) Stop(ctx context.Context, mode string) error {
	if mode == "" {
		mode = "fast"
	}
	out, err := s.run(ctx, "pg_ctl", "-D", s.DataDir, "-w", "-t", "60", "-m", mode, "stop")
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

// Close stops the server and removes what Start created.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.Stop(ctx, "immediate")
	if s.tmp != "" {
		if rmErr := os.RemoveAll(s.tmp); rmErr != nil && err == nil {
			err = rmErr
		}
	}
	return err
}

func (s *Server) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	path := filepath.Join(s.bin, prog)
	var cmd *exec.Cmd
	if s.asUser != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", s.asUser.Username, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	// The server must not inherit our session's process group: a Ctrl-C in a
	// terminal would otherwise kill it before Close runs.
	cmd.SysProcAttr = detached()
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd.CombinedOutput()
}

// writeTLS puts the server's TLS files into the data directory and returns the
// postgresql.conf lines that use them.
func (s *Server) writeTLS(t *TLS) ([]string, error) {
	if t == nil {
		return nil, nil
	}
	if len(t.Cert) == 0 || len(t.Key) == 0 {
		return nil, errors.New("localpg: TLS needs both Cert and Key")
	}
	type file struct {
		name string
		data []byte
	}
	files := []file{{"server.crt", t.Cert}, {"server.key", t.Key}}
	conf := []string{"ssl = on", "ssl_cert_file = 'server.crt'", "ssl_key_file = 'server.key'"}
	if len(t.CA) > 0 {
		files = append(files, file{"root.crt", t.CA})
		conf = append(conf, "ssl_ca_file = 'root.crt'")
	}
	for _, f := range files {
		if err := s.writeOwned(filepath.Join(s.DataDir, f.name), f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return conf, nil
}

// prependHBA puts lines before initdb's pg_hba.conf.
func (s *Server) prependHBA(lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	p := filepath.Join(s.DataDir, "pg_hba.conf")
	old, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return s.writeOwned(p, []byte("# idem localpg\n"+strings.Join(lines, "\n")+"\n\n"+string(old)), 0o600)
}

// writeOwned writes a file the server process must own.
func (s *Server) writeOwned(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile keeps an existing file's mode
		return err
	}
	if s.asUser != nil {
		uid, _ := strconv.Atoi(s.asUser.Uid)
		gid, _ := strconv.Atoi(s.asUser.Gid)
		return os.Chown(path, uid, gid)
	}
	return nil
}

func chownTo(dir string, u *user.User) error {
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// FreePort asks the kernel for a loopback port that is free right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freePort draws the port of a server whose caller left it to localpg; a
// variable so a test can hand out a port that is taken.
var freePort = FreePort

// portTries bounds how many ports startOn tries.
const portTries = 4

// startOn starts s. A port drawn by freePort is free when drawn, not when
// the server binds it: another process (a test binary starting its own
// server at the same moment) can take it in between. When chosen and the
// server found its port taken, it moves to another free port (the last
// "port" line of postgresql.conf wins) and tries again; a port the caller
// named is never changed.
func (s *Server) startOn(ctx context.Context, chosen bool) error {
	if !chosen {
		return s.Restart(ctx, "")
	}
	start := func() error { return s.Restart(ctx, "") }
	inUse := func(err error) bool { return strings.Contains(err.Error(), "Address already in use") }
	return onAnotherPortIfTaken(start, inUse, func(port int) error {
		f, err := os.OpenFile(filepath.Join(s.DataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "\n# idem localpg: port %d was taken\nport = %d\n", s.Port, port)
		f.Close()
		if err != nil {
			return err
		}
		s.Port = port
		// The next failure's message must show the next start's log only.
		_ = os.Truncate(s.LogFile, 0)
		return nil
	})
}

// onAnotherPortIfTaken runs start and, while it fails because the port it
// was drawn is taken (inUse), draws another with freePort, hands it to
// move, and runs start again, up to portTries starts in all. When the
// move fails, start's error comes back with it.
func onAnotherPortIfTaken(start func() error, inUse func(error) bool, move func(port int) error) error {
	for try := 1; ; try++ {
		err := start()
		if err == nil || try == portTries || !inUse(err) {
			return err
		}
		port, perr := freePort()
		if perr != nil {
			return errors.Join(err, perr)
		}
		if merr := move(port); merr != nil {
			return errors.Join(err, merr)
		}
	}
}

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

// Standby makes an asynchronous streaming standby of s (pg_basebackup -R:
// it follows s from the WAL it streams) in a new directory, on port (0
// picks a free one), and starts it. Close removes it.
func (s *Server) Standby(ctx context.Context, port int) (*Server, error) {
	parent, err := os.MkdirTemp("", "idem-pg-standby-")
	if err != nil {
		return nil, err
	}
	st := &Server{bin: s.bin, tmp: parent, asUser: s.asUser, DataDir: filepath.Join(parent, "data"), LogFile: filepath.Join(parent, "postgres.log")}
	if st.asUser != nil {
		if err := os.Chmod(parent, 0o755); err != nil {
			return nil, err
		}
		if err := chownTo(parent, st.asUser); err != nil {
			return nil, err
		}
	}
	st.Port = port
	if st.Port == 0 {
		if st.Port, err = freePort(); err != nil {
			return nil, err
		}
	}
	if err := st.backupOf(ctx, s, port == 0); err != nil {
		return nil, err
	}
	return st, nil
}

// Follow makes s, which must not be running (a primary that was killed,
// typically), a new streaming standby of primary, in its own data directory
// and on its own port, and starts it. What s held is removed and replaced
// by a base backup of primary: after a failover the old primary's place,
// the address clients know, holds the new primary's standby. s must be a
// server localpg made (Start or Standby), as every Server is.
func (s *Server) Follow(ctx context.Context, primary *Server) error {
	if s.DataDir == "" || s.bin == "" {
		return errors.New("localpg: Follow needs a server made by Start or Standby")
	}
	if s.Running() {
		return fmt.Errorf("localpg: the server on port %d is running: stop or kill it before it follows another", s.Port)
	}
	if err := os.RemoveAll(s.DataDir); err != nil {
		return err
	}
	return s.backupOf(ctx, primary, false)
}

// backupOf fills s's empty data directory with a base backup of primary
// (-R: standby.signal and primary_conninfo, so it streams from primary),
// sets s's own port and starts it; chosen says that port was drawn by
// freePort, so another one may take its place (startOn).
func (s *Server) backupOf(ctx context.Context, primary *Server, chosen bool) error {
	if out, err := s.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port), "-U", "postgres",
		"-D", s.DataDir, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"); err != nil {
		return fmt.Errorf("pg_basebackup: %w\n%s", err, out)
	}
	// The copy carries the primary's port; the last setting wins.
	f, err := os.OpenFile(filepath.Join(s.DataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n# idem localpg standby\nport = %d\n", s.Port)
	f.Close()
	if err != nil {
		return err
	}
	return s.startOn(ctx, chosen)
}

// Running reports whether the server's postmaster runs. Not pg_ctl status:
// a killed postmaster that its parent has not reaped yet is a zombie, which
// pg_ctl takes for a live one.
func (s *Server) Running() bool {
	pid, err := s.postmaster()
	return err == nil && alive(pid)
}

// postmaster reads the postmaster's pid from postmaster.pid.
func (s *Server) postmaster() (int, error) {
	lines, err := s.pidFile()
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid: %w", err)
	}
	return pid, nil
}

// pidFile is postmaster.pid's lines.
func (s *Server) pidFile() ([]string, error) {
	b, err := os.ReadFile(filepath.Join(s.DataDir, "postmaster.pid"))
	if err != nil {
		return nil, err
	}
	return strings.Split(string(b), "\n"), nil
}

// Promote turns a standby into a primary and waits until it accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	if out, err := s.run(ctx, "pg_ctl", "-D", s.DataDir, "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("pg_ctl promote: %w\n%s", err, out)
	}
	return nil
}

// Kill ends the server with SIGKILL to its postmaster and its children, as
// a crashed machine would: nothing is flushed or shut down. It returns once
// they are gone (within 10 s), so that the port and the data directory are
// free for another server.
//
// The postmaster is stopped (SIGSTOP) before its children are listed, so
// that none is forked after the list; and any process still attached to the
// server's shared memory afterwards is killed too: a new server refuses the
// data directory ("pre-existing shared memory block is still in use") while
// one of the old server's processes lives. The dynamic shared memory
// segments they mapped in /dev/shm are removed, as the server would have on
// a shutdown.
func (s *Server) Kill() error {
	pid, err := s.postmaster()
	if err != nil {
		return err
	}
	key := s.shmKey()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) && state(pid) != "T" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	procs := append([]int{pid}, childrenOf(pid)...)
	segments := dsmSegments(procs)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	for _, child := range procs[1:] {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	if err := waitGone(procs, deadline); err != nil {
		return err
	}
	// A killed server cannot remove its dynamic shared memory; a server
	// started on the directory later looks for it and finds none.
	defer func() {
		for _, f := range segments {
			_ = os.Remove(f)
		}
	}()
	if key == "" {
		return nil
	}
	for {
		stray := attachedTo(key)
		if len(stray) == 0 {
			return nil
		}
		for _, p := range stray {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if err := waitGone(stray, deadline); err != nil {
			return err
		}
	}
}

// waitGone waits until none of pids runs, or the deadline.
func waitGone(pids []int, deadline time.Time) error {
	for _, p := range pids {
		for alive(p) {
			if time.Now().After(deadline) {
				return fmt.Errorf("localpg: process %d still runs 10 s after SIGKILL", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var children []int
	for _, d := range dirs {
		child, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if f := statFields(child); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			children = append(children, child)
		}
	}
	return children
}

// shmKey is the name the server's System V shared memory segment has in a
// process's memory map ("SYSV" and the key in 8 hex digits), read from the
// seventh line of postmaster.pid; "" if it has none.
func (s *Server) shmKey() string {
	lines, err := s.pidFile()
	if err != nil || len(lines) < 7 {
		return ""
	}
	fields := strings.Fields(lines[6])
	if len(fields) < 1 {
		return ""
	}
	k, err := strconv.ParseUint(fields[0], 10, 32)
	if err != nil || k == 0 {
		return ""
	}
	return fmt.Sprintf("/SYSV%08x ", k)
}

// dsmSegments lists the files of /dev/shm that the processes map: the
// dynamic shared memory segments of a server whose processes they are.
func dsmSegments(pids []int) []string {
	seen := map[string]bool{}
	var files []string
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			i := strings.Index(line, " /dev/shm/PostgreSQL.")
			if i < 0 {
				continue
			}
			f := strings.TrimSuffix(strings.TrimSpace(line[i:]), " (deleted)")
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
	}
	return files
}

// attachedTo lists the live processes whose memory map holds the segment
// named by key.
func attachedTo(key string) []int {
	maps, _ := filepath.Glob("/proc/[0-9]*/maps")
	var pids []int
	for _, f := range maps {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), key) {
			continue
		}
		if p, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil && p != os.Getpid() && alive(p) {
			pids = append(pids, p)
		}
	}
	return pids
}

// StartAfterKill starts s after Kill (crash recovery runs first). A start
// that fails right after the kill is tried again, up to 20 times, each
// try within 2 minutes: until init reaps the killed postmaster, a zombie
// with the pid of postmaster.pid, the new one takes it for a server still
// running.
func (s *Server) StartAfterKill(ctx context.Context) error {
	var err error
	for range 20 {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = s.Restart(tctx, "")
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	return err
}

// alive reports whether process pid exists and is not a zombie: a killed
// postmaster whose parent (pg_ctl exited, so init or a subreaper) has not
// reaped it yet holds no port and no file any more.
func alive(pid int) bool {
	st := state(pid)
	return st != "" && st != "Z" && st != "X"
}

// state is process pid's state letter in /proc (R, S, T, Z...), "" if it
// has none.
func state(pid int) string {
	if f := statFields(pid); len(f) > 0 {
		return f[0]
	}
	return ""
}

// statFields are the fields of /proc/<pid>/stat after the command's name
// (state, ppid, ...); nil if the process is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}
