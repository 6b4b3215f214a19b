package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/embeddednats"
	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/internal/service"
)

// Names of what the harness creates in servers it may share with others.
const (
	streamName   = "IDEMBENCH_EVENTS"
	dlqName      = "IDEMBENCH_DLQ"
	consumerName = "idembench"
	subjectPre   = "idembench.ready"
	dlqPre       = "idembench.dlq"
	naiveStream  = "IDEMBENCH_NAIVE"
	naiveSubject = "idembench.naive"
	pipeline     = "bench"
)

// env is one run's servers, database and binary.
type env struct {
	opts  Options
	sizes Sizes
	res   *Results

	work     string
	pg       *localpg.Server
	adminURL string
	dbName   string
	dbURL    string
	pool     *pgxpool.Pool

	ns      *embeddednats.Server
	natsURL string
	nc      *nats.Conn
	js      jetstream.JetStream

	idemBin string
	pgbench string
	// idemParams are the session settings idem serve's pool sets (see
	// idemRuntimeParams); the replayed limit and the in-process handler use
	// them too.
	idemParams map[string]string
	// stats: pg_stat_statements is loaded; tuples: pgstattuple is available.
	stats, tuples bool
	children      []*idemProc
	// postmaster is the benchmark cluster's postmaster pid (0: not on
	// this machine, CPU is not measured).
	postmaster int
	// profileAddr, when the harness profiles the day-one passes
	// (IDEM_BENCH_PROFILE names a folder), is the address of the serves'
	// http endpoint, where it asks for their CPU profiles.
	profileAddr string
	// configExtra is appended to the next config startIdem writes (a
	// section of its own, such as tracing:).
	configExtra string
	// serveEnv adds variables to the environment of the `idem serve`
	// children startIdem starts (the S3 credentials of the sources
	// benchmark).
	serveEnv []string
	// serve is where the configs startIdem writes point idem, and how it
	// sends statements there (see serveThrough).
	serve serveRoute
	// poolerPid is a pooler's process, whose CPU withCPU counts while
	// it is not 0.
	poolerPid int
}

// serveRoute is the postgres: section of idem's config: url (empty: the
// harness's database itself) and statement_mode (empty: left out, auto).
type serveRoute struct{ url, statementMode string }

// serveThrough makes the configs startIdem writes use r until restore is
// called.
func (e *env) serveThrough(r serveRoute) (restore func()) {
	old := e.serve
	e.serve = r
	return func() { e.serve = old }
}

