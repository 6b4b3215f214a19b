package service

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/clock"
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

	cur    atomic.Pointer[map[string]time.Time]
	failed bool
	// now is this replica's clock (time.Now; a test steps it).
	now func() time.Time
	// site, when set, learns the database's clock at each read.
	site *clock.Site
}

// Paused is consumer.Config.Paused: whether dataset is paused, and until
// when (zero: until resumed) on this replica's clock. A pause whose until
// passed ends here at once, without waiting for the next read.
//
// The pauses are read by the database's clock; each until is kept as a
// deadline on this replica's, measured from the read (time.Now carries a
// monotonic reading, which a step of the wall clock does not move). A
// replica whose clock is an hour off, or steps an hour, holds a pause as
// long as the database says, no longer and no shorter.
func (p *pauses) Paused(dataset string) (time.Time, bool) {
	m := p.cur.Load()
	if m == nil {
		// Never read (the warehouse was down when this replica started):
		// whether the dataset is paused is unknown, so its messages wait
		// for the next read rather than load through a pause.
		return p.clock().Add(pausePoll), true
	}
	deadline, ok := (*m)[dataset]
	if !ok || !deadline.IsZero() && !p.clock().Before(deadline) {
		return time.Time{}, false
	}
	return deadline, true
}

func (p *pauses) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// refresh reads the pauses once; on an error the last ones read stay.
func (p *pauses) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	dbNow, err := audit.DatabaseNow(rctx, p.db)
	local := p.clock()
	var in map[string]audit.Pause
	if err == nil {
		in, err = audit.PausesInForce(rctx, p.db, p.pipeline)
	}
	if err != nil {
		if !p.failed && ctx.Err() == nil {
			p.log.Warn().Err(err).Msg("pauses not read: the last ones read stay in force until the database answers")
		}
		p.failed = true
		return
	}
	p.failed = false
	if p.site != nil {
		p.site.Learn(dbNow)
	}
	deadlines := make(map[string]time.Time, len(in))
	for name, ps := range in {
		var d time.Time // until resumed
		if ps.Until != nil {
			d = local.Add(ps.Until.Sub(dbNow))
		}
		deadlines[name] = d
	}
	p.cur.Store(&deadlines)
	if p.m == nil {
		return
	}
	for _, name := range p.cfg.Load().DatasetNames() {
		v := 0.0
		if _, ok := p.Paused(name); ok {
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
