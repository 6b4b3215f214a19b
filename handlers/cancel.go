package handlers

import (
	"context"
	"errors"

	"github.com/idem-data/idem/audit"
)

// cancelled asks, before an attempt starts, whether an operator cancelled
// the event's backfill (audit.CancellationsOf: its run, or its partition's
// range after the event was published). A cancelled event is recorded as a
// finished `cancelled` attempt naming who cancelled it, and handled: the
// consumer acknowledges it without a load. A load that began before the
// cancellation finishes; it is one transaction, so nothing is half-loaded.
func (h *Handler) cancelled(ctx context.Context, a audit.Attempt, m Meta) (Outcome, bool, error) {
	outs, done, errs := h.cancelledEach(ctx, []audit.Attempt{a}, []Meta{m})
	return outs[0], done[0], errs[0]
}

// cancelledEach is cancelled for a group's events, asked in one statement:
// the answers at i are as[i]'s.
func (h *Handler) cancelledEach(ctx context.Context, as []audit.Attempt, ms []Meta) ([]Outcome, []bool, []error) {
	outs, done, errs := make([]Outcome, len(as)), make([]bool, len(as)), make([]error, len(as))
	qs := make([]audit.CancelQuery, len(as))
	for i, a := range as {
		qs[i] = audit.CancelQuery{RunKey: a.RunKey, Published: ms[i].Published}
	}
	cs, err := audit.CancellationsOf(ctx, h.DB, qs)
	for i, a := range as {
		if err != nil {
			errs[i] = classifyBeforeLoad(err)
			continue
		}
		outs[i], done[i], errs[i] = h.recordCancelled(ctx, a, cs[i])
	}
	return outs, done, errs
}

// recordCancelled records a's attempt `cancelled` by c, when c is not nil.
func (h *Handler) recordCancelled(ctx context.Context, a audit.Attempt, c *audit.Cancellation) (Outcome, bool, error) {
	if c == nil {
		return Outcome{}, false, nil
	}
	id, err := audit.RecordCancelled(ctx, h.DB, a, *c)
	if err != nil {
		return Outcome{}, false, classifyBeforeLoad(err)
	}
	h.Log.Info().Str("dataset", a.Dataset).Str("partition", a.Partition).Str("run_id", a.RunID).
		Str("cancelled_by", c.By).Msg("backfill cancelled: not loaded")
	return Outcome{Status: audit.StatusCancelled, AuditID: id}, true, nil
}

// errCancelledMeanwhile is what the begin says of an event whose backfill
// was cancelled after cancelled asked: nothing began. Its caller records
// the attempt `cancelled` once the load's connection is back in the pool
// (cancelledMeanwhile).
var errCancelledMeanwhile = errors.New("handlers: cancelled between the check and the begin")

// cancelledMeanwhile records a's attempt `cancelled` after the begin found
// the cancellation that cancelled had not: a cancel that committed while
// the attempt was on its way (a busy machine, a wait for a connection)
// begins nothing either.
func (h *Handler) cancelledMeanwhile(ctx context.Context, a audit.Attempt, m Meta) (Outcome, error) {
	out, done, err := h.cancelled(ctx, a, m)
	if err == nil && !done {
		err = classifyBeforeLoad(errors.New("handlers: the begin found a cancellation that is no longer there"))
	}
	return out, err
}
