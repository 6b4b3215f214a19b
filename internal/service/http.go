package service

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
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

// startHTTP serves /metrics, /healthz, /readyz, the profiles when prof is
// not nil, and the status page (every other path) on addr and returns the
// address it listens on (addr may name port 0).
func startHTTP(addr string, m *metrics.Metrics, pool *pgxpool.Pool, nc *nats.Conn, c *consumer.Consumer, version *atomic.Pointer[string],
	page, prof http.Handler, log zerolog.Logger) (*http.Server, string, error) {
	mux := http.NewServeMux()
	if prof != nil {
		mux.Handle("/debug/pprof/", prof)
	}
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
	// No WriteTimeout: a CPU profile streams for as long as it was asked.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server")
		}
	}()
	return srv, ln.Addr().String(), nil
}

// profiles serves net/http/pprof's pages under /debug/pprof/ to a request
// that gives token (Authorization: Bearer); the profiles say what the
// process runs, so they are never open.
func profiles(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem"`)
			http.Error(w, "the profiles need the operator token: send Authorization: Bearer <http.token>", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}
