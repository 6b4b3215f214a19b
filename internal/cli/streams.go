package cli

import (
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/natsconn"
)

func streamsCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "streams",
		Short: "Create or update the streams and the durable consumer",
		Long: `Create the events stream, the dead-letter stream and the durable consumer when
missing, and update the consumer to the config. An existing stream only ever
gains subjects: a different retention or storage is reported, never changed.
'idem serve' does the same at start.`,
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
			sc := consumerConfig(cfg, zerolog.Nop(), consumer.Hooks{}).Streams()
			if err := consumer.EnsureStreams(cmd.Context(), js, sc); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "stream %s (%s.>), dead letters %s (%s.>), consumer %s: ok\n",
				sc.Stream, sc.SubjectPrefix, sc.DLQStream, sc.DLQSubjectPrefix, sc.Consumer)
			return nil
		},
	}
}
