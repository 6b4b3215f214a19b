package handlers

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/results"
	"github.com/idem-data/idem/strategies"
)

// ending is one attempt whose load transaction finish ends: loaded, with
// the rows its strategy reported, or (res nil) found done by the ledger
// check under its lock, so skipped.
type ending struct {
	l   *loading
	id  int64 // its audit row
	res *strategies.Result
}

// finish is the load's last round trip, for one event (Handle) or a group
// (HandleGroup) alike: in the transaction open on c, the skips the ledger
// found under the locks, and for every load its success and ledger entry
// with its result, its lineage, its checks' outcomes, its schema changes
// and its downstream events, then the COMMIT. Everything an attempt leaves
// for others commits with its load, or not at all.
//
// A join downstream costs one more round trip: its lock and readiness are
// asked before the COMMIT, and its event is queued once the answer is
// known. The error is audit.SuccessError's: ErrAlreadySucceeded or
// ErrNotStarted when the server refused a success.
func (h *Handler) finish(ctx context.Context, c *pgx.Conn, es []ending) error {
	b := &pgx.Batch{}
	b.Queue(defaultPlans)
	var (
		loaded []audit.Success
		joins  []pendingJoin
	)
	for _, e := range es {
		l := e.l
		if e.res == nil {
			if l.retracted != "" && !l.alreadyLoaded {
				audit.QueueSkipWhy(b, e.id, l.retracted)
			} else if l.superseded != "" && !l.alreadyLoaded {
				audit.QueueSkipWhy(b, e.id, l.superseded)
			} else {
				audit.QueueSkip(b, e.id)
			}
			l.queueResult(b, results.StatusSkipped, e.id, nil)
			continue
		}
		r := e.res
		s := audit.Success{RunKey: l.a.RunKey, ID: e.id, Force: l.a.Force,
			Rows: audit.Rows{Inserted: r.Inserted, Updated: r.Updated, Deleted: r.Deleted}, Checks: l.checked}
		if h.Results && l.m.StreamSeq > 0 {
			s.Result = l.result(results.StatusLoaded, e.id, &results.Rows{Inserted: r.Inserted, Updated: r.Updated, Deleted: r.Deleted})
		}
		loaded = append(loaded, s)
		if err := l.queueComplete(b, e.id, r.Inserted+r.Updated); err != nil {
			return err
		}
		// The checks passed: their outcomes commit with the load, no round
		// trip of their own.
		l.recorded = len(l.checked) > 0
		// A schema change the load made commits with its DDL and its rows.
		if err := audit.QueueRecordSchemaChanges(b, e.id, l.a.RunKey, l.plan.SchemaChanges()); err != nil {
			return err
		}
		// The files the load read commit with its rows.
		if fp, fs := l.stage.sourceFiles(); len(fs) > 0 {
			if err := audit.QueueRecordSourceFiles(b, e.id, l.a.RunKey, fp, fs); err != nil {
				return err
			}
		}
		if l.fp != nil {
			if err := audit.QueueRecordFingerprint(b, e.id, l.a.RunKey, *l.fp); err != nil {
				return err
			}
		}
		js, err := h.queueDownstream(b, l.ds, l.a, e.id)
		if err != nil {
			return err
		}
		joins = append(joins, js...)
	}
	if err := audit.QueueMarkSucceeded(b, loaded); err != nil {
		return err
	}
	if len(joins) == 0 {
		queueCommit(b)
	}
	err := audit.SuccessError(c.SendBatch(ctx, b).Close())
	if err != nil || len(joins) == 0 {
		return err
	}
	b = &pgx.Batch{}
	for _, j := range joins {
		if !*j.ready {
			zerolog.Ctx(ctx).Debug().Str("join", j.down).Msg("join waits for its other upstreams")
			continue
		}
		if err := h.enqueue(b, j.down, j.a, j.id); err != nil {
			return err
		}
	}
	queueCommit(b)
	return c.SendBatch(ctx, b).Close()
}

// queueCommit queues the COMMIT that ends the load's transaction; its
// callback fails when the server rolled back instead.
func queueCommit(b *pgx.Batch) {
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		if ct.String() != "COMMIT" {
			return fmt.Errorf("commit: the server answered %s", ct)
		}
		return nil
	})
}
