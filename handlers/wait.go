package handlers

// A source not ready yet holds its event before any attempt: files without
// their ready rule met, a standby too far behind (source.go), a SELECT
// source's ready_when false (ReadyWhen). The event waits, no attempt and no
// retry spent, redelivered with a growing delay, and its wait is written
// where the page, `idem audit why` and the API read it; past wait_up_to it
// is dead-lettered once.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
	"github.com/idem-data/idem/strategies"
)

// WaitError says the event's source is not ready yet: no load ran, no
// attempt is spent, and the consumer redelivers the message after Delay.
type WaitError struct {
	Reason string
	Delay  time.Duration
}

func (e *WaitError) Error() string { return "waiting: " + e.Reason }

// WaitFor is the consumer's behaviour for a wait.
func (e *WaitError) WaitFor() time.Duration { return e.Delay }

// Reasons of a staged source's failures: files missing past the wait,
// and a source not ready past it.
const (
	ReasonMissingFiles = files.ReasonMissingFiles
	ReasonNotReady     = "not_ready"
)

// waitDelay paces a waiting event's redeliveries: a tenth of how long it
// has waited, from 2 s to a minute, so a partition that lands soon is
// loaded soon and one that lands late costs one delivery a minute.
func waitDelay(waited time.Duration) time.Duration {
	return min(max(waited/10, 2*time.Second), time.Minute)
}

// waitOrGiveUp is a *WaitError for a source not ready (why), paced by how
// long the event has waited, or past upTo its dead letter with reason.
func waitOrGiveUp(why error, published, now time.Time, upTo time.Duration, reason string) error {
	waited := now.Sub(published)
	if published.IsZero() || waited < 0 {
		waited = 0
	}
	if waited >= upTo {
		return Fatal(reason, &waitOverError{fmt.Errorf("still not ready after wait_up_to %s: %w", upTo, why)})
	}
	return &WaitError{Reason: why.Error(), Delay: waitDelay(waited)}
}

// ReadyWhen is a SELECT source's ready_when: a query returning one boolean,
// asked before each attempt, bound like the source.
type ReadyWhen struct {
	SQL      string
	WaitUpTo time.Duration
}

// check asks the warehouse whether ev's partition is ready: nil when it
// is, a *WaitError while it is not (false or NULL), its dead letter
// (not_ready) past WaitUpTo. A run that already loaded never waits: its
// attempt is a skipped duplicate, whatever the source holds now.
func (r *ReadyWhen) check(ctx context.Context, db DB, k audit.RunKey, ev schemas.Event, published, now time.Time) error {
	qctx, cancel := context.WithTimeout(ctx, readyWhenTimeout)
	defer cancel()
	var ok *bool
	p := strategies.Params{Partition: ev.Key.Key, RunID: ev.RunID}
	if err := db.QueryRow(qctx, r.SQL, p.NamedArgs()).Scan(&ok); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			ok = nil
		} else {
			return Classify(fmt.Errorf("ready_when: %w", err))
		}
	}
	if ok != nil && *ok {
		return nil
	}
	if !ev.Force {
		done, err := audit.RunLoaded(ctx, db, k)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
	return waitOrGiveUp(errors.New("ready_when is not true yet"), published, now, r.WaitUpTo, ReasonNotReady)
}

// readyWhenTimeout bounds one ready_when query: a readiness check that
// hangs holds the message, not the warehouse.
const readyWhenTimeout = 30 * time.Second

// waitOverError is a wait that spent wait_up_to: the event's dead letter.
type waitOverError struct{ err error }

func (e *waitOverError) Error() string { return e.err.Error() }
func (e *waitOverError) Unwrap() error { return e.err }

// recordWait writes a wait, or its end, where the page, `idem audit why`
// and the API read it (audit.RecordWait): a waiting event runs no attempt,
// so the audit's attempts would not show it. Best effort: a wait the audit
// misses is still a wait, and the log says so.
func (h *Handler) recordWait(ctx context.Context, a audit.Attempt, upTo time.Duration, published time.Time, err error) {
	var (
		w    *WaitError
		over *waitOverError
	)
	reason, gaveUp := "", false
	switch {
	case errors.As(err, &w):
		reason = w.Reason
	case errors.As(err, &over):
		reason, gaveUp = over.Error(), true
	default:
		return
	}
	if published.IsZero() {
		published = h.now()
	}
	if err := audit.RecordWait(ctx, h.DB, a.RunKey, reason, published, published.Add(upTo), gaveUp); err != nil {
		h.Log.Warn().Err(err).Str("dataset", a.Dataset).Str("partition", a.Partition).Msg("could not record the wait")
	}
}

// sourceReady asks, before an attempt is counted, whether ev's partition is
// there to load: a staged source's ready rule or lag gate, then its files'
// new columns (Staged.Evolve), or a SELECT source's ready_when. A source
// not ready comes back as a *WaitError (or, past wait_up_to, its dead
// letter), its wait recorded. The staging is nil for a SELECT source.
func (h *Handler) sourceReady(ctx context.Context, ds *Dataset, ev schemas.Event, a audit.Attempt, m Meta) (*staging, error) {
	if s := ds.Stage; s != nil {
		if s.Evolve && !ds.prepared.Load() {
			// The files' columns are compared with the stage's, which the
			// dataset's preparation reads.
			if err := h.PrepareDataset(ctx, ds); err != nil {
				return nil, classifyBeforeLoad(err)
			}
		}
		st, err := s.ready(ctx, ev.Key, m.Published, h.now())
		if err != nil {
			h.recordWait(ctx, a, s.WaitUpTo, m.Published, err)
			return nil, err
		}
		return st, s.newColumns(ctx, h.DB, ds.Target, st)
	}
	if ds.Ready != nil {
		if err := ds.Ready.check(ctx, h.DB, a.RunKey, ev, m.Published, h.now()); err != nil {
			h.recordWait(ctx, a, ds.Ready.WaitUpTo, m.Published, err)
			return nil, err
		}
	}
	return nil, nil
}
