package cli

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/service"
	"github.com/idem-data/idem/schemas"
)

// The commands below share the service's wiring under their old names, so
// that they connect, build datasets and plan loads exactly as serve does.

// connect opens a pool as serve does, fitted to what stands in front of
// PostgreSQL (statement_mode auto), and checks the server answers within
// 10 s.
func connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pool, _, err := service.Connect(ctx, url, "")
	return pool, err
}

// datasets builds the handler's datasets from a validated config.
func datasets(cfg *config.Config) (map[string]*handlers.Dataset, error) {
	return service.Datasets(cfg)
}

// samplePartition is a partition key of the dataset's type, used to plan a
// load in `idem validate` without reading the clock.
func samplePartition(t schemas.PartitionType) string {
	return service.SamplePartition(t)
}
