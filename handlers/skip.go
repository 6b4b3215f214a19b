package handlers

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/schemas"
)

// SkipDone answers, in one round trip, which of evs are runs already done
// (an ordinary run in the ledger, a forced one whose own message already
// succeeded) and records each such skip as Handle would: its `skipped`
// row and its result, in one statement. skips[i] is the attempt number of
// evs[i]'s skip; 0 leaves the event to Handle: a run not done, a dataset
// this replica does not know, a warehouse not yet verified, any error. The consumer asks it for events that wait for
// a load slot, so that a duplicate never takes one.
func (h *Handler) SkipDone(ctx context.Context, evs []schemas.Event, ms []Meta) (skips []int) {
	skips = make([]int, len(evs))
	if h.Verified != nil {
		// Never wait here: a held warehouse leaves them to their loads.
		now, cancel := context.WithCancel(ctx)
		cancel()
		if h.Verified(now) != nil {
			return skips
		}
	}
	type message struct {
		run audit.RunKey
		seq uint64
	}
	type asked struct {
		i int
		l *loading
	}
	var (
		as   []asked
		gs   []audit.GroupBegin
		seen = map[message]bool{}
	)
	for i, ev := range evs {
		ds, ok := h.dataset(ev.Dataset)
		if !ok {
			continue
		}
		a := h.attemptOf(ctx, ds, ev, ms[i])
		if a.Force && a.StreamSeq == 0 {
			continue // a forced run without its message's sequence is never a duplicate
		}
		m := message{a.RunKey, a.StreamSeq}
		if seen[m] {
			continue // the same message twice: the second goes to its load
		}
		seen[m] = true
		l := &loading{h: h, ds: ds, a: a, key: ev.Key, m: ms[i]}
		as = append(as, asked{i: i, l: l})
		gs = append(gs, audit.GroupBegin{Attempt: a, SkipResult: l.skipResult(), Into: new(audit.Begun)})
	}
	if len(gs) == 0 {
		return skips
	}
	b := &pgx.Batch{}
	var ran bool
	if err := audit.QueueSkipDone(b, gs, &ran); err != nil {
		h.Log.Warn().Err(err).Msg("duplicates not looked up: each goes to its load")
		return skips
	}
	c, err := h.DB.Acquire(ctx)
	if err == nil {
		err = c.SendBatch(ctx, b).Close()
		c.Release()
	}
	if err != nil || !ran {
		h.Log.Debug().Err(err).Msg("duplicates not looked up: each goes to its load")
		return skips
	}
	for j, x := range as {
		bg := gs[j].Into
		if !bg.Skipped {
			continue
		}
		x.l.a.Attempt = bg.Attempt
		h.Log.Info().Str("dataset", x.l.a.Dataset).Str("partition", x.l.a.Partition).Str("run_id", x.l.a.RunID).
			Uint64("stream_seq", x.l.m.StreamSeq).Int("attempt", bg.Attempt).Msg("run already succeeded: skipped")
		// Its result, when published, was written with the skip.
		_ = x.l.skipped(ctx, bg.ID, bg.ResultWritten)
		skips[x.i] = bg.Attempt
	}
	return skips
}
