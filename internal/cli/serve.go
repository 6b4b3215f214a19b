package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/internal/relay"
)

func serveCmd(e *env) *cobra.Command {
	var grace time.Duration
	c := &cobra.Command{
		Use:   "serve",
		Short: "Consume partition-ready events and load them (the service)",
		Long: `Consume events from the durable JetStream consumer and load each partition.
Serves /metrics, /healthz and /readyz on http.addr. On SIGTERM or Ctrl-C it
stops fetching, lets in-flight loads finish for --grace, acks or naks each
message, drains the connection and exits 0.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.validConfig()
			if err != nil {
				return err
			}
			if cfg.Postgres.URL == "" {
				return errors.New("no database: set postgres.url in the config or IDEM_DATABASE_URL")
			}
			log := newLogger(e.errOut, e.getenv)
			pool, err := connectWaiting(cmd.Context(), log, cfg.Postgres.URL, cfg.NATS.MaxInFlight+4)
			if err != nil {
				return err
			}
			defer pool.Close()
			nc, err := natsWaiting(cmd.Context(), log, cfg.NATS, "idem serve")
			if err != nil {
				return err
			}
			defer nc.Close()
			return serve(cmd.Context(), serveDeps{cfg: cfg, pool: pool, nc: nc, log: log, grace: grace, reload: e.validConfig})
		},
	}
	c.Flags().DurationVar(&grace, "grace", consumer.DefaultShutdownGrace, "how long in-flight loads may finish after SIGTERM before they are interrupted and nak'ed")
	return c
}

// validConfig loads the config and refuses to go on with any problem.
func (e *env) validConfig() (*config.Config, error) {
	cfg, err := e.loadConfig()
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s has problems (run 'idem validate'):\n%w", e.configPath, err)
	}
	return cfg, nil
}

type serveDeps struct {
	cfg   *config.Config
	pool  *pgxpool.Pool
	nc    *nats.Conn
	log   zerolog.Logger
	grace time.Duration
	// ready, when set, is called once the consumer is fetching.
	ready func(addr string)
	// reload, when set, reads the config again on SIGHUP.
	reload func() (*config.Config, error)
}

// serve runs the service until ctx is cancelled; it returns nil after a
// clean stop.
func serve(ctx context.Context, d serveDeps) error {
	log, cfg := d.log, d.cfg
	if err := ensureSchema(ctx, d.pool, log); err != nil {
		return err
	}
	dss, err := datasets(cfg)
	if err != nil {
		return err
	}
	h := &handlers.Handler{DB: d.pool, Pipeline: cfg.Pipeline, Datasets: dss, Log: log, SubjectPrefix: cfg.NATS.SubjectPrefix,
		Started: func(_, runID string, _ int) { crashHook("before_load", runID) }}
	checkDatasets(ctx, d.pool, h, log)

	js, err := jetstream.New(d.nc)
	if err != nil {
		return err
	}
	m := metrics.New(Version)
	outbox, err := relay.New(d.pool, js, relay.Config{Stream: cfg.NATS.Stream, SubjectPrefix: cfg.NATS.SubjectPrefix}, log)
	if err != nil {
		return err
	}
	outbox.Published = func(n int) { m.OutboxPublished.Add(float64(n)) }
	outbox.Failed = func(n int) { m.OutboxPublishFailures.Add(float64(n)) }
	outbox.Backlog = func(b audit.OutboxBacklog) { m.OutboxBacklogSet(b.Pending, b.Oldest) }
	h.Enqueued = outbox.Wake
	ccfg := consumerConfig(cfg, log, m.Hooks())
	ccfg.ShutdownGrace = d.grace
	version := configVersion(cfg)
	m.ConfigInfo.WithLabelValues(version).Set(1)
	var current atomic.Pointer[string]
	current.Store(&version)
	ccfg.Fleet = &consumer.FleetConfig{
		Bucket: cfg.NATS.FleetBucketName(), Replica: replicaName(), Version: version, Grace: cfg.NATS.UnknownGrace(),
		Definitions: datasetDefinitions(cfg),
	}
	connCfg := d.pool.Config().ConnConfig
	ccfg.Probe = func(ctx context.Context) error {
		if err := handlers.Probe(ctx, connCfg); err != nil {
			return err
		}
		// The pooled sessions predate the outage: they may point at a
		// demoted server or carry its read-only default. Loads get new ones,
		// like the probe's.
		d.pool.Reset()
		return nil
	}
	if err := ensureStreams(ctx, js, streamsConfig(cfg, ccfg), log); err != nil {
		return err
	}
	c, err := consumer.New(js, ccfg, loadFunc(h, m))
	if err != nil {
		return err
	}
	rec, err := consumer.NewReconciler(js, ccfg)
	if err != nil {
		return err
	}

	srv, addr, err := startHTTP(cfg.HTTP.Addr, m, d.pool, d.nc, c, &current, log)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info().Str("http", addr).Str("pipeline", cfg.Pipeline).Strs("datasets", cfg.DatasetNames()).Str("config_version", version).
		Str("replica", ccfg.Fleet.Replica).Msg("idem serve started")
	if d.ready != nil {
		d.ready(addr)
	}

	var wg sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(ctx)
	if d.reload != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		r := &reloader{load: d.reload, pool: d.pool, h: h, c: c, m: m, log: log, version: &current, cur: cfg, dss: dss}
		wg.Add(1)
		go func() { defer wg.Done(); r.run(bgCtx, hup) }()
	}
	wg.Add(2)
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
	err = c.Run(ctx)
	stopBackground()
	wg.Wait()
	if derr := d.nc.Drain(); derr != nil && !errors.Is(derr, nats.ErrConnectionClosed) {
		log.Warn().Err(derr).Msg("nats drain")
	}
	if err != nil {
		return err
	}
	log.Info().Msg("idem serve stopped cleanly")
	return nil
}

// loadFunc is the consumer's handler: one event, one load, its metrics.
func loadFunc(h *handlers.Handler, m *metrics.Metrics) consumer.Handler {
	return func(ctx context.Context, msg *consumer.Message) error {
		start := time.Now()
		out, err := h.Handle(ctx, msg.Event, handlers.Meta{StreamSeq: msg.StreamSeq, MaxAttempts: msg.MaxAttempts})
		crashHook("after_commit", msg.Event.RunID)
		status := out.Status
		if err != nil {
			status = "failed"
		}
		m.Load(msg.Dataset, status, time.Since(start), out.Rows.Inserted+out.Rows.Updated)
		return err
	}
}

func consumerConfig(cfg *config.Config, log zerolog.Logger, hooks consumer.Hooks) consumer.Config {
	ds := make(map[string]consumer.Dataset, len(cfg.Datasets))
	for name, d := range cfg.Datasets {
		ds[name] = consumer.Dataset{
			PartitionType:  d.PartitionType,
			MaxConcurrency: d.MaxConcurrency,
			Retry: consumer.Retry{
				MaxAttempts: d.MaxAttempts(),
				Delay:       d.RetryDelay.Std(),
				MaxDelay:    d.MaxRetryDelay.Std(),
			},
		}
	}
	return consumer.Config{
		Stream:           cfg.NATS.Stream,
		DLQStream:        cfg.NATS.DLQStream,
		Consumer:         cfg.NATS.Consumer,
		SubjectPrefix:    cfg.NATS.SubjectPrefix,
		DLQSubjectPrefix: cfg.NATS.DLQSubjectPrefix,
		AckWait:          cfg.NATS.AckWait.Std(),
		MaxInFlight:      cfg.NATS.MaxInFlight,
		Replicas:         cfg.NATS.Replicas,
		Datasets:         ds,
		Log:              log,
		Hooks:            hooks,
	}
}

// ensureSchema migrates schema idem when it is behind; a role without the
// right to do so gets told to run `idem migrate`.
func ensureSchema(ctx context.Context, pool *pgxpool.Pool, log zerolog.Logger) error {
	all, err := audit.Migrations()
	if err != nil {
		return err
	}
	v, err := audit.Version(ctx, pool)
	if err != nil {
		return err
	}
	if v >= len(all) {
		return nil
	}
	applied, err := audit.Migrate(ctx, pool)
	if err != nil {
		return fmt.Errorf("schema idem is at version %d of %d and could not be upgraded (run 'idem migrate' with a role that may): %w", v, len(all), err)
	}
	for _, a := range applied {
		log.Info().Int("version", a.Version).Str("name", a.Name).Msg("migrated schema idem")
	}
	return nil
}

// checkDatasets prepares views and plans every dataset's load. A broken
// dataset is logged, not fatal: its events will fail with the same reason and
// reach the dead-letter stream, while the other datasets keep loading.
func checkDatasets(ctx context.Context, pool *pgxpool.Pool, h *handlers.Handler, log zerolog.Logger) {
	failed := h.Prepare(ctx)
	names := make([]string, 0, len(h.Datasets))
	for n := range h.Datasets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		err := failed[n]
		if err == nil {
			err = handlers.Check(ctx, pool, h.Datasets[n], samplePartition(h.Datasets[n].PartitionType))
		}
		if err != nil {
			log.Error().Str("dataset", n).Err(err).Msg("dataset is broken: its events will go to the dead-letter stream until it is fixed")
		}
	}
}

func startHTTP(addr string, m *metrics.Metrics, pool *pgxpool.Pool, nc *nats.Conn, c *consumer.Consumer, version *atomic.Pointer[string], log zerolog.Logger) (*http.Server, string, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		var problems []string
		if s := nc.Status(); s != nats.CONNECTED {
			problems = append(problems, "nats: "+s.String())
		}
		if up, state, reason, since := c.Warehouse(); !up {
			problems = append(problems, fmt.Sprintf("postgres: warehouse circuit %s for %s (fetching paused, messages held): %v",
				state, time.Since(since).Round(time.Second), reason))
		} else if err := pool.Ping(ctx); err != nil {
			problems = append(problems, "postgres: "+err.Error())
		}
		if len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, p := range problems {
				fmt.Fprintln(w, p)
			}
			fmt.Fprintln(w, "config", *version.Load())
			return
		}
		fmt.Fprintln(w, "ready")
		fmt.Fprintln(w, "config", *version.Load())
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("http.addr %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server")
		}
	}()
	return srv, ln.Addr().String(), nil
}
