package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/localpg"
	"github.com/idem-data/idem/testkit/pgtest"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func TestPoolConfig(t *testing.T) {
	cfg, err := PoolConfig("postgres://u@127.0.0.1:5432/db", 12)
	require.NoError(t, err)
	require.EqualValues(t, 12, cfg.MaxConns)
	require.Equal(t, "idem", cfg.ConnConfig.RuntimeParams["application_name"])
	require.Equal(t, "off", cfg.ConnConfig.RuntimeParams["synchronous_commit"])
	require.Equal(t, defaultConnectTimeout, cfg.ConnConfig.ConnectTimeout)

	// What the URL says wins.
	cfg, err = PoolConfig("postgres://u@127.0.0.1:5432/db?pool_max_conns=3&connect_timeout=2&synchronous_commit=on", 12)
	require.NoError(t, err)
	require.EqualValues(t, 3, cfg.MaxConns)
	require.Equal(t, "on", cfg.ConnConfig.RuntimeParams["synchronous_commit"])
	require.Equal(t, 2*time.Second, cfg.ConnConfig.ConnectTimeout)

	_, err = PoolConfig("postgres://u@127.0.0.1:5432/db?pool_max_conns=x", 1)
	require.Error(t, err)

	// Both forms of a multi-host connection string keep every host and
	// the check that picks the writable one, so a promotion needs no
	// config change.
	for _, url := range []string{
		"postgres://u@10.0.0.1:5432,10.0.0.2:5433/db?target_session_attrs=read-write",
		"host=10.0.0.1,10.0.0.2 port=5432,5433 user=u dbname=db target_session_attrs=read-write",
	} {
		cfg, err := PoolConfig(url, 4)
		require.NoError(t, err, url)
		require.Equal(t, "10.0.0.1", cfg.ConnConfig.Host, url)
		second := false // sslmode prefer adds a plain try of each host too
		for _, fb := range cfg.ConnConfig.Fallbacks {
			second = second || fb.Host == "10.0.0.2" && fb.Port == 5433
		}
		require.True(t, second, "%s: the second host is lost", url)
		require.NotNil(t, cfg.ConnConfig.ValidateConnect, url)
		require.Equal(t, "off", cfg.ConnConfig.RuntimeParams["synchronous_commit"], url)
	}
}

func TestWaitUntilLogsOncePerReason(t *testing.T) {
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	down := errors.New("connection refused")
	tries := 0
	v, err := waitUntil(context.Background(), log, "postgres", func() (int, error) {
		if tries++; tries < 2 {
			return 0, down
		}
		return 7, nil
	}, func(err error) bool { return errors.Is(err, down) })
	require.NoError(t, err)
	require.Equal(t, 7, v)
	require.Equal(t, 1, strings.Count(logs.String(), "waiting for the server to start"), logs.String())
	require.Contains(t, logs.String(), "server reachable: starting")

	// A refusal is not waited for.
	logs.Reset()
	refused := errors.New("password authentication failed")
	_, err = waitUntil(context.Background(), log, "postgres", func() (int, error) { return 0, refused },
		func(err error) bool { return errors.Is(err, down) })
	require.ErrorIs(t, err, refused)
	require.Empty(t, logs.String())
}

// TestConnectDirect: against PostgreSQL itself, auto prepares named
// statements and keeps idem's session settings in the startup packet; a
// forced mode is kept; nothing a pooler refuses is sent before the route
// is known.
func TestConnectDirect(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	pool, route, err := Connect(ctx, db.URL, "")
	require.NoError(t, err)
	defer pool.Close()
	require.Equal(t, Route{Pooler: PoolerNone, StatementMode: config.StatementPrepare, Auto: true}, route)
	require.Equal(t, "PostgreSQL directly, statements: prepare (auto)", route.String())
	require.Equal(t, pgx.QueryExecModeCacheStatement, pool.Config().ConnConfig.DefaultQueryExecMode)
	var jit, sc string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('jit'), current_setting('synchronous_commit')").Scan(&jit, &sc))
	require.Equal(t, "off", jit)
	require.Equal(t, "off", sc)

	pool2, route, err := Connect(ctx, db.URL, config.StatementDescribe)
	require.NoError(t, err)
	defer pool2.Close()
	require.Equal(t, Route{StatementMode: config.StatementDescribe}, route)
	require.Equal(t, pgx.QueryExecModeCacheDescribe, pool2.Config().ConnConfig.DefaultQueryExecMode)

	base, err := baseConfig(db.URL, 0)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"application_name": "idem"}, base.ConnConfig.RuntimeParams)
}

// TestResolve: auto picks by route; a pooler gets unnamed statements and
// none of the startup parameters a pooler refuses.
func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		pooler, mode, want string
		auto               bool
	}{
		{PoolerNone, "", config.StatementPrepare, true},
		{PoolerNone, config.StatementAuto, config.StatementPrepare, true},
		{PoolerTransaction, config.StatementAuto, config.StatementDescribe, true},
		{PoolerSession, "", config.StatementDescribe, true},
		{PoolerTransaction, config.StatementPrepare, config.StatementPrepare, false},
		{PoolerNone, config.StatementDescribe, config.StatementDescribe, false},
	} {
		r := Route{Pooler: tc.pooler}.resolve(tc.mode)
		require.Equal(t, tc.want, r.StatementMode, "%+v", tc)
		require.Equal(t, tc.auto, r.Auto, "%+v", tc)
	}
	cfg, err := poolConfig("postgres://u@127.0.0.1:6432/db", 4, Route{Pooler: PoolerTransaction}.resolve(""))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"application_name": "idem"}, cfg.ConnConfig.RuntimeParams)
	require.Equal(t, pgx.QueryExecModeCacheDescribe, cfg.ConnConfig.DefaultQueryExecMode)
	// The URL's own mode stands while statement_mode is auto.
	cfg, err = poolConfig("postgres://u@127.0.0.1:6432/db?default_query_exec_mode=simple_protocol", 4, Route{Pooler: PoolerTransaction}.resolve(""))
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeSimpleProtocol, cfg.ConnConfig.DefaultQueryExecMode)
}

// TestDetectRouteBesideOtherClients: other clients at work on the pooler
// (a second replica starting) hand DetectRoute's two connections other
// server connections than the ones it compares, so one round can show
// nothing of a transaction pooler. A replica beside another once took a
// transaction pooler for a session one. Both modes, each asked 20 times
// while three clients run transactions.
func TestDetectRouteBesideOtherClients(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pgbouncer")
	}
	db := pgtest.NewDB(t)
	for _, mode := range []string{pgtest.PoolTransaction, pgtest.PoolSession} {
		b := pgtest.StartPgBouncer(t, db.URL, mode)
		cfg, err := pgconn.ParseConfig(db.URL)
		require.NoError(t, err)
		url := b.URL(cfg.Database)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		// Clients at work as a second replica starting beside it: short
		// statements, and transactions that hold a server connection a
		// little while.
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := localpg.ConnectSimple(ctx, url)
				if err != nil {
					return
				}
				defer c.Close(context.Background())
				for ctx.Err() == nil {
					if i%2 == 0 {
						_, _ = c.Exec(ctx, "SELECT pg_backend_pid()")
						continue
					}
					_ = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, "SELECT pg_sleep(0.002)")
						return err
					})
				}
			}()
		}
		cc, err := pgx.ParseConfig(url)
		require.NoError(t, err)
		for i := range 10 {
			r, err := DetectRoute(context.Background(), cc)
			require.NoError(t, err)
			require.Equal(t, mode, r.Pooler, "%s pooler, round %d", mode, i)
		}
		cancel()
		wg.Wait()
	}
}
