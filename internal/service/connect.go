package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/natsconn"
	"github.com/idem-data/idem/internal/tracing/pgxtrace"
)

// defaultConnectTimeout bounds a new connection when the URL sets none.
const defaultConnectTimeout = 10 * time.Second

// PoolConfig is the pool configuration idem uses for url when it talks to
// PostgreSQL itself: at least conns connections (unless the URL sets
// pool_max_conns), idem's session settings, and named prepared statements.
// A service that runs max_in_flight loads at once needs one connection per
// load, plus the relay's and a health check's.
func PoolConfig(url string, conns int) (*pgxpool.Config, error) {
	return poolConfig(url, conns, Route{StatementMode: config.StatementPrepare})
}

// poolConfig is the pool configuration for url over route r.
func poolConfig(url string, conns int, r Route) (*pgxpool.Config, error) {
	cfg, err := baseConfig(url, conns)
	if err != nil {
		return nil, err
	}
	// Set on the URL (default_query_exec_mode) and left on auto: the URL's.
	if !r.Auto || !strings.Contains(url, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = execMode(r.StatementMode)
	}
	if r.Pooled() {
		// A pooler refuses startup parameters it does not track (PgBouncer
		// passes application_name and a few client settings only), and a
		// plain SET would stay on a server connection that other clients
		// get. The role's settings (deploy/postgres/grants.sql) and each
		// load's SET LOCAL take their place.
		return cfg, nil
	}
	// Bookkeeping (the `started` row, failures, skips, outbox marks) commits
	// without waiting for the WAL flush; every load transaction sets
	// synchronous_commit back on, and its flush covers the earlier rows too.
	// A server crash can therefore lose only the trace of an attempt that had
	// not committed anything.
	if _, set := cfg.ConnConfig.RuntimeParams["synchronous_commit"]; !set {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	// idem's own lookups are short index seeks; a misestimated one that
	// crosses jit_above_cost spends more compiling than running (a status
	// lookup of 57 ms took 220 ms with JIT over 2.5M attempts). Loads turn
	// it off for their transaction too. jit in the URL overrides it.
	if _, set := cfg.ConnConfig.RuntimeParams["jit"]; !set {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	return cfg, nil
}

// baseConfig is what every connection of idem's sends, whatever stands in
// front of PostgreSQL: only application_name among the startup
// parameters, which every pooler accepts.
func baseConfig(url string, conns int) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, handlers.Classify(err)
	}
	if conns > 0 && !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(max(int(cfg.MaxConns), conns))
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set {
		cfg.ConnConfig.RuntimeParams["application_name"] = "idem"
	}
	// A server that does not answer (a blackholed address, a failover in
	// progress) must fail the connect, so the warehouse circuit opens, rather
	// than hang a load forever. connect_timeout in the URL overrides it.
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	return cfg, nil
}

// ServerRemoteApply says whether the sessions of the server (its config,
// the database's or the role's settings, or the URL) default to
// synchronous_commit = remote_apply, read on a session without the pool's
// asynchronous bookkeeping override. Loads must then commit that way too.
func ServerRemoteApply(ctx context.Context, pool *pgxpool.Pool, url string) (bool, error) {
	cc := pool.Config().ConnConfig.Copy()
	params := make(map[string]string, len(cc.RuntimeParams))
	for k, v := range cc.RuntimeParams {
		params[k] = v
	}
	if !strings.Contains(url, "synchronous_commit") {
		delete(params, "synchronous_commit") // ours, not the URL's
	}
	cc.RuntimeParams = params
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var level string
	if err := conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&level); err != nil {
		return false, err
	}
	return level == "remote_apply", nil
}

// Connect finds what stands in front of PostgreSQL, opens a pool that fits
// it (statement_mode is postgres.statement_mode; empty means auto) and
// checks the server answers within 10 s.
func Connect(ctx context.Context, url, statementMode string) (*pgxpool.Pool, Route, error) {
	return connectSized(ctx, dial{url: url, statementMode: statementMode})
}

// dial is what a pool is opened with: hook, when set, sees every new
// session before it is used; tp, when set, gets a span for every statement
// sent under a span (a load's).
type dial struct {
	url           string
	statementMode string
	conns         int
	hook          *connHook
	tp            trace.TracerProvider
	// plans, when set, re-prepares a connection's statements once idem's
	// tables have grown past the sizes they were planned for (named
	// statements only).
	plans *planAges
}

