package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
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
