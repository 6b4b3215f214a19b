package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/localpg"
)

// Day one: a fresh install's first backfill. For each history size the
// scenario starts from nothing a user has not got on day one: a new
// database migrated by `idem migrate` (the real binary), an audit history
// of other datasets seeded in one INSERT .. SELECT and never ANALYZEd by
// the harness, an empty target, a nats-server process of its own with a new
// file store, and a backlog published while `idem serve` is not running.
// Then `idem serve` starts and drains it (cold); the same partitions again
// once VACUUM ANALYZE ran (warm); reruns at max_in_flight 1; exact
// duplicates; and pgbench's pattern on the same tables. Throughput comes
// from the audit's own timestamps, so the harness sends no SQL while idem
// works: it watches the consumer's ack floor on the NATS server instead.

// ColdResults is what RunCold measured; the JSON file is this struct.
type ColdResults struct {
	Mode     Mode      `json:"mode"`
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
	// Events is E, the backlog of the cold and warm passes (the
	// max_in_flight 1 and duplicate passes take E/4).
	Events int          `json:"events"`
	Sizes  []ColdSize   `json:"sizes"`
	Notes  []string     `json:"notes,omitempty"`
	Load   []LoadSample `json:"load"`
}

// ColdSize is every pass at one history size.
type ColdSize struct {
	History HistorySize `json:"history"`
	// Rows is the seeded attempts, History.Rows().
	Rows        int     `json:"history_rows"`
	SeedSeconds float64 `json:"seed_seconds"`
	// Autovacuum is the statistics the cold pass met.
	Autovacuum ColdAutovacuum `json:"autovacuum"`
	Cold       *ColdPass      `json:"cold,omitempty"`
	Warm       *ColdPass      `json:"warm,omitempty"`
	Skipped    *ColdPass      `json:"skipped,omitempty"`
	InFlight1  *ColdPass      `json:"in_flight_1,omitempty"`
	Pgbench4   *ColdPgbench   `json:"pgbench_c4,omitempty"`
	Pgbench1   *ColdPgbench   `json:"pgbench_c1,omitempty"`
}

// ColdAutovacuum says how far autovacuum had got with the seeded audit
// when the backlog arrived: the harness waits for it (up to a bound), it
// never runs ANALYZE itself before the cold pass.
type ColdAutovacuum struct {
	// Settled: autovacuum had nothing left to do with the seeded tables.
	Settled       bool    `json:"settled"`
	WaitedSeconds float64 `json:"waited_seconds"`
	// AuditAnalyzed: idem.pipeline_audit had been analysed (by autovacuum).
	AuditAnalyzed bool `json:"audit_analyzed"`
	// AuditReltuples is pg_class.reltuples of idem.pipeline_audit at the
	// cold pass (-1: never vacuumed nor analysed).
	AuditReltuples float64 `json:"audit_reltuples"`
}

// ColdPass is one drain of a backlog by a new `idem serve`.
type ColdPass struct {
	InFlight int `json:"in_flight"`
	Events   int `json:"events"`
	// Status is what every event's attempt ended as (success, skipped).
	Status string `json:"status"`
	// SpanSeconds runs from the first attempt's started_at to the last
	// one's finished_at, in the audit.
	SpanSeconds float64 `json:"span_seconds"`
	PerSec      float64 `json:"per_sec"`
	// CPU is the processor time per event from just before `idem serve`
	// started to the drain, by process (idem's includes its start-up).
	CPU     *ColdCPU        `json:"cpu,omitempty"`
	PeakMiB float64         `json:"peak_mib"`
	Top     []ColdStatement `json:"top_statements,omitempty"`
}

// MsPer is the wall time per event, in milliseconds.
func (p *ColdPass) MsPer() float64 {
	if p == nil || p.Events == 0 {
		return 0
	}
	return p.SpanSeconds * 1000 / float64(p.Events)
}

// ColdCPU is CPU microseconds per event by process.
type ColdCPU struct {
	Postgres float64 `json:"postgres_us"`
	Idem     float64 `json:"idem_us"`
	NATS     float64 `json:"nats_us"`
	Harness  float64 `json:"harness_us"`
}

