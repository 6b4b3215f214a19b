package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/service"
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
			nc, js, err := e.openNATS(cmd.Context(), cfg, "idem streams")
			if err != nil {
				return err
			}
			defer nc.Close()
			sc := service.StreamsConfig(cfg)
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
			fmt.Fprintf(e.out, "stream %s (%s.>, %s.>), dead letters %s (%s.>), consumers %s and %s (backfill), fleet bucket %s: %s\n",
				sc.Stream, sc.SubjectPrefix, sc.BackfillSubjectPrefix(), sc.DLQStream, sc.DLQSubjectPrefix, sc.Consumer, sc.BackfillName(), cfg.NATS.FleetBucketName(), status)
			return nil
		},
	}
}
