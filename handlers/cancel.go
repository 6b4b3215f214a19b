package handlers

import (
	"context"

	"github.com/idem-data/idem/audit"
)

// cancelled asks, before an attempt starts, whether an operator cancelled
// the event's backfill (audit.CancellationOf: its run, or its partition's
// range after the event was published). A cancelled event is recorded as a
// finished `cancelled` attempt naming who cancelled it, and handled: the
// consumer acknowledges it without a load. A load that began before the
// cancellation finishes; it is one transaction, so nothing is half-loaded.
func (h *Handler) cancelled(ctx context.Context, a audit.Attempt, m Meta) (Outcome, bool, error) {
	c, err := audit.CancellationOf(ctx, h.DB, a.Pipeline, a.Dataset, a.Partition, a.RunID, m.Published)
	if err != nil {
		return Outcome{}, false, classifyBeforeLoad(err)
	}
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
