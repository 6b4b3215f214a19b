package service

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/metrics"
)

// reloader applies a config read again (SIGHUP) to a running `idem serve`:
// the datasets change without a restart and without dropping a message in
// flight. The new config is validated first, on its own and against the
// database; a bad one is refused with a log line and a metric, and the old
// one keeps serving.
type reloader struct {
	load    func() (*config.Config, error)
	pool    *pgxpool.Pool
	h       *handlers.Handler
	c       *consumer.Consumer
	m       *metrics.Metrics
	log     zerolog.Logger
	version *atomic.Pointer[string]
	// applied, when set, receives each config applied (the status page and
	// the observer follow it).
	applied *atomic.Pointer[config.Config]

	mu  sync.Mutex
	cur *config.Config
	dss map[string]*handlers.Dataset // the map the handler serves
}

// run reloads on every signal until ctx ends.
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := r.reload(ctx); err != nil {
				r.m.ConfigReloads.WithLabelValues("refused").Inc()
				r.log.Error().Err(err).Str("config_version", *r.version.Load()).
					Msg("config reload refused: the running config keeps serving")
			}
		}
	}
}

func (r *reloader) reload(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := r.load()
	if err != nil {
		return err
	}
	if next.Pipeline != r.cur.Pipeline {
		return fmt.Errorf("pipeline %q -> %q: the audit's dag_id changes only with a restart", r.cur.Pipeline, next.Pipeline)
	}
	diff := DiffDefinitions(Definitions(r.cur), Definitions(next))
	built, err := Datasets(next)
	if err != nil {
		return err
	}
	var touched []string
	for name := range built {
		if _, changed := diff.Changed[name]; changed || slices.Contains(diff.Added, name) {
			touched = append(touched, name)
			continue
		}
		// Unchanged: keep its state (its view is prepared), unless another
		// dataset's then: made it a join or stopped it being one.
		if old, ok := r.dss[name]; ok && slices.Equal(old.Upstreams, built[name].Upstreams) {
			built[name] = old
		}
	}
	sort.Strings(touched)
	for _, name := range touched {
		if err := r.h.PrepareDataset(ctx, built[name]); err != nil {
			return fmt.Errorf("dataset %s: %w", name, err)
		}
		if err := handlers.Check(ctx, r.pool, built[name], SamplePartition(built[name].PartitionType)); err != nil {
			return fmt.Errorf("dataset %s: %w", name, err)
		}
	}
	version := ConfigVersion(next)
	ds := consumerConfig(next, r.log, consumer.Hooks{}).Datasets
	if err := r.c.Reload(ctx, ds, version, Definitions(next)); err != nil {
		return err
	}
	later := restartOnly(r.cur, next)
	if r.h.Lineage != nil {
		lineageInputs(ctx, r.pool, next, built, r.h.Lineage.Warehouse, r.log)
	}
	recordDefinitions(ctx, r.pool, next, r.log)
	r.h.Replace(built)
	r.cur, r.dss = next, built
	if r.applied != nil {
		r.applied.Store(next)
	}
	r.version.Store(&version)
	initMetrics(r.m, next)
	r.m.ConfigInfo.Reset()
	r.m.ConfigInfo.WithLabelValues(version).Set(1)
	r.m.ConfigReloads.WithLabelValues("applied").Inc()
	changed := make([]string, 0, len(diff.Changed))
	for name := range diff.Changed {
		changed = append(changed, name)
	}
	sort.Strings(changed)
	ev := r.log.Info().Str("config_version", version).Strs("added", diff.Added).Strs("removed", diff.Removed).Strs("changed", changed)
	if len(later) > 0 {
		ev = ev.Strs("needs_restart", later)
	}
	ev.Msg("config reloaded")
	return nil
}

// restartOnly names the sections a reload does not apply: connections and
// listeners are built once, at start.
func restartOnly(cur, next *config.Config) []string {
	var out []string
	if !reflect.DeepEqual(cur.NATS, next.NATS) {
		out = append(out, "nats")
	}
	if !reflect.DeepEqual(cur.Postgres, next.Postgres) {
		out = append(out, "postgres")
	}
	if !reflect.DeepEqual(cur.HTTP, next.HTTP) {
		out = append(out, "http")
	}
	return out
}
