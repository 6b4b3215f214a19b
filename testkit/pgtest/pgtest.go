// Package pgtest gives tests a real PostgreSQL: the server named by
// IDEM_TEST_DATABASE_URL, or a throwaway cluster started for the test binary.
// Each test gets a database of its own, so tests run in parallel without seeing
// each other's tables; NewDBFrom makes it a copy of a template prepared once
// per cluster (schema idem migrated: audittest.NewDB). StartPgBouncer puts a real pgbouncer (localpg's,
// stopped with the test) in front of it, and SessionLeftovers reads what
// clients left on its server connections. It is for tests only and must
// never be imported by production code.
package pgtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idem-data/idem/internal/localpg"
)

// EnvURL names the variable holding an admin URL of an existing server.
const EnvURL = "IDEM_TEST_DATABASE_URL"

var (
	adminURL string
	server   *localpg.Server
	seq      atomic.Int64
)

// Main wraps testing.M: it starts a throwaway cluster unless EnvURL is set,
// runs the tests and stops it.
func Main(m *testing.M) {
	os.Exit(run(m, false))
}

// Run is Main's work without the exit: it returns the tests' exit code,
// for a TestMain that has more to clean up.
func Run(m *testing.M) int { return run(m, false) }

// MainNoLeaks is Main for packages whose tests start goroutines: once the
// tests passed and atEnd ran (stopping what the tests share, a browser
// for example), a goroutine still running fails the package (goleak).
func MainNoLeaks(m *testing.M, atEnd ...func()) {
	os.Exit(run(m, true, atEnd...))
}

func run(m *testing.M, leaks bool, atEnd ...func()) int {
	adminURL = os.Getenv(EnvURL)
	if adminURL == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		// The binary's shared cluster is a copy of a pristine one: nothing
		// tells it apart from another cluster by its identity.
		s, err := localpg.Start(ctx, localpg.Options{Copy: true})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: cannot start PostgreSQL:", err)
			return 1
		}
		server = s
		adminURL = s.URL("postgres")
		defer s.Close()
	}
	code := m.Run()
	for _, f := range atEnd {
		f()
	}
	if leaks && code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: goroutines left running after the tests:", err)
			return 1
		}
	}
	return code
}

// Server returns the throwaway cluster, or nil when tests use EnvURL.
func Server() *localpg.Server { return server }

// AdminURL is the URL of the maintenance database.
func AdminURL() string { return adminURL }

// GateSQL creates staging.gate() (schema staging must exist): a source that
// calls it in its WHERE sleeps once per transaction for staging.gate_on.ms
// milliseconds while that table has a row, so a test can catch a load
// mid-statement, make loads overlap, or make one last longer than the ack wait.
const GateSQL = `
CREATE TABLE staging.gate_on (ms int);
CREATE FUNCTION staging.gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE ms int;
BEGIN
  IF current_setting('idem_test.slept', true) IS DISTINCT FROM 'y' THEN
    SELECT max(g.ms) INTO ms FROM staging.gate_on g;
    IF ms IS NOT NULL THEN
      PERFORM set_config('idem_test.slept', 'y', true);
      PERFORM pg_sleep(ms / 1000.0);
    END IF;
  END IF;
  RETURN true;
END $$;
`

// DB is one test's database.
type DB struct {
	Name string
	URL  string
	Pool *pgxpool.Pool
}

// NewDB creates a fresh database for t on the shared cluster, dropped when t
// ends.
func NewDB(t testing.TB) *DB {
	t.Helper()
	if adminURL == "" {
		t.Fatal("pgtest: call pgtest.Main from TestMain")
	}
	return NewDBAt(t, adminURL)
}

// NewDBAt creates a fresh database for t on the cluster adminURL points at
// (a test that stops or breaks its server brings its own), dropped when t
// ends if that server still answers.
func NewDBAt(t testing.TB, adminURL string) *DB {
	t.Helper()
	db, err := newDB(t, adminURL, "")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return db
}

// NewDBFrom is NewDB for a database that starts as a copy of a template
// setup prepared once per cluster and key (CREATE DATABASE … TEMPLATE
// copies the catalog instead of replaying the DDL in every test): for
// example the idem schema at its latest version (audittest.NewDB).
func NewDBFrom(t testing.TB, key string, setup func(ctx context.Context, pool *pgxpool.Pool) error) *DB {
	t.Helper()
	if adminURL == "" {
		t.Fatal("pgtest: call pgtest.Main from TestMain")
	}
	return NewDBAtFrom(t, adminURL, key, setup)
}

// NewDBAtFrom is NewDBFrom on the cluster adminURL points at.
func NewDBAtFrom(t testing.TB, adminURL, key string, setup func(ctx context.Context, pool *pgxpool.Pool) error) *DB {
	t.Helper()
	// A cluster that stopped may be followed by another at the same
	// address (its port free again), without the template made on the
	// first: one missing template is made again.
	for again := false; ; again = true {
		tpl, err := template(adminURL, key, setup)
		if err != nil {
			t.Fatalf("pgtest: template %s: %v", key, err)
		}
		db, err := newDB(t, adminURL, tpl)
		var pgErr *pgconn.PgError
		if !again && errors.As(err, &pgErr) && pgErr.Code == "3D000" {
			forgetTemplate(adminURL, key, tpl)
			continue
		}
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		return db
	}
}

// templates are the template databases made so far, by cluster and key.
var templates struct {
	sync.Mutex
	made map[[2]string]string
	errs map[[2]string]error
}

