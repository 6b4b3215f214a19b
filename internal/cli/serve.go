package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/service"
)

func serveCmd(e *env) *cobra.Command {
	var grace time.Duration
	c := &cobra.Command{
		Use:   "serve",
		Short: "Consume partition-ready events and load them (the service)",
		Long: `Consume events from the durable JetStream consumer and load each partition.
Serves /metrics, /healthz and /readyz on http.addr. On SIGTERM or Ctrl-C it
stops fetching, lets in-flight loads finish for --grace, acks or naks each
message, drains the connection and exits 0.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.validConfig()
			if err != nil {
				return err
			}
			return service.Run(cmd.Context(), service.Options{
				Config: cfg, Log: newLogger(e.errOut, e.getenv), BuildVersion: Version, Grace: grace,
				ClientName: "idem serve", Reload: e.validConfig,
			})
		},
	}
	c.Flags().DurationVar(&grace, "grace", consumer.DefaultShutdownGrace, "how long in-flight loads may finish after SIGTERM before they are interrupted and nak'ed")
	return c
}
