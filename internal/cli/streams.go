package cli

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/natsconn"
)

func streamsCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "streams",
		Short: "Create the streams and the durable consumers, or update the consumers",
		Long: `Create the events stream, the dead-letter stream and the durable consumers when
missing, and update the consumers to the config, printing each setting it
changes. An existing stream only ever gains subjects: a different retention or
storage is reported, never changed. 'idem serve' creates what is missing at
start but never changes an existing consumer: it warns about a difference, so
that replicas of two versions do not overwrite each other during a rolling
deploy. Run this command to apply it.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.validConfig()
			if err != nil {
				return err
			}
			nc, err := natsconn.Connect(cmd.Context(), cfg.NATS, "idem streams", zerolog.Nop())
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			sc := streamsConfig(cfg, consumerConfig(cfg, zerolog.Nop(), consumer.Hooks{}))
			changed, err := consumer.ApplyStreams(cmd.Context(), js, sc)
			for _, c := range changed {
				fmt.Fprintln(e.out, c)
			}
			if err != nil {
				return err
			}
			if _, err := consumer.EnsureFleet(cmd.Context(), js, consumer.FleetConfig{Bucket: cfg.NATS.FleetBucketName()}); err != nil {
				return fmt.Errorf("fleet bucket %s: %w", cfg.NATS.FleetBucketName(), err)
			}
			status := "ok"
			if len(changed) > 0 {
				status = "updated"
			}
			fmt.Fprintf(e.out, "stream %s (%s.>), dead letters %s (%s.>), consumer %s, fleet bucket %s: %s\n",
				sc.Stream, sc.SubjectPrefix, sc.DLQStream, sc.DLQSubjectPrefix, sc.Consumer, cfg.NATS.FleetBucketName(), status)
			return nil
		},
	}
}

// streamsConfig is what EnsureStreams and ApplyStreams get: the server side
// of ccfg and the config's duplicate window.
func streamsConfig(cfg *config.Config, ccfg consumer.Config) consumer.StreamsConfig {
	sc := ccfg.Streams()
	sc.Duplicates = cfg.NATS.DuplicateWindow()
	return sc
}

// ensureStreams is serve's start: it creates what is missing and warns about
// each consumer setting that differs from the config, changing none.
func ensureStreams(ctx context.Context, js jetstream.JetStream, sc consumer.StreamsConfig, log zerolog.Logger) error {
	if err := consumer.EnsureStreams(ctx, js, sc); err != nil {
		return err
	}
	drifts, err := consumer.ConsumerDrift(ctx, js, sc)
	if err != nil {
		return err
	}
	for _, d := range drifts {
		log.Warn().Str("stream", d.Stream).Str("consumer", d.Consumer).Str("field", d.Field).
			Str("server", d.Server).Str("config", d.Config).
			Msg("consumer settings differ from the config; run `idem streams` to apply")
	}
	return nil
}
