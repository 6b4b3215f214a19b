package service

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/internal/clock"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/metrics"
	"github.com/idem-data/idem/internal/watch"
	"github.com/idem-data/idem/schemas"
)

// startWatches runs the watch: of each dataset of the config in force
// until ctx is done, following reloads: a watch whose dataset (or s3:)
// changed is restarted, one whose dataset went is stopped. Every replica
// watches; they publish the same message ids, which JetStream keeps once.
func startWatches(ctx context.Context, wg *sync.WaitGroup, pool *pgxpool.Pool, js jetstream.JetStream, nc *nats.Conn,
	cfg *atomic.Pointer[config.Config], m *metrics.Metrics, site *clock.Site, log zerolog.Logger) {
	first := cfg.Load()
	w := &watch.Watcher{
		Pipeline: first.Pipeline, DB: pool, JS: js, Conn: nc,
		Stream: first.NATS.Stream, SubjectPrefix: first.NATS.SubjectPrefix,
		Lookup: func(dataset string) (schemas.PartitionType, bool) { return cfg.Load().Lookup(dataset) },
		Window: first.NATS.DuplicateWindow(),
		Queue:  "idem_watch_" + first.NATS.Consumer + "_",
		Log:    log,
		Now:    site.Now,
	}
	if m != nil {
		w.Published = func(dataset, reason string) { m.WatchPublished.WithLabelValues(dataset, reason).Inc() }
		w.Failed = func(dataset string) { m.WatchFailures.WithLabelValues(dataset).Inc() }
	}
	followDatasets(ctx, wg, cfg, "watch", watchDefinitions, func(c *config.Config, name string) (func(context.Context) error, error) {
		ds, err := watchDataset(c, name)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return w.Run(ctx, ds) }, nil
	}, log)
}

// watchDefinitions names the watched datasets of c, each with what its
// watch is built from.
func watchDefinitions(c *config.Config) map[string]string {
	out := map[string]string{}
	for name, d := range c.Datasets {
		if d == nil || d.Watch == nil || d.Source.Files == nil {
			continue
		}
		b, err := json.Marshal(struct {
			D  *config.Dataset
			S3 config.S3
		}{d, c.S3})
		if err != nil {
			continue
		}
		out[name] = string(b)
	}
	return out
}

// watchDataset builds the watch of dataset name: its files as its loads
// read them, its calendar, and its watch: settings.
func watchDataset(c *config.Config, name string) (*watch.Dataset, error) {
	d := c.Datasets[name]
	s, err := stage(c, d)
	if err != nil {
		return nil, err
	}
	ds := &watch.Dataset{Name: name, Type: d.PartitionType, Spec: s.Files.Spec, Store: s.Files.Store,
		Every: d.Watch.Every.Std(), Last: d.Watch.Last, RetryAfter: d.Watch.RetryAfter.Std(), Attempts: d.MaxAttempts()}
	if d.Watch.Retries != nil {
		ds.Retries = *d.Watch.Retries
	}
	if cal, ok := d.Calendar(); ok {
		ds.Calendar = &cal
	}
	if n := d.Watch.Notifications; n != nil {
		ds.Subject = n.Subject
	}
	return ds, nil
}
