package service

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/tracing"
)

// tracingShutdownTimeout bounds the export of the spans still queued when
// a process stops: a collector that is down must not hold up an exit.
const tracingShutdownTimeout = 3 * time.Second

// exportErrorEvery spaces the log lines about failed exports: a collector
// that is down fails every batch, and its spans are counted anyway.
const exportErrorEvery = time.Minute

// TracingConfig is cfg's tracing: section in package tracing's terms;
// without tracing.otlp, the zero Config (no export).
func TracingConfig(cfg *config.Config, version string) tracing.Config {
	o := cfg.Tracing.OTLP
	if o == nil {
		return tracing.Config{}
	}
	return tracing.Config{Endpoint: o.Endpoint, Protocol: o.Protocol, Insecure: o.Insecure, Headers: o.Headers,
		SampleRatio: cfg.Tracing.Ratio(), ServiceVersion: version}
}

// StartTracing builds the tracer provider of cfg, logging failed exports
// now and then (never per batch), and returns it with the function that
// shuts it down within tracingShutdownTimeout.
func StartTracing(ctx context.Context, cfg *config.Config, version string, log zerolog.Logger) (*tracing.Provider, func(), error) {
	tc := TracingConfig(cfg, version)
	tc.OnExportError = exportErrorLogger(log)
	p, err := tracing.Setup(ctx, tc)
	if err != nil {
		return nil, nil, err
	}
	if p.Enabled() {
		// The endpoint as written: a host:port or URL; its headers, which
		// may hold a key, are not logged.
		log.Info().Str("endpoint", redactedEndpoint(cfg)).Str("protocol", tc.Protocol).Float64("sample_ratio", tc.SampleRatio).
			Msg("tracing: spans exported over OTLP")
	}
	return p, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			log.Warn().Err(err).Msg("tracing: the last spans were not all exported")
		}
	}, nil
}

// redactedEndpoint is the collector's address without user information
// or query (where a credential could be written).
func redactedEndpoint(cfg *config.Config) string {
	e := cfg.Tracing.OTLP.Endpoint
	if !strings.Contains(e, "://") {
		return e // host:port
	}
	u, err := url.Parse(e)
	if err != nil {
		return "(unparsable)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// exportErrorLogger logs the first failed export, then at most one line
// per exportErrorEvery, with how many failed in between.
func exportErrorLogger(log zerolog.Logger) func(error) {
	var mu sync.Mutex
	var last time.Time
	var since int
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		since++
		if !last.IsZero() && time.Since(last) < exportErrorEvery {
			return
		}
		log.Warn().Err(err).Int("failed_exports", since).
			Msg("tracing: export to the collector failed; spans are dropped (idem_trace_spans_failed_total), loads go on")
		last, since = time.Now(), 0
	}
}
