package service

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/internal/reverify"
)

// identityInterval is how often serve reads which server the warehouse is:
// a failover while nothing loads opens no circuit, and is seen here.
const identityInterval = 10 * time.Second

// newReverifier builds the re-verification of serve, or nil when the config
// turns it off.
func newReverifier(cfg *config.Config, js jetstream.JetStream, pool *pgxpool.Pool, h *handlers.Handler, m *metrics.Metrics, log zerolog.Logger) *reverify.Reverifier {
	if !cfg.Postgres.ReverifyOn() {
		return nil
	}
	return reverify.New(reverify.Config{
		JS: js, Stream: cfg.NATS.Stream, Consumer: cfg.NATS.Consumer, SubjectPrefix: cfg.NATS.SubjectPrefix,
		DLQStream: cfg.NATS.DLQStream, DLQSubjectPrefix: cfg.NATS.DLQSubjectPrefix,
		DB: pool, Pipeline: cfg.Pipeline, Loader: h, Window: cfg.Postgres.ReverifyWindow.Std(), Log: log,
		BackfillConsumer: consumer.StreamsConfig{Consumer: cfg.NATS.Consumer}.BackfillName(),
		Passed: func(r reverify.Result) {
			result := "ok"
			if r.Err != nil {
				result = "error"
			}
			m.ReverifyPasses.WithLabelValues(result).Inc()
			m.ReverifyReloaded.Add(float64(r.Reloaded))
			m.ReverifyLast.Set(float64(r.Started.Add(r.Took).Unix()))
		},
	})
}
