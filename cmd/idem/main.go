// Command idem makes data-pipeline tasks idempotent: it consumes "partition
// ready" events from NATS JetStream and loads PostgreSQL with an idempotent
// strategy. The commands live in internal/cli; this file only decides the exit
// code.
package main

import (
	"context"
	"errors"
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
	var usage *cli.UsageError
	var exit *cli.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &usage):
		os.Exit(2)
	case errors.As(err, &exit):
		os.Exit(exit.Code)
	default:
		os.Exit(1)
	}
}
