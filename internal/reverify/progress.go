package reverify

import (
	"context"
	"time"

	"github.com/idem-data/idem/audit"
)

// How far a pass got. Every event of the window up to a stream sequence is
// settled on the server the pass verified; a pass cut by a fault resumes
// after it on the same server, in whichever replica takes the lease next
// (the progress is in the warehouse, idem.reverify_progress), and on
// another server (a new identity) it starts again from the window's
// beginning. This process keeps its own last progress too, for when the
// warehouse did not take the last store.

// A pass stores its progress once it has moved progressEvery stream
// sequences or progressPeriod since the last store, and when it is cut: a
// replica killed mid-pass costs the next one at most that much work again.
const (
	progressEvery  = 500
	progressPeriod = 2 * time.Second
)

// resumable says p is progress of this pass's server id and stream.
func (r *Reverifier) resumable(p audit.Progress, id audit.Identity) bool {
	return p.ID == id && p.Stream == r.cfg.Stream
}

// resumeAfter is the stream sequence a cut pass on server id settled
// through: the furthest of this process's and the one stored in the
// warehouse (by any replica), 0 when neither is of id.
func (r *Reverifier) resumeAfter(ctx context.Context, id audit.Identity) (uint64, error) {
	var after uint64
	r.mu.Lock()
	if r.resumable(r.progress, id) {
		after = r.progress.Through
	}
	r.mu.Unlock()
	p, ok, err := audit.ReverifyProgress(ctx, r.cfg.DB, r.cfg.Pipeline)
	if err != nil {
		return 0, err
	}
	if ok && r.resumable(p, id) {
		after = max(after, p.Through)
	}
	return after, nil
}

// tracker keeps one pass's progress: in this process at every settled
// event, in the warehouse now and then (progressEvery, progressPeriod).
type tracker struct {
	r      *Reverifier
	id     audit.Identity
	stored uint64    // in the warehouse through
	at     time.Time // of the last store
}

// track starts the progress of a pass on server id that resumes after
// after (0: from the window's beginning).
func (r *Reverifier) track(id audit.Identity, after uint64) *tracker {
	return &tracker{r: r, id: id, stored: after, at: time.Now()}
}

// settled records that every event through seq is settled.
func (t *tracker) settled(ctx context.Context, seq uint64) {
	t.r.mu.Lock()
	t.r.progress = audit.Progress{ID: t.id, Stream: t.r.cfg.Stream, Through: seq}
	t.r.mu.Unlock()
	if seq-t.stored >= progressEvery || time.Since(t.at) >= progressPeriod {
		t.flush(ctx)
	}
}

// flush stores this process's progress; a failure is left to the next
// flush (the progress in this process still holds for it).
func (t *tracker) flush(ctx context.Context) {
	t.at = time.Now()
	t.r.mu.Lock()
	p := t.r.progress
	t.r.mu.Unlock()
	if p.Through <= t.stored {
		return
	}
	if err := audit.StoreReverifyProgress(ctx, t.r.cfg.DB, t.r.cfg.Pipeline, p); err != nil {
		t.r.cfg.Log.Debug().Err(err).Uint64("through", p.Through).Msg("re-verification progress not stored")
		return
	}
	t.stored = p.Through
}

// flushCut stores what a cut pass settled, for the next replica, even when
// the pass's context ended (the lease lost, the process stopping); a
// warehouse that is gone refuses it in a second.
func (t *tracker) flushCut(ctx context.Context) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	t.flush(fctx)
}
