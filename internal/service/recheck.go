package service

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/internal/recheck"
	"github.com/idem-data/idem/schemas"
)

// startRechecks runs the recheck: of each dataset of the config in force
// until ctx is done, following reloads. Every replica runs them; a
// pass's lease lets one replica a period ask the sources.
func startRechecks(ctx context.Context, wg *sync.WaitGroup, pool *pgxpool.Pool, js jetstream.JetStream, h *handlers.Handler,
	cfg *atomic.Pointer[config.Config], m *metrics.Metrics, log zerolog.Logger) {
	first := cfg.Load()
	r := &recheck.Rechecker{
		Pipeline: first.Pipeline, DB: pool, JS: js, Fingerprint: h.Fingerprint,
		Stream: first.NATS.Stream, SubjectPrefix: schemas.BackfillPrefix(first.NATS.SubjectPrefix),
		Lookup: func(dataset string) (schemas.PartitionType, bool) { return cfg.Load().Lookup(dataset) },
		Log:    log,
	}
	if m != nil {
		r.Asked = func(dataset string) { m.RecheckAsked.WithLabelValues(dataset).Inc() }
		r.Published = func(dataset string) { m.RecheckReloads.WithLabelValues(dataset).Inc() }
		r.Failed = func(dataset string) { m.RecheckFailures.WithLabelValues(dataset).Inc() }
	}
	followDatasets(ctx, wg, cfg, "recheck", recheckDefinitions, func(c *config.Config, name string) (func(context.Context) error, error) {
		d := c.Datasets[name]
		ds := &recheck.Dataset{Name: name, Type: d.PartitionType, Window: d.Recheck.Window.Std(), Every: d.Recheck.Every.Std()}
		return func(ctx context.Context) error { return r.Run(ctx, ds) }, nil
	}, log)
}

// recheckDefinitions names the rechecked datasets of c, each with what
// its recheck is built from.
func recheckDefinitions(c *config.Config) map[string]string {
	out := map[string]string{}
	for name, d := range c.Datasets {
		if d == nil || d.Recheck == nil {
			continue
		}
		if b, err := json.Marshal(d); err == nil {
			out[name] = string(b)
		}
	}
	return out
}