// ColdStatement is one line of pg_stat_statements after a pass.
type ColdStatement struct {
	Query       string  `json:"query"`
	Calls       int64   `json:"calls"`
	MeanMs      float64 `json:"mean_ms"`
	PlanTotalMs float64 `json:"plan_total_ms"`
	TotalMs     float64 `json:"total_ms"`
	Rows        int64   `json:"rows"`
}

// ColdPgbench is pgbench's pattern on the same tables.
type ColdPgbench struct {
	Clients      int     `json:"clients"`
	Transactions int     `json:"transactions"`
	TPS          float64 `json:"tps"`
	AvgMs        float64 `json:"avg_ms"`
	// PostgresUsPerTx is the cluster's CPU per transaction.
	PostgresUsPerTx float64 `json:"postgres_us_per_tx,omitempty"`
}

// Save writes r as indented JSON.
func (r *ColdResults) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// LoadCold reads a file ColdResults.Save wrote.
func LoadCold(path string) (*ColdResults, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r ColdResults
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// coldSizes are a mode's backlog and histories.
type coldSizes struct {
	events    int
	histories []HistorySize
	// vacuumWait bounds the wait for autovacuum after a seed.
	vacuumWait time.Duration
	// warmUp runs every pass once at 0 attempts, unrecorded, before the
	// first size: the harness's new cluster creates its first WAL
	// segments and the binaries start for the first time there, which a
	// user's long-running server does not pay for on day one.
	warmUp bool
}

func coldSizesFor(m Mode) (coldSizes, error) {
	young := []HistorySize{{}, {Datasets: 10, Days: 20}}
	switch m {
	case ModeFull:
		return coldSizes{events: 6000, vacuumWait: 10 * time.Minute, warmUp: true, histories: append(young,
			HistorySize{Datasets: 20, Days: 100}, HistorySize{Datasets: 50, Days: 400}, HistorySize{Datasets: 500, Days: 4000})}, nil
	case ModeQuick:
		return coldSizes{events: 600, vacuumWait: 30 * time.Second, warmUp: true, histories: young}, nil
	case ModeTiny:
		return coldSizes{events: 200, histories: young}, nil
	}
	return coldSizes{}, fmt.Errorf("unknown mode %q (want full, quick or tiny)", m)
}

const (
	coldDataset   = "cold"
	coldInFlight  = 4
	coldCheckWait = 2 * time.Minute
)

// coldPgbenchScript is pgbench1tx on the day-one tables with the
// partition's advisory lock taken first, as idem's load takes one.
var coldPgbenchScript = strings.Replace(
	strings.NewReplacer("bench.small_t", "bench.cold_t", "bench.small_src", "bench.cold_src", "'small'", "'cold'").Replace(pgbench1tx),
	"BEGIN;\n", "BEGIN;\nSELECT pg_advisory_xact_lock(hashtext((date '"+smallBase+"' + :d::int)::text));\n", 1)

// cold is one RunCold: env's fields point at the current history's
// database and nats-server.
type cold struct {
	*env
	sizes   coldSizes
	out     *ColdResults
	natsBin string
	nats    *natsChild
	// described: the machine is described once, on the first database.
	described bool
}

// RunCold runs the day-one scenario at each history size of opts.Mode
// (full: 0 to 10M attempts, 6,000 events; quick: 0 and 1k, 600; tiny: the
// smoke test's 0 and 1k, 200). It starts its own PostgreSQL unless
// opts.AdminURL names one, and always its own nats-server; opts.NATSURL is
// not used.
func RunCold(ctx context.Context, opts Options) (*ColdResults, error) {
	sz, err := coldSizesFor(opts.Mode)
	if err != nil {
		return nil, err
	}
	out := &ColdResults{Mode: opts.Mode, Command: opts.Command, Started: time.Now().UTC(), Events: sz.events}
	c := &cold{env: &env{opts: opts, res: &Results{}}, sizes: sz, out: out}
	defer c.close()
	c.sampleLoad("start")
	if err := c.start(ctx); err != nil {
		return out, err
	}
	if sz.warmUp {
		c.logf("== day one, warm-up at 0 history rows (not recorded)")
		if err := c.atHistory(ctx, "warmup", &ColdSize{}); err != nil {
			c.finish()
			return out, fmt.Errorf("warm-up: %w", err)
		}
	}
	for i, h := range sz.histories {
		c.logf("== day one at %s history rows", thousands(int64(h.Rows())))
		s := ColdSize{History: h, Rows: h.Rows()}
		err := c.atHistory(ctx, strconv.Itoa(i), &s)
		out.Sizes = append(out.Sizes, s)
		c.sampleLoad(fmt.Sprintf("cold %s", labelRows(h.Rows())))
		if err != nil {
			c.finish()
			return out, fmt.Errorf("%s history rows: %w", thousands(int64(h.Rows())), err)
		}
	}
	c.finish()
	return out, nil
}

func (c *cold) finish() {
	c.out.Finished = time.Now().UTC()
	c.out.Machine, c.out.Notes, c.out.Load = c.res.Machine, c.res.Notes, c.res.Load
	c.out.Machine.OwnNATS = true
	c.out.Machine.NATSSync = "always"
	if os.Getenv("IDEM_BENCH_NATS_SYNC") == "default" {
		c.out.Machine.NATSSync = "default"
	}
}

// start makes the work directory, the cluster and the binaries.
func (c *cold) start(ctx context.Context) error {
	var err error
	if c.work, err = os.MkdirTemp("", "idembench-cold-"); err != nil {
		return err
	}
	if os.Getenv(EnvProfile) != "" {
		port, err := localpg.FreePort()
		if err != nil {
			return err
		}
		c.profileAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	c.adminURL = c.opts.AdminURL
	if c.adminURL == "" {
		// The cluster env.startPostgres starts.
		c.logf("starting PostgreSQL (durable=%v)", c.opts.Durable)
		if c.pg, err = startCluster(ctx, c.opts.Durable); err != nil {
			return err
		}
		c.adminURL = c.pg.URL("postgres")
		c.res.Machine.OwnPG = true
	}
	if err := c.buildIdem(ctx); err != nil {
		return err
	}
	c.natsBin = filepath.Join(c.work, "nats-server")
	if err := c.goBuild(ctx, "nats-server", c.natsBin, "github.com/nats-io/nats-server/v2"); err != nil {
		return err
	}
	c.findPgbench("rows")
	return nil
}

// close stops and removes everything RunCold started.
func (c *cold) close() {
	for _, p := range c.children {
		p.kill()
	}
	c.children = nil
	c.closeNATS()
	c.env.close()
}

func (c *cold) closeNATS() {
	if c.nc != nil {
		c.nc.Close()
		c.nc, c.js = nil, nil
	}
	if c.nats != nil {
		c.nats.stop()
		c.nats = nil
	}
}

// atHistory runs every pass on a new database with s.History, its
// databases, configs and logs named by tag.
func (c *cold) atHistory(ctx context.Context, tag string, s *ColdSize) error {
	drop, err := c.freshDB(ctx, tag)
	defer drop()
	if err != nil {
		return err
	}
	if s.Rows > 0 {
		c.logf("seeding %s attempts (%d datasets × %d days × %d)", thousands(int64(s.Rows)), s.History.Datasets, s.History.Days, historyAttempts)
		t0 := time.Now()
		if err := seedYoungHistory(ctx, c.pool, s.History); err != nil {
			return err
		}
		s.SeedSeconds = time.Since(t0).Seconds()
		// Autovacuum's thresholds are read from the statistics, which a
		// backend reports after its transaction, up to seconds later.
		err := waitFor(ctx, time.Minute, 100*time.Millisecond, "the seed in the table statistics", func() (bool, error) {
			n, err := c.int64(ctx, `SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables
				WHERE schemaname = 'idem' AND relname = 'pipeline_audit'`)
			return n >= int64(s.Rows), err
		})
		if err != nil {
			return err
		}
	}
	if err := c.coldTables(ctx); err != nil {
		return err
	}
	if s.Autovacuum, err = c.waitAutovacuum(ctx); err != nil {
		return err
	}
	if err := c.startNATS(ctx, tag); err != nil {
		return err
	}
	defer c.closeNATS()
	if !c.described {
		c.describeMachine(ctx)
		c.findPostmaster(ctx)
		c.described = true
		if c.postmaster == 0 {
			c.res.note("PostgreSQL is not on this machine: its CPU is not measured")
		}
	}
	ds := []dataset{smallDataset(coldDataset, coldDataset)}
	cfg4, err := c.writeConfig(fmt.Sprintf("cold-%s-c%d", tag, coldInFlight), coldInFlight, ds)
	if err != nil {
		return err
	}
	cfg1, err := c.writeConfig(fmt.Sprintf("cold-%s-c1", tag), 1, ds)
	if err != nil {
		return err
	}
	// A fresh install creates its streams before anything is published.
	streams := exec.CommandContext(ctx, c.idemBin, "streams", "--config", cfg4)
	streams.Env = childEnv()
	if out, err := streams.CombinedOutput(); err != nil {
		return fmt.Errorf("idem streams: %w\n%s", err, out)
	}

	e, q := c.sizes.events, max(1, c.sizes.events/4)
	passes := []struct {
		name   string
		out    **ColdPass
		cfg    string
		c      int
		evs    []event
		status string
		settle bool
	}{
		{"cold", &s.Cold, cfg4, coldInFlight, eventsOf(coldDataset, "cold", e), audit.StatusSuccess, false},
		{"warm", &s.Warm, cfg4, coldInFlight, eventsOf(coldDataset, "warm", e), audit.StatusSuccess, true},
		// Exact duplicates of warm runs that succeeded, each with a new
		// Nats-Msg-Id so the stream keeps it.
		{"skipped", &s.Skipped, cfg4, coldInFlight, eventsOf(coldDataset, "warm", q), audit.StatusSkipped, true},
		{"in_flight_1", &s.InFlight1, cfg1, 1, eventsOf(coldDataset, "mif1", q), audit.StatusSuccess, true},
	}
	for _, p := range passes {
		if p.settle {
			if err := c.settleCold(ctx); err != nil {
				return err
			}
		}
		c.logf("%s: %d events at max_in_flight %d", p.name, len(p.evs), p.c)
		got, err := c.pass(ctx, tag+"-"+p.name, p.cfg, p.c, p.evs, p.status)
		if err != nil {
			return fmt.Errorf("%s pass: %w", p.name, err)
		}
		*p.out = got
		c.logf("%s: %.0f events/s over %.2fs (%.3f ms each)", p.name, got.PerSec, got.SpanSeconds, got.MsPer())
	}
	if c.pgbench == "" {
		return nil
	}
	for _, pb := range []struct {
		out        **ColdPgbench
		clients, n int
	}{{&s.Pgbench4, coldInFlight, e}, {&s.Pgbench1, 1, q}} {
		if err := c.settleCold(ctx); err != nil {
			return err
		}
		got, err := c.coldPgbench(ctx, pb.clients, pb.n)
		if err != nil {
			return err
		}
		*pb.out = got
		c.logf("pgbench -c %d: %.0f tps", pb.clients, got.TPS)
	}
	return nil
}

// freshDB creates a database named by tag, runs `idem migrate` on it and
// points the harness at it; drop removes it.
func (c *cold) freshDB(ctx context.Context, tag string) (drop func(), err error) {
	name := fmt.Sprintf("idembench_%d_cold_%s", os.Getpid(), tag)
	ident := pgx.Identifier{name}.Sanitize()
	drop = func() {
		if c.pool != nil {
			c.pool.Close()
			c.pool = nil
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if admin, err := pgx.Connect(dctx, c.adminURL); err == nil {
			_, _ = admin.Exec(dctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
			_ = admin.Close(dctx)
		}
	}
	admin, err := pgx.Connect(ctx, c.adminURL)
	if err != nil {
		return drop, fmt.Errorf("connect to %s: %w", redactURL(c.adminURL), err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+ident)
	_ = admin.Close(ctx)
	if err != nil {
		return drop, fmt.Errorf("the harness works in a database of its own and could not create one (the role needs CREATEDB): %w", err)
	}
	if c.dbURL, err = withDatabase(c.adminURL, name); err != nil {
		return drop, err
	}
	migrate := exec.CommandContext(ctx, c.idemBin, "migrate", "--database-url", c.dbURL)
	migrate.Env = childEnv()
	if out, err := migrate.CombinedOutput(); err != nil {
		return drop, fmt.Errorf("idem migrate: %w\n%s", err, out)
	}
	cfg, err := pgxpool.ParseConfig(c.dbURL)
	if err != nil {
		return drop, err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "idembench"
	if c.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return drop, err
	}
	_, err = c.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	if err == nil {
		_, err = c.pool.Exec(ctx, "SELECT pg_stat_statements_reset()")
	}
	if c.stats = err == nil; !c.stats && !c.described {
		c.res.note("pg_stat_statements is not available (%v): no top statements", err)
	}
	return drop, nil
}

// seedYoungHistory writes sz's attempts for datasets other than the
// scenario's, in the shape seedHistory writes (datasets × days × 5
// attempts and the ledger of the successes), under the harness's
// pipeline. The partitions span sz.Days days, but the attempts started
// within the last 30 days: a young install backfilled them, and none is
// old enough for the default retention to prune. Nothing is analysed.
func seedYoungHistory(ctx context.Context, pool *pgxpool.Pool, sz HistorySize) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	// Spread over the last 30 days, in id order.
	err = seedAttempts(ctx, conn, pipeline, sz,
		"now() - interval '30 days' + ((g::bigint * $4 + ds) * 5 + k) * (interval '30 days' / ($3::bigint * $4 * 5))")
	if err != nil {
		return err
	}
	// Report the seed to the statistics now rather than within seconds
	// (PostgreSQL 15 on; before, the wait that follows covers it).
	_, _ = conn.Exec(ctx, "SELECT pg_stat_force_next_flush()")
	return nil
}

// coldTables makes the source of E ten-row partitions, analysed (a
// warehouse table that exists before idem does), and the empty target
// idem fills, with its index and no statistics.
func (c *cold) coldTables(ctx context.Context) error {
	e := c.sizes.events
	return c.exec(ctx,
		"CREATE SCHEMA bench",
		"CREATE TABLE bench.cold_src "+rowDDL,
		"INSERT INTO bench.cold_src "+rowsSQL(smallBase, 0, e, 10),
		"CREATE INDEX ON bench.cold_src (event_date)",
		"VACUUM ANALYZE bench.cold_src",
		"CREATE TABLE bench.cold_t "+rowDDL,
		"CREATE INDEX ON bench.cold_t (event_date)",
	)
}

// waitAutovacuum waits, up to the mode's bound, until autovacuum has
// nothing left to do with the seeded audit and ledger (under its
// thresholds for analyse and for an insert vacuum, and no worker in the
// database), and says what the cold pass will meet.
func (c *cold) waitAutovacuum(ctx context.Context) (ColdAutovacuum, error) {
	const due = `
		SELECT count(*) FROM pg_stat_user_tables s JOIN pg_class r ON r.oid = s.relid
		 WHERE s.schemaname = 'idem' AND s.relname IN ('pipeline_audit', 'run_ledger')
		   AND (s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::float8
		                                + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(r.reltuples, 0)
		     OR s.n_ins_since_vacuum > current_setting('autovacuum_vacuum_insert_threshold')::float8
		                                + current_setting('autovacuum_vacuum_insert_scale_factor')::float8 * greatest(r.reltuples, 0))`
	const busy = `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'autovacuum worker'`
	var av ColdAutovacuum
	t0 := time.Now()
	deadline := t0.Add(c.sizes.vacuumWait)
	for polls := 0; ; {
		n, err := c.int64(ctx, due)
		if err != nil {
			return av, err
		}
		w, err := c.int64(ctx, busy)
		if err != nil {
			return av, err
		}
		if av.Settled = n == 0 && w == 0; av.Settled || !time.Now().Before(deadline) {
			break
		}
		if polls++; polls%30 == 0 {
			c.logf("waiting for autovacuum (%d tables due, %d workers)", n, w)
		}
		select {
		case <-ctx.Done():
			return av, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	av.WaitedSeconds = time.Since(t0).Seconds()
	err := c.pool.QueryRow(ctx, `SELECT s.last_autoanalyze IS NOT NULL OR s.last_analyze IS NOT NULL, r.reltuples
		  FROM pg_stat_user_tables s JOIN pg_class r ON r.oid = s.relid
		 WHERE s.schemaname = 'idem' AND s.relname = 'pipeline_audit'`).Scan(&av.AuditAnalyzed, &av.AuditReltuples)
	if err != nil {
		return av, err
	}
	if !av.Settled {
		c.res.note("autovacuum had not finished with a seeded history after %s: the cold pass shared the machine with it", c.sizes.vacuumWait)
	}
	c.logf("autovacuum: settled %v after %.0fs, audit analysed %v, reltuples %.0f", av.Settled, av.WaitedSeconds, av.AuditAnalyzed, av.AuditReltuples)
	return av, nil
}

// settleCold vacuums and analyses the tables the passes write and read,
// and the idem schema's, then checkpoints.
func (c *cold) settleCold(ctx context.Context) error {
	var idem string
	if err := c.pool.QueryRow(ctx, `SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
		FROM pg_tables WHERE schemaname = 'idem'`).Scan(&idem); err != nil {
		return err
	}
	return c.exec(ctx, "VACUUM ANALYZE bench.cold_t, bench.cold_src, "+idem, "CHECKPOINT")
}

// pass publishes evs while no `idem serve` runs, starts one at inFlight on
// cfg, waits until the consumer's ack floor passes the last event, and
// reads what the audit recorded: every attempt of these stream sequences
// must have ended as status.
func (c *cold) pass(ctx context.Context, name, cfg string, inFlight int, evs []event, status string) (*ColdPass, error) {
	if err := c.exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	first, last, err := c.publishBacklog(ctx, name, evs)
	if err != nil {
		return nil, err
	}
	if c.stats {
		if err := c.exec(ctx, "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)"); err != nil {
			return nil, err
		}
	}
	cons, err := c.js.Consumer(ctx, streamName, consumerName)
	if err != nil {
		return nil, err
	}
	c0, cpuOK := c.coldCPUNow(0)
	p, err := c.startServe(name, cfg)
	if err != nil {
		return nil, err
	}
	defer p.kill()
	profiled := func() {}
	if dir := os.Getenv(EnvProfile); dir != "" && c.profileAddr != "" {
		// About the pass's length at 1,000 events/s.
		profiled = c.profilePass(ctx, dir, name, time.Duration(len(evs))*time.Millisecond)
	}
	within := coldCheckWait + time.Duration(len(evs))*20*time.Millisecond
	err = waitFor(ctx, within, 20*time.Millisecond, fmt.Sprintf("idem serve to ack %d events", len(evs)), func() (bool, error) {
		select {
		case err := <-p.done:
			p.done <- err
			return false, fmt.Errorf("idem serve exited (%v):\n%s", err, p.tail())
		default:
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return false, err
		}
		return info.AckFloor.Stream >= last, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, p.tail())
	}
	c1, ok := c.coldCPUNow(p.cmd.Process.Pid)
	out := &ColdPass{InFlight: inFlight, Events: len(evs), Status: status, PeakMiB: p.peakMiB()}
	if ok && cpuOK {
		us := func(a, b float64) float64 { return (b - a) * 1e6 / float64(len(evs)) }
		out.CPU = &ColdCPU{Postgres: us(c0.postgres, c1.postgres), Idem: us(0, c1.idem), NATS: us(c0.nats, c1.nats), Harness: us(c0.harness, c1.harness)}
	}
	if c.stats {
		if out.Top, err = c.topStatements(ctx); err != nil {
			return nil, err
		}
	}
	profiled()
	if err := p.stop(); err != nil {
		return nil, err
	}
	var done, failed int
	var msg *string
	var from, to *time.Time
	err = c.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = $5), count(*) FILTER (WHERE status = 'failed'),
		       max(error) FILTER (WHERE status = 'failed'), min(started_at), max(finished_at)
		  FROM idem.pipeline_audit WHERE dag_id = $1 AND task_id = $2 AND stream_seq BETWEEN $3 AND $4`,
		pipeline, coldDataset, int64(first), int64(last), status).Scan(&done, &failed, &msg, &from, &to)
	if err != nil {
		return nil, err
	}
	if failed > 0 || done != len(evs) || from == nil || to == nil {
		return nil, fmt.Errorf("the audit holds %d %s and %d failed attempts for %d events (%s)\n%s", done, status, failed, len(evs), deref(msg), p.tail())
	}
	out.SpanSeconds = to.Sub(*from).Seconds()
	if out.SpanSeconds > 0 {
		out.PerSec = float64(len(evs)) / out.SpanSeconds
	}
	return out, nil
}

// publishBacklog publishes evs (each with a Nats-Msg-Id of its own, so a
// duplicate of an earlier event is stored) and returns the first and last
// stream sequences, which must be consecutive.
func (c *cold) publishBacklog(ctx context.Context, tag string, evs []event) (first, last uint64, err error) {
	futures := make([]jetstream.PubAckFuture, len(evs))
	for i, ev := range evs {
		m, err := c.msg(ev)
		if err != nil {
			return 0, 0, err
		}
		m.Header = nats.Header{}
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("idembench-%s-%d-%d", tag, i, time.Now().UnixNano()))
		// The server syncs each write before its PubAck: the backlog may
		// outrun it by the whole pending window, so wait for room.
		if futures[i], err = c.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
			return 0, 0, err
		}
	}
	seqs, err := c.pubAcks(ctx, futures)
	if err != nil {
		return 0, 0, err
	}
	first, last = seqs[0], seqs[len(seqs)-1]
	if last-first+1 != uint64(len(evs)) {
		return 0, 0, fmt.Errorf("publish: %d events stored at sequences %d to %d", len(evs), first, last)
	}
	return first, last, nil
}

// startServe starts `idem serve` on cfg without waiting: the backlog is
// there, it starts loading as soon as it is up.
func (c *cold) startServe(name, cfg string) (*idemProc, error) {
	p, err := spawnServe(c.idemBin, c.work, name, cfg)
	if err != nil {
		return nil, err
	}
	c.children = append(c.children, p)
	return p, nil
}

// coldTimes is a snapshot of cumulative CPU seconds.
type coldTimes struct{ postgres, idem, nats, harness float64 }

// coldCPUNow samples the cluster, the harness, the nats-server child and
// idemPid when it is not 0.
func (c *cold) coldCPUNow(idemPid int) (coldTimes, bool) {
	if c.postmaster == 0 || c.nats == nil {
		return coldTimes{}, false
	}
	var t coldTimes
	var err error
	if t.postgres, err = clusterCPU(c.postmaster); err != nil {
		return coldTimes{}, false
	}
	if t.harness, err = procTicks(os.Getpid(), false); err != nil {
		return coldTimes{}, false
	}
	if t.nats, err = procTicks(c.nats.cmd.Process.Pid, false); err != nil {
		return coldTimes{}, false
	}
	if idemPid != 0 {
		if t.idem, err = procTicks(idemPid, false); err != nil {
			return coldTimes{}, false
		}
	}
	return t, true
}

// topStatements are the 8 statements of this database that took the most
// time (execution and planning) since the reset.
func (c *cold) topStatements(ctx context.Context) ([]ColdStatement, error) {
	rows, err := c.pool.Query(ctx, `
		SELECT query, calls, mean_exec_time, total_plan_time, total_exec_time + total_plan_time, rows
		  FROM pg_stat_statements
		 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		   AND query NOT LIKE '%pg_stat_statements%'
		 ORDER BY total_exec_time + total_plan_time DESC LIMIT 8`)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ColdStatement, error) {
		var s ColdStatement
		err := r.Scan(&s.Query, &s.Calls, &s.MeanMs, &s.PlanTotalMs, &s.TotalMs, &s.Rows)
		s.Query = clip(s.Query, 100)
		return s, err
	})
}

// clip is sql on one line, at most n characters.
func clip(sql string, n int) string {
	s := strings.Join(strings.Fields(sql), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// coldPgbench runs coldPgbenchScript with clients clients for about n
// transactions in all, with the cluster's CPU per transaction (its
// backends exit with pgbench and are counted once reaped).
func (c *cold) coldPgbench(ctx context.Context, clients, n int) (*ColdPgbench, error) {
	path := filepath.Join(c.work, fmt.Sprintf("cold-pgbench-c%d.sql", clients))
	if err := os.WriteFile(path, []byte(fmt.Sprintf(coldPgbenchScript, c.sizes.events-1)), 0o644); err != nil {
		return nil, err
	}
	per := max(1, (n+clients-1)/clients)
	out := &ColdPgbench{Clients: clients, Transactions: per * clients}
	before := c.backends()
	c0, ok0 := c.coldCPUNow(0)
	cmd := exec.CommandContext(ctx, c.pgbench, "-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(clients),
		"-t", strconv.Itoa(per), "-f", path, c.dbURL)
	cmd.Env = childEnv()
	b, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgbench -c %d: %w\n%s", clients, err, b)
	}
	c.reaped(before)
	if c1, ok := c.coldCPUNow(0); ok && ok0 {
		out.PostgresUsPerTx = (c1.postgres - c0.postgres) * 1e6 / float64(out.Transactions)
	}
	m := tpsRe.FindSubmatch(b)
	if m == nil {
		return nil, fmt.Errorf("pgbench -c %d: no tps in its output:\n%s", clients, b)
	}
	out.TPS, _ = strconv.ParseFloat(string(m[1]), 64)
	if m := latRe.FindSubmatch(b); m != nil {
		out.AvgMs, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	return out, nil
}

// natsChild is a nats-server process with a file store of its own.
type natsChild struct {
	cmd  *exec.Cmd
	done chan error
	log  string
}

// startNATS starts a new nats-server (a new store named by tag, a new
// port) and connects the harness to it.
func (c *cold) startNATS(ctx context.Context, tag string) error {
	port, err := localpg.FreePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(c.work, "nats-"+tag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	n := &natsChild{done: make(chan error, 1), log: filepath.Join(dir, "nats-server.log")}
	logf, err := os.Create(n.log)
	if err != nil {
		return err
	}
	// JetStream as deploy/nats/nats-server.conf ships it (e2e checks that
	// file): a file store that syncs every write before acknowledging it.
	// IDEM_BENCH_NATS_SYNC=default measures the server's default (a sync every two
	// minutes) instead.
	sync := "  sync_interval: always\n"
	if os.Getenv("IDEM_BENCH_NATS_SYNC") == "default" {
		sync = ""
	}
	confPath := filepath.Join(dir, "nats-server.conf")
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n%s}\n", port, filepath.Join(dir, "store"), sync)
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		logf.Close()
		return err
	}
	n.cmd = exec.Command(c.natsBin, "-c", confPath)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	go func() { err := n.cmd.Wait(); logf.Close(); n.done <- err }()
	c.nats = n
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	err = waitFor(ctx, 30*time.Second, 20*time.Millisecond, "nats-server to listen on "+addr, func() (bool, error) {
		select {
		case err := <-n.done:
			n.done <- err
			b, _ := os.ReadFile(n.log)
			return false, fmt.Errorf("nats-server exited (%v):\n%s", err, b)
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
	if err != nil {
		return err
	}
	c.natsURL = "nats://" + addr
	if c.nc, err = nats.Connect(c.natsURL, nats.Name("idembench")); err != nil {
		return fmt.Errorf("connect to NATS %s: %w", c.natsURL, err)
	}
	if c.js, err = jetstream.New(c.nc, jetstream.WithPublishAsyncMaxPending(4096)); err != nil {
		return err
	}
	return waitFor(ctx, 30*time.Second, 50*time.Millisecond, "JetStream to be ready", func() (bool, error) {
		_, err := c.js.AccountInfo(ctx)
		return err == nil, nil
	})
}

// stop sends SIGTERM and waits; a server that does not stop is killed.
func (n *natsChild) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.done:
		n.done <- err
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		n.done <- <-n.done
	}
}