func (e *env) logf(format string, args ...any) {
	if e.opts.Progress != nil {
		fmt.Fprintf(e.opts.Progress, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func (e *env) start(ctx context.Context) error {
	var err error
	if e.work, err = os.MkdirTemp("", "idembench-"); err != nil {
		return err
	}
	if err := e.startPostgres(ctx); err != nil {
		return err
	}
	if err := e.startNATS(); err != nil {
		return err
	}
	if err := e.buildIdem(ctx); err != nil {
		return err
	}
	e.findPgbench("columns")
	if e.idemParams, err = idemRuntimeParams(e.dbURL); err != nil {
		return err
	}
	e.describeMachine(ctx)
	e.findPostmaster(ctx)
	var params []string
	for k, v := range e.idemParams {
		params = append(params, k+"="+v)
	}
	sort.Strings(params)
	e.res.Machine.Settings["idem pool session"] = strings.Join(params, " ")
	return nil
}

// idemRuntimeParams are the session settings idem serve's pool sets on url
// (service.PoolConfig), so the limit replays idem's SQL under the same
// settings (synchronous_commit = off for bookkeeping, for one). The
// application name stays the harness's own.
func idemRuntimeParams(url string) (map[string]string, error) {
	cfg, err := service.PoolConfig(url, 0)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range cfg.ConnConfig.RuntimeParams {
		if k != "application_name" {
			out[k] = v
		}
	}
	return out, nil
}

// connectAsIdem opens a connection with idem's session settings.
func (e *env) connectAsIdem(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(e.dbURL)
	if err != nil {
		return nil, err
	}
	for k, v := range e.idemParams {
		cfg.RuntimeParams[k] = v
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// poolAsIdem opens a pool of size conns with idem's session settings, all
// connected.
func (e *env) poolAsIdem(ctx context.Context, size int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	if err != nil {
		return nil, err
	}
	for k, v := range e.idemParams {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	cfg.MaxConns = int32(size)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// Connect them all now, not inside a timed run.
	conns := make([]*pgxpool.Conn, size)
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	for _, c := range conns {
		c.Release()
	}
	return pool, nil
}

// startCluster starts the throwaway cluster the harness measures on,
// with pg_stat_statements; a durable one gets the larger shared_buffers.
func startCluster(ctx context.Context, durable bool) (*localpg.Server, error) {
	settings := []string{
		"shared_buffers = 1GB",
		"shared_preload_libraries = 'pg_stat_statements'",
		"pg_stat_statements.track = top",
		"pg_stat_statements.track_planning = on",
	}
	if !durable {
		settings[0] = "shared_buffers = 128MB"
	}
	return localpg.Start(ctx, localpg.Options{Durable: durable, Settings: settings})
}

func (e *env) startPostgres(ctx context.Context) error {
	e.adminURL = e.opts.AdminURL
	if e.adminURL == "" {
		e.logf("starting PostgreSQL (durable=%v)", e.opts.Durable)
		s, err := startCluster(ctx, e.opts.Durable)
		if err != nil {
			return err
		}
		e.pg = s
		e.adminURL = s.URL("postgres")
		e.res.Machine.OwnPG = true
	}
	admin, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redactURL(e.adminURL), err)
	}
	defer admin.Close(ctx)
	e.dbName = fmt.Sprintf("idembench_%d_%d", os.Getpid(), time.Now().Unix()%100000)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{e.dbName}.Sanitize()); err != nil {
		return fmt.Errorf("the harness works in a database of its own and could not create one (the role needs CREATEDB): %w", err)
	}
	if e.dbURL, err = withDatabase(e.adminURL, e.dbName); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = 40
	cfg.ConnConfig.RuntimeParams["application_name"] = "idembench"
	if e.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	if _, err := audit.Migrate(ctx, e.pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := e.pool.Exec(ctx, "CREATE SCHEMA bench"); err != nil {
		return err
	}
	if err := e.seedAudit(ctx, 5*e.sizes.Partitions); err != nil {
		return err
	}
	// Optional instruments: their absence only removes figures.
	if _, err := e.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err == nil {
		_, err = e.pool.Exec(ctx, "SELECT pg_stat_statements_reset()")
		e.stats = err == nil
	}
	_, err = e.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pgstattuple")
	e.tuples = err == nil
	if !e.tuples {
		e.res.note("pgstattuple is not available: dead tuples come from pg_stat_user_tables, which can lag up to 10 s")
	}
	e.res.Machine.Extension = map[string]bool{"pg_stat_statements": e.stats, "pgstattuple": e.tuples}
	return nil
}

func (e *env) startNATS() error {
	e.natsURL = e.opts.NATSURL
	if e.natsURL == "" {
		// In this process, as the e2e tests do, so it outlives the children.
		ns, err := embeddednats.Start(embeddednats.Options{StoreDir: filepath.Join(e.work, "jetstream")})
		if err != nil {
			return err
		}
		e.ns = ns
		e.natsURL = ns.URL()
		e.res.Machine.OwnNATS = true
	}
	var err error
	if e.nc, err = nats.Connect(e.natsURL, nats.Name("idembench")); err != nil {
		return fmt.Errorf("connect to NATS %s: %w", e.natsURL, err)
	}
	e.js, err = jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(4096))
	return err
}

// findPgbench finds pgbench beside the server's binaries, else on PATH;
// without it, the report's pgbench figures (what) are left empty.
func (e *env) findPgbench(what string) {
	if d, err := localpg.BinDir(); err == nil {
		if _, err := os.Stat(filepath.Join(d, "pgbench")); err == nil {
			e.pgbench = filepath.Join(d, "pgbench")
		}
	}
	if e.pgbench == "" {
		e.pgbench, _ = exec.LookPath("pgbench")
	}
	if e.pgbench == "" {
		e.res.note("pgbench not found: the pgbench %s are empty", what)
	}
}

func (e *env) buildIdem(ctx context.Context) error {
	if e.opts.IdemBin != "" {
		e.idemBin = e.opts.IdemBin
		return nil
	}
	e.idemBin = filepath.Join(e.work, "idem")
	// A production build: no test hooks.
	return e.goBuild(ctx, "idem", e.idemBin, "./cmd/idem")
}

// goBuild builds pkg of the module (or one it requires) into bin.
func (e *env) goBuild(ctx context.Context, name, bin, pkg string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	e.logf("building %s", name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", name, err, out)
	}
	return nil
}

// moduleRoot finds the idem repository from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/idem-data/idem\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run the harness from inside the idem repository, or pass a built binary (-idem)")
		}
		dir = parent
	}
}

