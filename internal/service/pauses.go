package service

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/metrics"
)

// pausePoll is how often a replica reads the pauses in force: a pause or a
// resume reaches every replica of the fleet within about this long.
const pausePoll = time.Second

// pauses keeps the pipeline's pauses in force (idem.dataset_pauses) in
// memory for the consumer's Paused, which is asked for every message, and
// sets idem_dataset_paused.
type pauses struct {
	db       audit.Querier
	pipeline string
	cfg      *atomic.Pointer[config.Config]
	m        *metrics.Metrics
	log      zerolog.Logger

	cur    atomic.Pointer[map[string]audit.Pause]
	failed bool
}

// Paused is consumer.Config.Paused. A pause whose until passed ends here at
// once, without waiting for the next read.
func (p *pauses) Paused(dataset string) (time.Time, bool) {
	m := p.cur.Load()
	if m == nil {
		return time.Time{}, false
	}
	ps, ok := (*m)[dataset]
	if !ok || !ps.InForceAt(time.Now()) {
		return time.Time{}, false
	}
	if ps.Until != nil {
		return *ps.Until, true
	}
	return time.Time{}, true
}

// refresh reads the pauses once; on an error the last ones read stay.
func (p *pauses) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	in, err := audit.PausesInForce(rctx, p.db, p.pipeline)
	if err != nil {
		if !p.failed && ctx.Err() == nil {
			p.log.Warn().Err(err).Msg("pauses not read: the last ones read stay in force until the database answers")
		}
		p.failed = true
		return
	}
	p.failed = false
	p.cur.Store(&in)
	if p.m == nil {
		return
	}
	now := time.Now()
	for _, name := range p.cfg.Load().DatasetNames() {
		v := 0.0
		if ps, ok := in[name]; ok && ps.InForceAt(now) {
			v = 1
		}
		p.m.DatasetPaused.WithLabelValues(name).Set(v)
	}
}

func (p *pauses) run(ctx context.Context) {
	t := time.NewTicker(pausePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.refresh(ctx)
		}
	}
}
