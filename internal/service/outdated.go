package service

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/backfill"
	"github.com/idem-data/idem/internal/config"
)

// The reload of outdated partitions (on_definition_change: reload) runs in
// every replica; one at a time holds its lease, so the fleet passes about
// once per outdatedInterval.
const (
	outdatedInterval   = time.Minute
	outdatedFirstDelay = 30 * time.Second // the fleet learns of this replica first
	outdatedLease      = "outdated_reload"
	outdatedLeaseTTL   = time.Minute
)

// startOutdatedReload passes over the datasets with on_definition_change:
// reload of the config in force until ctx is done.
func startOutdatedReload(ctx context.Context, wg *sync.WaitGroup, pool *pgxpool.Pool, js jetstream.JetStream, c *consumer.Consumer,
	cfg *atomic.Pointer[config.Config], log zerolog.Logger) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for wait := outdatedFirstDelay; sleep(ctx, wait); wait = outdatedInterval {
			reloadOutdated(ctx, pool, js, c.FleetNow, cfg.Load(), log)
		}
	}()
}

// reloadOutdated is one pass: under the lease, for each dataset with
// on_definition_change: reload, the fleet read now, a backfill of its
// outdated partitions once every live replica runs its current
// definition (backfill.ReloadOutdated). Failures are logged and tried
// again next pass.
func reloadOutdated(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, fleet func(context.Context) ([]consumer.Member, error),
	cfg *config.Config, log zerolog.Logger) {
	var names []string
	for _, name := range cfg.DatasetNames() {
		if cfg.Datasets[name].ReloadsOutdated() {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	lease, ok, err := audit.TryLease(ctx, pool, outdatedLease, outdatedLeaseTTL)
	if err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("outdated partitions: lease not taken; the next pass tries again")
		}
		return
	}
	_ = lease.Hold(ctx, func(ctx context.Context) error {
		members, err := fleet(ctx)
		if err != nil {
			log.Warn().Err(err).Msg("outdated partitions: the fleet could not be read; nothing reloaded")
			return nil
		}
		for _, name := range names {
			r, err := backfill.ReloadOutdated(ctx, pool, js, cfg, name, members)
			ev := log.Info()
			switch {
			case err != nil:
				ev = log.Warn().Err(err)
			case r.Published == 0:
				continue
			}
			ev.Str("dataset", name).Str("run_id", r.RunID).Bool("fleet_agrees", r.Agreed).Int("outdated", r.Outdated).
				Int("published", r.Published).Int("duplicates", r.Duplicates).Int("unknown_definition", r.Unknown).
				Int("reloaded_before", r.Reloaded).Msg("outdated partitions: reloading those loaded under another definition " +
				"(those of an unknown definition, or reloaded by this run before, wait for `idem backfill --reprocess outdated`)")
		}
		return nil
	})
}
