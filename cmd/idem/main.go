// Command idem makes data-pipeline tasks idempotent: it consumes "partition
// ready" events from NATS JetStream and loads PostgreSQL with an idempotent
// strategy. The commands live in internal/cli; this file only decides the exit
// code (cli.ExitCode).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	// Calendars name time zones (expect.timezone); the zone database is
	// built in, so a minimal image without /usr/share/zoneinfo works.
	_ "time/tzdata"

	"github.com/idem-data/idem/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.ExitCode(err))
}
