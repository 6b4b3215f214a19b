package service

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/clock"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/lineage"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/internal/relay"
	"github.com/idem-data/idem/internal/resultstream"
	"github.com/idem-data/idem/internal/tracing"
)

// Options is what Run needs. Config is required; everything else has a
// working zero value.
type Options struct {
	// Config is a validated config.
	Config *config.Config
	// Log receives the service's log lines.
	Log zerolog.Logger
	// BuildVersion is idem's own version, reported by the metrics.
	BuildVersion string
	// Grace is how long in-flight loads may finish once ctx is cancelled
	// before they are interrupted and nak'ed; zero means the consumer's
	// default.
	Grace time.Duration

	// Pool and NATS are the connections to use. When nil, Run opens them
	// from the config, waiting at start for a server that cannot be reached
	// yet, and closes them when it returns; a connection handed in stays
	// the caller's to close. Run drains the NATS connection either way.
	Pool *pgxpool.Pool
	NATS *nats.Conn
	// ClientName names the NATS connection Run opens in the server's
	// monitoring ("idem serve").
	ClientName string

	// Ready, when set, is called once the consumer is about to fetch, with
	// the address the HTTP server listens on.
	Ready func(addr string)
	// Reload, when set, reads the config again on SIGHUP.
	Reload func() (*config.Config, error)
}

