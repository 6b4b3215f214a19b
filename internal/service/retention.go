package service

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/metrics"
)

// Audit retention runs in every replica; a pass another replica is running
// is skipped (audit.Prune's lease), so the fleet prunes about once per
// pruneInterval.
const (
	pruneInterval   = time.Hour
	pruneFirstDelay = time.Minute // let start-up and the first loads go first
)

// startRetention prunes the audit table to the retention of the config in
// force (read again each pass, so a reload applies) until ctx is done.
func startRetention(ctx context.Context, wg *sync.WaitGroup, pool *pgxpool.Pool, cfg *atomic.Pointer[config.Config], m *metrics.Metrics, log zerolog.Logger) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for wait := pruneFirstDelay; sleep(ctx, wait); wait = pruneInterval {
			pruneAudit(ctx, pool, cfg.Load().AuditRetention(), m, log)
		}
	}()
}

// pruneAudit runs one pass; failures are logged and retried next pass.
func pruneAudit(ctx context.Context, pool *pgxpool.Pool, r config.Retention, m *metrics.Metrics, log zerolog.Logger) {
	if r.Forever() {
		return
	}
	start := time.Now()
	res, err := audit.Prune(ctx, pool, audit.PruneOptions{Retention: r.Std(), Pruned: func(n int64) { m.AuditPruned.Add(float64(n)) }})
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn().Err(err).Int64("pruned", res.Deleted).Msg("audit retention: pass stopped; the next one carries on")
	case res.Deleted > 0:
		log.Info().Int64("pruned", res.Deleted).Int("batches", res.Batches).Str("retention", r.String()).
			Dur("took", time.Since(start)).Msg("audit retention: pruned old attempts")
	}
	if err != nil || res.Busy {
		return
	}
	// Archived versions (keep_versions) follow the audit's retention.
	n, err := audit.PruneVersions(ctx, pool, r.Std())
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn().Err(err).Msg("audit retention: archived versions not pruned; the next pass tries again")
	case n > 0:
		log.Info().Int64("pruned_versions", n).Str("retention", r.String()).Msg("audit retention: pruned old archived versions")
	}
}

// sleep waits d, or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