// connectSized opens a pool of at least d.conns connections (see
// poolConfig) over the route DetectRoute finds.
func connectSized(ctx context.Context, d dial) (*pgxpool.Pool, Route, error) {
	base, err := baseConfig(d.url, d.conns)
	if err != nil {
		return nil, Route{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	route, err := DetectRoute(pctx, base.ConnConfig)
	if err != nil {
		return nil, Route{}, connectError(base.ConnConfig, err)
	}
	route = route.resolve(d.statementMode)
	cfg, err := poolConfig(d.url, d.conns, route)
	if err != nil {
		return nil, Route{}, err
	}
	// Under auto, a mode the URL sets stands: say which.
	route.StatementMode = statementModeOf(cfg.ConnConfig.DefaultQueryExecMode)
	if d.hook != nil {
		cfg.AfterConnect = d.hook.call
	}
	if d.plans != nil && route.StatementMode == config.StatementPrepare {
		after := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			d.plans.connected(c)
			if after != nil {
				return after(ctx, c)
			}
			return nil
		}
		cfg.PrepareConn = d.plans.prepare
	}
	if d.tp != nil {
		cfg.ConnConfig.Tracer = pgxtrace.CombineTracers(cfg.ConnConfig.Tracer, pgxtrace.NewPgxTracerInTraces(d.tp))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, Route{}, err
	}
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, Route{}, connectError(cfg.ConnConfig, err)
	}
	return pool, route, nil
}

// connectError says why the first connection failed: a refusal names its
// cause and the setting to change; anything else is a server that could
// not be reached (yet).
func connectError(cc *pgx.ConnConfig, err error) error {
	if r := handlers.Refusal(err); r != nil {
		return r
	}
	return fmt.Errorf("cannot reach PostgreSQL at %s:%d: %w", cc.Host, cc.Port, err)
}

// poolSize is the pool a service needs: one connection per load in flight,
// plus the relay's, the reconciler's, a health check's and the background
// passes' (a re-verification's reads and loads, and its or retention's
// lease renewal). docs/POOLERS.md sizes a pooler from it.
func poolSize(cfg *config.Config) int { return cfg.NATS.MaxInFlight + 6 }

// Start-up waits for a server that is down (a maintenance window, a node
// being replaced) instead of exiting: a process that exits is restarted by
// its supervisor with a growing delay (Kubernetes' CrashLoopBackOff reaches
// five minutes), which would keep idem away long after the server is back.
// A server that answers and refuses (a wrong password, an unknown database,
// a certificate that does not verify) is a configuration error: exit.
const (
	startupFirstDelay = time.Second
	startupMaxDelay   = 30 * time.Second
)

// waitUntil calls try until it succeeds, ctx ends, or it fails with an
// error retry says is not worth waiting for. It logs when it starts
// waiting and whenever the reason changes, not at every attempt.
func waitUntil[T any](ctx context.Context, log zerolog.Logger, what string, try func() (T, error), retry func(error) bool) (T, error) {
	delay, said := startupFirstDelay, ""
	for {
		v, err := try()
		if err == nil {
			if said != "" {
				log.Info().Str("server", what).Msg("server reachable: starting")
			}
			return v, nil
		}
		if !retry(err) || ctx.Err() != nil {
			return v, err
		}
		if msg := err.Error(); msg != said {
			log.Warn().Err(err).Str("server", what).Dur("retry_in", delay).Msg("waiting for the server to start")
			said = msg
		}
		if !sleep(ctx, delay) {
			return v, err
		}
		delay = min(2*delay, startupMaxDelay)
	}
}

// connectWaiting opens the pool, waiting while PostgreSQL cannot be reached.
func connectWaiting(ctx context.Context, log zerolog.Logger, d dial) (*pgxpool.Pool, Route, error) {
	type opened struct {
		pool  *pgxpool.Pool
		route Route
	}
	o, err := waitUntil(ctx, log, "postgres", func() (opened, error) {
		p, r, err := connectSized(ctx, d)
		return opened{p, r}, err
	}, func(err error) bool {
		// Unreachable, starting up, too many connections, a pooler whose
		// server does not answer within the check's 10 s: wait. A login
		// refused (a wrong password, no such database, a startup parameter
		// the pooler does not take, statement pooling) and a configuration
		// error (a connection string, a certificate) end the start.
		return !handlers.IsRefused(err) && !handlers.IsFatal(handlers.Classify(err))
	})
	return o.pool, o.route, err
}

// natsWaiting connects to NATS, waiting while no server can be reached.
func natsWaiting(ctx context.Context, log zerolog.Logger, cfg config.NATS, name string) (*nats.Conn, error) {
	return waitUntil(ctx, log, "nats", func() (*nats.Conn, error) { return natsconn.Connect(ctx, cfg, name, log) },
		func(err error) bool { return errors.Is(err, nats.ErrNoServers) })
}

// connHook is the pool's AfterConnect, set once the service has built what
// it calls (the re-verification's check of the server's identity).
type connHook struct {
	f atomic.Pointer[func(context.Context, *pgx.Conn) error]
}

func (h *connHook) set(f func(context.Context, *pgx.Conn) error) { h.f.Store(&f) }

func (h *connHook) call(ctx context.Context, c *pgx.Conn) error {
	if f := h.f.Load(); f != nil {
		return (*f)(ctx, c)
	}
	return nil
}
