package cli

import (
	"context"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/service"
	"github.com/idem-data/idem/internal/tracing"
)

// startTracing continues the trace of whoever started a publishing
// command (a scheduler sets TRACEPARENT and TRACESTATE for its task) and,
// with tracing.otlp, returns a tracer whose spans are exported before the
// command exits (stop, bounded). Without tracing.otlp the tracer records
// nothing, but the events published still carry the scheduler's trace
// context; without either, they carry none.
func (e *env) startTracing(ctx context.Context, cfg *config.Config) (context.Context, trace.Tracer, func(), error) {
	ctx = tracing.FromEnvironment(ctx, e.getenv)
	// Warnings only: a one-shot command's stderr is its progress.
	log := newLogger(e.errOut, e.getenv).Level(zerolog.WarnLevel)
	p, stop, err := service.StartTracing(ctx, cfg, Version, log)
	if err != nil {
		return ctx, nil, nil, err
	}
	return ctx, p.Tracer(), stop, nil
}