// Run runs the service until ctx is cancelled; it returns nil after a clean
// stop.
func Run(ctx context.Context, o Options) error {
	cfg, log := o.Config, o.Log
	pool, nc := o.Pool, o.NATS
	hook := &connHook{}
	var (
		route Route
		plans *planAges
	)
	// First, so that the pool's sessions get the statement tracer. Spans
	// are exported in the background: nothing on an event's path waits
	// for the collector, and the shutdown is bounded.
	tp, stopTracing, err := StartTracing(ctx, cfg, o.BuildVersion, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	var pgxTP trace.TracerProvider
	if tp.Enabled() {
		pgxTP = tp.TracerProvider()
	}
	if pool == nil {
		if cfg.Postgres.URL == "" {
			return errors.New("no database: set postgres.url in the config or IDEM_DATABASE_URL")
		}
		plans = &planAges{log: log}
		p, r, err := connectWaiting(ctx, log, dial{url: cfg.Postgres.URL, statementMode: cfg.Postgres.StatementMode,
			conns: poolSize(cfg), hook: hook, tp: pgxTP, plans: plans})
		if err != nil {
			return err
		}
		defer p.Close()
		pool, route = p, r
	} else {
		// A pool handed in was opened by its owner; what stands in front
		// of its server is read for the status page only.
		r, err := DetectRoute(ctx, pool.Config().ConnConfig)
		if err != nil {
			log.Warn().Err(err).Msg("could not tell whether a pooler stands in front of PostgreSQL")
		}
		route = r
		route.StatementMode = statementModeOf(pool.Config().ConnConfig.DefaultQueryExecMode)
	}
	logRoute(log, route)
	if nc == nil {
		name := o.ClientName
		if name == "" {
			name = "idem"
		}
		c, err := natsWaiting(ctx, log, cfg.NATS, name)
		if err != nil {
			return err
		}
		defer c.Close()
		nc = c
	}
	return run(ctx, o, pool, route, nc, hook, plans, tp)
}

func run(ctx context.Context, o Options, pool *pgxpool.Pool, route Route, nc *nats.Conn, hook *connHook, plans *planAges, tp *tracing.Provider) error {
	log, cfg := o.Log, o.Config
	if err := ensureSchema(ctx, pool, log); err != nil {
		return err
	}
	dss, err := Datasets(cfg)
	if err != nil {
		return err
	}
	tracer := tp.Tracer()
	// The site's clock: the database's, learned at each read of the pauses.
	// Calendars, late alerts, watches and waits decide by it, so a step of
	// this host's clock moves none of them.
	site := &clock.Site{}
	h := &handlers.Handler{DB: pool, Pipeline: cfg.Pipeline, Datasets: dss, Log: log, Tracer: tracer, Now: site.Now,
		Started: func(_, runID string, _ int) { crashHook("before_load", runID) }}
	if ra, err := ServerRemoteApply(ctx, pool, cfg.Postgres.URL); err != nil {
		log.Warn().Err(err).Msg("could not read the server's synchronous_commit: loads commit with on")
	} else if ra {
		h.RemoteApply = true
		log.Info().Msg("the server's sessions default to synchronous_commit = remote_apply: loads commit so too")
	}
	checkDatasets(ctx, pool, h, log)
	recordDefinitions(ctx, pool, cfg, log)
	var lineageClient *lineage.Client
	if ol := cfg.Lineage.OpenLineage; ol != nil {
		lineageClient, err = lineage.NewClient(lineage.ClientConfig{URL: ol.URL, Endpoint: ol.Endpoint, APIKey: ol.APIKey, Timeout: ol.Timeout.Std()})
		if err != nil {
			return err
		}
		h.Lineage = &handlers.Lineage{Namespace: ol.Namespace, Warehouse: lineage.NewWarehouse(&pool.Config().ConnConfig.Config)}
		lineageInputs(ctx, pool, cfg, dss, h.Lineage.Warehouse, log)
		log.Info().Str("url", lineageClient.URL()).Str("namespace", ol.Namespace).Msg("lineage: OpenLineage run events on")
	}

	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	m := metrics.New(o.BuildVersion)
	initMetrics(m, cfg)
	m.Tracing(tp.DroppedSpans, tp.FailedSpans)
	outbox, err := relay.New(pool, js, relay.Config{Stream: cfg.NATS.Stream, SubjectPrefix: cfg.NATS.SubjectPrefix,
		ResultsStream: cfg.NATS.Results.Stream, ResultsSubjectPrefix: cfg.NATS.Results.SubjectPrefix, Lineage: lineageSender(lineageClient)}, log)
	if err != nil {
		return err
	}
	outbox.Tracer = tracer
	outbox.Published = func(n int) { m.OutboxPublished.Add(float64(n)) }
	outbox.Failed = func(n int) { m.OutboxPublishFailures.Add(float64(n)) }
	outbox.Backlog = func(b audit.OutboxBacklog) { m.OutboxBacklogSet(b.Pending, b.Oldest) }
	h.Enqueued = outbox.Wake
	h.Results = true
	h.MaxGroup = cfg.NATS.MaxGroup
	hooks := m.Hooks()
	rv := newReverifier(cfg, js, pool, h, m, log)
	if rv != nil {
		// Nothing loads on a server that is not the verified one until its
		// pass is done: each new session is checked before use, and so is
		// the server at start.
		hook.set(rv.Connected)
		if err := rv.Init(ctx); err != nil {
			log.Warn().Err(err).Msg("warehouse identity not read at start: the first check (10 s) or reconnect reads it")
		}
		h.Verified = rv.Verified
		// A reconnect after the circuit opened may be to a promoted
		// standby that lacks the last commits: its identity is read at
		// once. The same server back holds nothing.
		circuit := hooks.Circuit
		hooks.Circuit = func(up bool) {
			circuit(up)
			if up {
				rv.Recheck()
			}
		}
	}
	var cfgNow atomic.Pointer[config.Config]
	cfgNow.Store(cfg)
	ccfg := consumerConfig(cfg, log, hooks)
	ccfg.ShutdownGrace = o.Grace
	ccfg.Tracer = tracer
	dlr := &resultstream.Publisher{JS: js, Pipeline: cfg.Pipeline, Stream: cfg.NATS.Results.Stream, Prefix: cfg.NATS.Results.SubjectPrefix, Log: log,
		Published: func(status string) { m.DeadLetterResults.WithLabelValues(status, "published").Inc() },
		Failed:    func(status string) { m.DeadLetterResults.WithLabelValues(status, "failed").Inc() }}
	ccfg.DeadLettered = dlr.DeadLettered
	version := ConfigVersion(cfg)
	m.ConfigInfo.WithLabelValues(version).Set(1)
	var current atomic.Pointer[string]
	current.Store(&version)
	ccfg.Fleet = &consumer.FleetConfig{
		Bucket: cfg.NATS.FleetBucketName(), Replica: replicaName(), Version: version, Grace: cfg.NATS.UnknownGrace(),
		Definitions: Definitions(cfg),
	}
	connCfg := pool.Config().ConnConfig
	ccfg.Probe = func(ctx context.Context) error {
		if err := handlers.Probe(ctx, connCfg); err != nil {
			return err
		}
		// The pooled sessions predate the outage: they may point at a
		// demoted server or carry its read-only default. Loads get new ones,
		// like the probe's.
		pool.Reset()
		return nil
	}
	if err := ensureStreamsWaiting(ctx, js, streamsConfig(cfg, ccfg), log); err != nil {
		return err
	}
	ps := &pauses{db: pool, pipeline: cfg.Pipeline, cfg: &cfgNow, m: m, log: log, site: site}
	ps.refresh(ctx)
	ccfg.Paused = ps.Paused
	ccfg.GroupHandler = groupFunc(h, m)
	ccfg.Duplicates = dupFunc(h, m)
	ccfg.GroupSize = func(msg *consumer.Message) int { return h.GroupSize(msg.Event) }
	c, err := consumer.New(js, ccfg, loadFunc(h, m))
	if err != nil {
		return err
	}
	m.WarehouseRefused(func() bool {
		up, _, reason, _ := c.Warehouse()
		return !up && handlers.IsRefused(reason)
	})
	rec, err := consumer.NewReconciler(js, ccfg)
	if err != nil {
		return err
	}

	h.SchemaPeer = schemaPeer(c, ccfg.Fleet.Replica, func(dataset string) string {
		if d, ok := cfgNow.Load().Datasets[dataset]; ok && d != nil {
			return d.SchemaPolicy()
		}
		return ""
	})
	st := newStatus(&cfgNow, pool, nc, js, c, &current, m, site, log)
	st.route = route
	st.rv = rv
	st.h = h
	page, err := st.page()
	if err != nil {
		return err
	}
	var prof http.Handler
	if cfg.HTTP.Pprof {
		prof = profiles(cfg.HTTP.Token)
	}
	srv, addr, err := startHTTP(cfg.HTTP.Addr, m, pool, nc, c, &current, page.Handler(), prof, log)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	// SIGHUP is caught before the process says it started: one sent at
	// once would otherwise end it (Go's default for an uncaught SIGHUP).
	var hup chan os.Signal
	if o.Reload != nil {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	log.Info().Str("http", addr).Str("pipeline", cfg.Pipeline).Strs("datasets", cfg.DatasetNames()).Str("config_version", version).
		Str("replica", ccfg.Fleet.Replica).Msg("idem serve started")
	if o.Ready != nil {
		o.Ready(addr)
	}

	var wg sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(ctx)
	if o.Reload != nil {
		r := &reloader{load: o.Reload, pool: pool, h: h, c: c, m: m, log: log, version: &current, cur: cfg, dss: dss, applied: &cfgNow}
		wg.Add(1)
		go func() { defer wg.Done(); r.run(bgCtx, hup) }()
	}
	wg.Add(4)
	go func() { defer wg.Done(); ps.run(bgCtx) }()
	go func() { defer wg.Done(); st.obs.Run(bgCtx) }()
	go func() {
		defer wg.Done()
		if err := rec.Run(bgCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error().Err(err).Msg("dead-letter reconciler stopped")
		}
	}()
	go func() {
		defer wg.Done()
		_ = outbox.Run(bgCtx) // makes a last pass when stopped
	}()
	startRetention(bgCtx, &wg, pool, &cfgNow, m, log)
	startOutdatedReload(bgCtx, &wg, pool, js, c, &cfgNow, log)
	startWatches(bgCtx, &wg, pool, js, nc, &cfgNow, m, site, log)
	startRechecks(bgCtx, &wg, pool, js, h, &cfgNow, m, log)
	if plans != nil && route.StatementMode == config.StatementPrepare {
		wg.Add(1)
		go func() { defer wg.Done(); plans.watch(bgCtx, pool) }()
	}
	if rv != nil {
		wg.Add(2)
		go func() { defer wg.Done(); rv.Run(bgCtx) }()
		go func() { defer wg.Done(); rv.Watch(bgCtx, identityInterval) }()
	}
	err = c.Run(ctx)
	stopBackground()
	wg.Wait()
	if derr := nc.Drain(); derr != nil && !errors.Is(derr, nats.ErrConnectionClosed) {
		log.Warn().Err(derr).Msg("nats drain")
	}
	if err != nil {
		return err
	}
	log.Info().Msg("idem serve stopped cleanly")
	return nil
}

// lineageSender is c as the relay's sender; nil without lineage (a nil
// *Client inside the interface would not be nil).
func lineageSender(c *lineage.Client) relay.LineageSender {
	if c == nil {
		return nil
	}
	return c
}