// close stops and removes everything start created.
func (e *env) close() {
	for _, p := range e.children {
		p.kill()
	}
	if e.nc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for _, s := range []string{streamName, dlqName, streamName + "_ADVISORIES", naiveStream} {
			_ = e.js.DeleteStream(ctx, s)
		}
		cancel()
		e.nc.Close()
	}
	if e.ns != nil {
		e.ns.Stop()
	}
	if e.pool != nil {
		e.pool.Close()
	}
	if e.dbName != "" && e.pg == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if c, err := pgx.Connect(ctx, e.adminURL); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{e.dbName}.Sanitize()+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
		cancel()
	}
	if e.pg != nil {
		_ = e.pg.Close()
	}
	if e.work != "" {
		if e.opts.KeepWork {
			e.logf("work directory kept: %s", e.work)
		} else {
			_ = os.RemoveAll(e.work)
		}
	}
}

// withDatabase points a connection string at database db.
func withDatabase(conn, db string) (string, error) {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + db
		return u.String(), nil
	}
	return conn + " dbname=" + db, nil
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}

// exec runs statements on the harness pool.
func (e *env) exec(ctx context.Context, sqls ...string) error {
	for _, s := range sqls {
		if _, err := e.pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("%w\nSQL: %s", err, s)
		}
	}
	return nil
}

func (e *env) int64(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	err := e.pool.QueryRow(ctx, sql, args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("%w\nSQL: %s", err, sql)
	}
	return n, nil
}

// seedAudit gives idem's tables a history before anything is measured, as a
// service in production has: plans are made on an analysed, non-empty audit
// table and ledger (an emptied one makes the cached plans of its lookups seq
// scans, which then grow with every event of a run).
func (e *env) seedAudit(ctx context.Context, rows int) error {
	return e.exec(ctx,
		fmt.Sprintf(`INSERT INTO idem.pipeline_audit (dag_id, task_id, logical_date, partition_key, run_id, status, attempt, row_count, started_at, finished_at)
		SELECT 'history', 'orders', date '2020-01-01' + g %% 3000, (date '2020-01-01' + g %% 3000)::text, 'scheduled__' || g, 'success', 1, 10,
		       now() - interval '1 day', now() - interval '1 day'
		  FROM generate_series(1, %d) g`, rows),
		`INSERT INTO idem.run_ledger (dag_id, task_id, partition_key, run_id, audit_id)
		SELECT dag_id, task_id, partition_key, run_id, id FROM idem.pipeline_audit WHERE dag_id = 'history'`,
		"VACUUM ANALYZE idem.pipeline_audit, idem.run_ledger",
	)
}

// settle vacuums the tables a run writes and checkpoints, outside any timing,
// so a run neither pays for the previous one's dead tuples nor for a
// checkpoint it did not cause.
func (e *env) settle(ctx context.Context, tables ...string) error {
	for _, t := range tables {
		if err := e.exec(ctx, "VACUUM (ANALYZE) "+t); err != nil {
			return err
		}
	}
	return e.exec(ctx, "CHECKPOINT")
}

func (e *env) sampleLoad(at string) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return
	}
	p := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	e.res.Load = append(e.res.Load, LoadSample{At: at, Load1: p(f[0]), Load5: p(f[1]), Load15: p(f[2])})
}

func (e *env) describeMachine(ctx context.Context) {
	m := &e.res.Machine
	m.CPUs = runtime.NumCPU()
	m.Go = runtime.Version()
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		fmt.Sscanf(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"), "%f", &kb)
		m.MemGiB = float64(int(kb/1024/1024*10+0.5)) / 10
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.NATS = e.nc.ConnectedServerVersion()
	_ = e.pool.QueryRow(ctx, "SHOW server_version").Scan(&m.Postgres)
	m.Settings = map[string]string{}
	rows, err := e.pool.Query(ctx, `SELECT name, current_setting(name) FROM pg_settings WHERE name IN
		('shared_buffers','fsync','synchronous_commit','full_page_writes','wal_level','max_wal_size','work_mem','jit','autovacuum','checkpoint_timeout')`)
	if err == nil {
		for rows.Next() {
			var k, v string
			if rows.Scan(&k, &v) == nil {
				m.Settings[k] = v
			}
		}
		rows.Close()
	}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
			if n := len(strings.FieldsFunc(string(st), func(r rune) bool { return r == '\n' })); n > 0 {
				m.Commit += fmt.Sprintf(" + %d modified files", n)
			}
		}
	}
}

// waitFor polls cond every interval until it reports done or the deadline.
func waitFor(ctx context.Context, within, every time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", within, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}
