package why

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/deadletter"
)

// DatasetOf is what a story needs of a configured dataset: its upstreams
// (the datasets whose then: names it) and its calendar.
func DatasetOf(cfg *config.Config, name string) Dataset {
	ds := Dataset{Name: name, Upstreams: cfg.Upstreams(name)}
	if d, ok := cfg.Datasets[name]; ok {
		ds.Definition, ds.DefinitionJSON = d.DefinitionHash(), d.Definition()
		if cal, ok := d.Calendar(); ok {
			ds.Calendar = &cal
		}
		if w, ok := d.RecheckWindow(); ok {
			ds.Recheck = &Recheck{Window: w, Every: d.Recheck.Every.Std()}
		}
	}
	return ds
}

// OpenJetStream finds the events and dead-letter streams cfg names.
func OpenJetStream(ctx context.Context, js jetstream.JetStream, cfg *config.Config) (JetStream, error) {
	ev, err := js.Stream(ctx, cfg.NATS.Stream)
	if err != nil {
		return JetStream{}, fmt.Errorf("events stream %s: %w", cfg.NATS.Stream, err)
	}
	dlq, err := deadletter.Open(ctx, js, deadletter.Config{
		Stream: cfg.NATS.DLQStream, SubjectPrefix: cfg.NATS.DLQSubjectPrefix, EventsStream: cfg.NATS.Stream})
	if err != nil {
		return JetStream{}, err
	}
	return JetStream{Events: ev, DLQ: dlq}, nil
}
