package cli

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/natsconn"
)

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
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		delay = min(2*delay, startupMaxDelay)
	}
}

// connectWaiting opens the pool, waiting while PostgreSQL cannot be reached.
func connectWaiting(ctx context.Context, log zerolog.Logger, url string, conns int) (*pgxpool.Pool, error) {
	return waitUntil(ctx, log, "postgres", func() (*pgxpool.Pool, error) { return connectSized(ctx, url, conns) },
		func(err error) bool {
			// Unreachable, starting up, too many connections: wait. A
			// refused password is a configuration error at start.
			return handlers.IsUnavailable(handlers.Classify(err)) && !strings.HasPrefix(handlers.SQLState(err), "28")
		})
}

// natsWaiting connects to NATS, waiting while no server can be reached.
func natsWaiting(ctx context.Context, log zerolog.Logger, cfg config.NATS, name string) (*nats.Conn, error) {
	return waitUntil(ctx, log, "nats", func() (*nats.Conn, error) { return natsconn.Connect(ctx, cfg, name, log) },
		func(err error) bool { return errors.Is(err, nats.ErrNoServers) })
}