// template makes (once) and names the template database of key on the
// cluster at adminURL: a database setup ran in, with no connection left
// open to it, which is what CREATE DATABASE … TEMPLATE needs. It is left
// for the cluster's end, as the cluster is the test binary's.
func template(adminURL, key string, setup func(ctx context.Context, pool *pgxpool.Pool) error) (string, error) {
	templates.Lock()
	defer templates.Unlock()
	k := [2]string{adminURL, key}
	if name, ok := templates.made[k]; ok {
		return name, templates.errs[k]
	}
	if templates.made == nil {
		templates.made, templates.errs = map[[2]string]string{}, map[[2]string]error{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := fmt.Sprintf("tpl_%d_%d", os.Getpid(), seq.Add(1))
	err := func() error {
		admin, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return err
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+fileCopy); err != nil {
			return err
		}
		pool, err := pgxpool.New(ctx, withDB(adminURL, name))
		if err != nil {
			return err
		}
		defer pool.Close()
		return setup(ctx, pool)
	}()
	templates.made[k], templates.errs[k] = name, err
	return name, err
}

// forgetTemplate drops the record of key's template name on the cluster
// at adminURL, which no longer has it.
func forgetTemplate(adminURL, key, name string) {
	templates.Lock()
	defer templates.Unlock()
	k := [2]string{adminURL, key}
	if templates.made[k] == name {
		delete(templates.made, k)
		delete(templates.errs, k)
	}
}

// fileCopy is how test databases are made: copying the template's files
// costs the server about a third of the CPU of PostgreSQL 15's default
// (WAL_LOG writes every page of the template through the WAL), and the
// checkpoint it asks for is cheap on a cluster without fsync.
const fileCopy = " STRATEGY FILE_COPY"

// newDB creates t's database, a copy of template tpl ("" for none).
func newDB(t testing.TB, adminURL, tpl string) (*DB, error) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("t_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, seq.Add(1))
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(ctx)
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if tpl != "" {
		create += " TEMPLATE " + pgx.Identifier{tpl}.Sanitize()
	}
	create += fileCopy
	if _, err := admin.Exec(ctx, create); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	url := withStatementMode(withDB(adminURL, name))
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	db := &DB{Name: name, URL: url, Pool: pool}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return db, nil
}

// Exec runs SQL statements (separated by semicolons, simple protocol) or fails t.
func (db *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("pgtest: %v\nSQL: %s", err, sql)
	}
}

// Int returns a single integer value of a query or fails t.
func (db *DB) Int(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("pgtest: %v\nSQL: %s", err, sql)
	}
	return n
}

// Checksum is an ordered digest of every row of a table or query: equal
// checksums mean byte-identical contents.
func (db *DB) Checksum(t testing.TB, relationOrQuery string) string {
	t.Helper()
	q := relationOrQuery
	if !strings.Contains(strings.ToLower(q), "select") {
		q = "SELECT * FROM " + q
	}
	var sum string
	err := db.Pool.QueryRow(context.Background(),
		"SELECT coalesce(md5(string_agg(r::text, E'\\n' ORDER BY r::text)), 'empty') || ':' || count(*) FROM ("+q+") r").Scan(&sum)
	if err != nil {
		t.Fatalf("pgtest: checksum: %v", err)
	}
	return sum
}

// EnvStatementMode names the variable that runs a test binary's pools, and
// the idem processes given a test database's URL, in one of
// postgres.statement_mode's modes (prepare, describe): `make
// test-statement-modes` runs the strategy and handler suites in each.
const EnvStatementMode = "IDEM_TEST_STATEMENT_MODE"

// withStatementMode adds the mode EnvStatementMode names to url, as pgx's
// default_query_exec_mode (idem keeps a URL's mode under statement_mode
// auto).
func withStatementMode(url string) string {
	v := os.Getenv(EnvStatementMode)
	if v == "" {
		return url
	}
	mode, ok := map[string]string{"prepare": "cache_statement", "describe": "cache_describe"}[v]
	if !ok {
		panic(fmt.Sprintf("pgtest: %s=%q: want prepare or describe", EnvStatementMode, v))
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "default_query_exec_mode=" + mode
}

func withDB(url, db string) string {
	// URLs here are always postgres://user@host:port/db?params.
	rest := url[len("postgres://"):]
	slash := strings.Index(rest, "/")
	q := ""
	if i := strings.Index(rest, "?"); i >= 0 {
		q = rest[i:]
	}
	if slash < 0 {
		return "postgres://" + rest + "/" + db + q
	}
	return "postgres://" + rest[:slash] + "/" + db + q
}

// DefaultParallel makes -test.parallel n unless the command line gave it:
// for suites that wait on servers far more than they compute, which a
// two-core machine would otherwise run two at a time. Call it from
// TestMain, before Main.
func DefaultParallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// PrimaryWithStandby starts a cluster of its own and a streaming standby
// of it (a source that a test pauses, restarts or promotes), with a
// connection to each; all are closed when t ends.
func PrimaryWithStandby(t testing.TB) (primary, standby *localpg.Server, pc, sc *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	primary, err := localpg.Start(ctx, localpg.Options{})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	standby, err = primary.Standby(ctx, 0)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = standby.Close() })
	for _, c := range []struct {
		s    *localpg.Server
		conn **pgx.Conn
	}{{primary, &pc}, {standby, &sc}} {
		conn, err := pgx.Connect(ctx, c.s.URL(""))
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		*c.conn = conn
	}
	return primary, standby, pc, sc
}
