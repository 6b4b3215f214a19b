package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/metrics"
)

// readiness lists why this process is not ready; empty when it is.
func readiness(ctx context.Context, nc *nats.Conn, c *consumer.Consumer, pool *pgxpool.Pool) []string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
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
	return problems
}

// startHTTP serves /metrics, /healthz, /readyz and the status page (every
// other path) on addr and returns the address it listens on (addr may name
// port 0).
func startHTTP(addr string, m *metrics.Metrics, pool *pgxpool.Pool, nc *nats.Conn, c *consumer.Consumer, version *atomic.Pointer[string],
	page http.Handler, log zerolog.Logger) (*http.Server, string, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if problems := readiness(r.Context(), nc, c, pool); len(problems) > 0 {
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
	if page != nil {
		mux.Handle("/", page)
	}
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
