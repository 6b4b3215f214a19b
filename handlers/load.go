package handlers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/internal/results"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// loading is one event's load on the connection it holds. Its statements
// travel in three pipelined round trips:
//
//  1. the audit statement (ledger check, budget, `started` row) and COMMIT,
//     then BEGIN, the settings, the partition lock (tried), the ledger
//     check under it and the strategy's catalog reads;
//  2. the strategy's load;
//  3. finish: the audit success and the ledger entry with the result (one
//     statement), the lineage, the checks' outcomes, the schema changes,
//     the downstream events, COMMIT; a group load ends the same way.
//
// The `started` row is committed by that first COMMIT, before the load
// runs, without a round trip of its own (the pool commits bookkeeping
// asynchronously; the load's COMMIT flushes it too). A lock held by another
// load of the partition, a join's readiness and a dataset's first load
// (its one-time setup) each add a round trip.
type loading struct {
	h   *Handler
	ds  *Dataset
	a   audit.Attempt
	key schemas.Partition
	m   Meta
	// started is when the attempt's load began (its lineage START).
	started time.Time
	c       *pgx.Conn
	log     zerolog.Logger

	// begun: the audit statement ran, so its row is committed.
	begun bool
	// locked answers the partition lock (tried); alreadyLoaded, the
	// ledger's lookup under it: the run (or, forced, this message) has
	// already loaded, so this attempt is skipped.
	locked, alreadyLoaded bool
	// retracted says why the partition is retracted (an operator emptied
	// it on purpose): an ordinary event is then skipped, a forced one
	// loads. "" when it is not.
	retracted string
	// superseded says why a watch's run is skipped: the partition's latest
	// success, committed while its event waited, read the very files this
	// load would read. "" when it did not, or the run is no watch's.
	superseded string
	plan       *strategies.Plan
	// checked are the outcomes of the dataset's checks on this load;
	// recorded, that they went out with the load's success.
	checked  []checks.Outcome
	recorded bool
	// stage is the attempt's source outside the warehouse, when its
	// dataset has one.
	stage *staging
	// fp is the fingerprint of the source taken before the attempt
	// (Dataset.Fingerprint), stored with its success.
	fp *audit.SourceFingerprint
}

func (l *loading) params() strategies.Params {
	return strategies.Params{Partition: l.a.Partition, RunID: l.a.RunID}
}

// begin sends round trip 1 and, when needed, what the lock or the
// dataset's setup adds. An error with l.begun false happened before any
// audit row was written.
func (l *loading) begin(ctx context.Context, budget int) (audit.Begun, error) {
	var bg audit.Begun
	b := &pgx.Batch{}
	audit.QueueBegin(b, l.a, budget, l.skipResult(), &bg, &l.begun)
	prepared := l.ds.prepared.Load()
	if prepared {
		b.Queue("COMMIT")
		l.queueOpen(b)
	}
	if err := l.c.SendBatch(ctx, b).Close(); err != nil || bg.Spent || bg.Paused || bg.Skipped {
		return bg, err
	}
	if !prepared {
		if err := prepareOn(ctx, l.c, l.ds); err != nil {
			return bg, err
		}
		b := &pgx.Batch{}
		l.queueOpen(b)
		if err := l.c.SendBatch(ctx, b).Close(); err != nil {
			return bg, err
		}
	}
	return bg, l.waitLock(ctx)
}

// waitLock waits for the partition's lock when another load held it at
// the try, then checks the ledger again, in a snapshot taken after it.
func (l *loading) waitLock(ctx context.Context) error {
	if l.locked {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue(audit.LockSQL, audit.PartitionLockKey(l.a.Pipeline, l.a.Dataset, l.a.Partition))
	l.queueCheck(b)
	if err := l.c.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	l.locked = true
	return nil
}

// open opens the load's transaction for an attempt whose audit row is
// already committed (a member of a group that fell back to loading alone):
// the one-time setup if needed, then what begin queues after its COMMIT,
// and the lock.
func (l *loading) open(ctx context.Context) error {
	l.begun = true
	if !l.ds.prepared.Load() {
		if err := prepareOn(ctx, l.c, l.ds); err != nil {
			return err
		}
	}
	b := &pgx.Batch{}
	l.queueOpen(b)
	if err := l.c.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	return l.waitLock(ctx)
}

// queueOpen queues the opening of the load's transaction: settings, the
// partition lock (tried), the ledger check under it (its own statement, so
// its snapshot follows the lock), and the strategy's catalog reads.
func (l *loading) queueOpen(b *pgx.Batch) {
	l.queueSettings(b)
	l.queueMember(b)
}

// queueSettings queues BEGIN and the load's settings.
func (l *loading) queueSettings(b *pgx.Batch) {
	b.Queue("BEGIN")
	// The pool may commit bookkeeping asynchronously; a load never, and
	// never more weakly than the server's sessions would.
	if l.h.RemoteApply {
		b.Queue("SET LOCAL synchronous_commit = remote_apply")
	} else {
		b.Queue("SET LOCAL synchronous_commit = on")
	}
	// A load is one big statement planned once: JIT compilation costs
	// more than it saves there (half of a 100k-row merge, measured).
	b.Queue("SET LOCAL jit = off")
	if l.ds.Timeout > 0 {
		b.Queue("SELECT set_config('statement_timeout', $1, true)", fmt.Sprint(l.ds.Timeout.Milliseconds()))
	}
}

// queueMember queues, inside the open transaction, the partition lock
// (tried), the ledger check under it and the strategy's catalog reads.
func (l *loading) queueMember(b *pgx.Batch) {
	b.Queue(audit.TryLockSQL, audit.PartitionLockKey(l.a.Pipeline, l.a.Dataset, l.a.Partition)).
		QueryRow(func(r pgx.Row) error { return r.Scan(&l.locked) })
	l.queueCheck(b)
	if l.stage != nil {
		l.stage.queueCreate(b)
	}
	l.queueDescribe(b, nil)
	b.Queue(customPlans)
}

// The statements that read and write the target and the source (the
// strategy's, the checks') are planned at each execution, for the
// partition they are given and the tables as they are then: a prepared
// statement's kept plan, made once while the target was empty, read the
// whole target for each partition's DELETE as it grew, and a partition
// ten times the others' wants another plan than theirs. idem's own
// bookkeeping keeps its prepared plans (their shapes hold at any size,
// bench/NOTES.md): planning its group statements at each execution
// would cost more than running them.
const (
	customPlans  = "SET LOCAL plan_cache_mode = force_custom_plan"
	defaultPlans = "SET LOCAL plan_cache_mode TO DEFAULT"
)

// queueDescribe queues the strategy's catalog reads; a member of a group
// after the first shares first's fingerprint of the target.
func (l *loading) queueDescribe(b *pgx.Batch, first *strategies.Plan) {
	if gl, ok := l.ds.Strategy.(strategies.GroupLoader); ok && first != nil {
		l.plan = gl.DescribeShared(b, l.params(), first)
		return
	}
	l.plan = l.ds.Strategy.Describe(b, l.params())
}

func (l *loading) queueCheck(b *pgx.Batch) {
	if l.a.Force {
		audit.QueueLookupMessage(b, l.a.RunKey, l.a.StreamSeq, &l.alreadyLoaded)
	} else {
		audit.QueueLookupRun(b, l.a.RunKey, &l.alreadyLoaded)
		audit.QueueRetracted(b, l.a.RunKey, &l.retracted)
		l.stage.queueSuperseded(b, l.a.RunKey, &l.superseded)
	}
}

// load runs round trip 2 in the transaction begin opened, then finish.
func (l *loading) load(ctx context.Context, id int64) (Outcome, error) {
	out := Outcome{Status: audit.StatusSuccess, AuditID: id}
	if l.alreadyLoaded || l.retracted != "" || l.superseded != "" {
		out.Status = audit.StatusSkipped
		err := l.h.finish(ctx, l.c, []ending{{l: l, id: id}})
		if err == nil && l.h.Results && l.h.Enqueued != nil {
			l.h.Enqueued()
		}
		return out, err
	}
	tx := &connTx{c: l.c}
	// Where the strategy counts the rows its load produced and replaced,
	// the row-count checks read those counts instead of statements.
	produced, replaced := l.ds.Strategy.Counts()
	var baseline int64
	if l.ds.Checks.NeedsBaseline() && !replaced {
		n, err := l.ds.Checks.Baseline(ctx, tx, l.params())
		if err != nil {
			return out, err
		}
		baseline = n
	}
	if err := l.archive(ctx, tx); err != nil {
		return out, err
	}
	sctx, end := l.span(ctx, "load")
	res, err := l.execute(sctx, tx)
	end(err)
	if err != nil {
		return out, err
	}
	out.Rows = res
	if replaced && res.Deleted >= 0 {
		baseline = res.Deleted
	}
	if l.ds.Checks != nil {
		// After the strategy, before the audit success, the ledger and the
		// outbox: a refused partition rolls back with all of them.
		var outs []checks.Outcome
		if produced && l.ds.Checks.CountsOnly() {
			outs = l.ds.Checks.FromCounts(res.Inserted, baseline)
		} else {
			cctx, end := l.span(ctx, "checks")
			outs, err = l.ds.Checks.Run(cctx, tx, l.params(), baseline)
			end(err)
			if err != nil {
				l.checked = outs
				return out, err
			}
		}
		l.checked = outs
		if err := checks.Refused(outs); err != nil {
			return out, err
		}
	}
	err = l.h.finish(ctx, l.c, []ending{{l: l, id: id, res: &res}})
	if errors.Is(err, audit.ErrAlreadySucceeded) {
		// Unreachable while the lock and the check above hold; if it happens
		// the transaction rolls back and the run is done: record the duplicate.
		l.close(ctx)
		l.recorded = false // rolled back with it
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := audit.Skip(fctx, l.h.DB, id); err != nil {
			return Outcome{Status: audit.StatusSkipped, AuditID: id}, err
		}
		return Outcome{Status: audit.StatusSkipped, AuditID: id}, l.skipped(fctx, id, false)
	}
	if err == nil && (len(l.ds.Then) > 0 || l.h.Results) && l.h.Enqueued != nil {
		l.h.Enqueued()
	}
	return out, err
}

// execute runs the strategy. A staged source's rows are copied into the
// stage the strategy reads, or, where the strategy takes them so
// (strategies.CopyLoader: delete_insert) and the files bring no column the
// target lacks, straight into the target, which writes them once instead
// of twice.
func (l *loading) execute(ctx context.Context, tx pgx.Tx) (strategies.Result, error) {
	if l.stage == nil {
		return l.ds.Strategy.Execute(ctx, tx, l.plan, l.params())
	}
	if cl, ok := l.ds.Strategy.(strategies.CopyLoader); ok && l.stage.direct() {
		return cl.ExecuteCopy(ctx, tx, l.plan, l.params(), func(ctx context.Context, table pgx.Identifier, where string) (int64, error) {
			return l.stage.copyInto(ctx, tx, l.key, l.a.RunID, table, where)
		})
	}
	if _, err := l.stage.copyInto(ctx, tx, l.key, l.a.RunID, pgx.Identifier{"pg_temp", StageTable}, ""); err != nil {
		return strategies.Result{}, err
	}
	return l.ds.Strategy.Execute(ctx, tx, l.plan, l.params())
}

// result is the event's result for attempt id, as JSON.
func (l *loading) result(status string, id int64, rows *results.Rows) []byte {
	r := results.Result{
		Pipeline: l.a.Pipeline, Dataset: l.a.Dataset, Partition: l.a.Partition, RunID: l.a.RunID,
		Status: status, Rows: rows, Attempts: l.a.Attempt, Stream: l.m.Stream, StreamSeq: l.m.StreamSeq,
		MsgID: l.m.MsgID, AuditID: id,
	}
	if !l.m.Published.IsZero() {
		r.PublishedAt = &l.m.Published
	}
	r.Finish(time.Now())
	return r.AppendJSON(make([]byte, 0, 512))
}

// queueResult queues the result of attempt id in the load's transaction,
// when the handler publishes results.
func (l *loading) queueResult(b *pgx.Batch, status string, id int64, rows *results.Rows) {
	if l.h.Results && l.m.StreamSeq > 0 {
		audit.QueueEnqueueResult(b, l.a.RunKey, id, l.result(status, id, rows), status == results.StatusSkipped)
	}
}

// skipResult is the body of the result this attempt's audit statement
// writes should it decide a skip (nil when the handler publishes none).
func (l *loading) skipResult() []byte {
	if !l.h.Results || l.m.StreamSeq == 0 {
		return nil
	}
	return l.result(results.StatusSkipped, 0, nil)
}

// skipped writes the result of a skip that already committed, in a
// statement of its own, unless the skip's statement wrote it (written).
// When it cannot, the error comes back so that the message is
// redelivered: skipped again, with its result, rather than acknowledged
// without one (a waiting publisher would never hear of it).
func (l *loading) skipped(ctx context.Context, id int64, written bool) error {
	if !l.h.Results || l.m.StreamSeq == 0 {
		return nil
	}
	if written {
		if l.h.Enqueued != nil {
			l.h.Enqueued()
		}
		return nil
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// On the connection the attempt holds, when it has one: no second
	// connection for a skip.
	var db audit.Querier = l.h.DB
	if l.c != nil && !l.c.PgConn().IsClosed() && l.c.PgConn().TxStatus() == 'I' {
		db = l.c
	}
	if err := audit.EnqueueResult(fctx, db, l.a.RunKey, id, l.result(results.StatusSkipped, id, nil), true); err != nil {
		return fmt.Errorf("the skip is recorded, its result is not (the message is delivered again): %w", err)
	}
	if l.h.Enqueued != nil {
		l.h.Enqueued()
	}
	return nil
}

// recordSchemaChanges writes the schema changes a load refused by its
// on_schema_change met, after its transaction rolled back.
func (l *loading) recordSchemaChanges(ctx context.Context, id int64, err error) []strategies.SchemaChange {
	var sc *strategies.SchemaChangeError
	if !errors.As(err, &sc) || len(sc.Changes) == 0 {
		return nil
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := audit.RecordSchemaChanges(fctx, l.h.DB, id, l.a.RunKey, sc.Changes); err != nil {
		l.log.Error().Err(err).Msg("could not record the schema changes")
	}
	return sc.Changes
}

// recordChecks writes the outcomes of this attempt's checks, after its
// transaction ended; a check that could not run is recorded as failed.
func (l *loading) recordChecks(ctx context.Context, id int64, err error) {
	outs := l.checked
	var refused *checks.Error
	if errors.As(err, &refused) && refused.Broken != "" {
		outs = append(outs, checks.Outcome{Name: refused.Broken, Kind: "error", Severity: "error", Status: checks.StatusFail,
			Threshold: "runs without error", Note: refused.Err.Error()})
		l.checked = outs
	}
	if len(outs) == 0 || l.recorded && err == nil {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := audit.RecordChecks(fctx, l.h.DB, id, l.a.RunKey, outs); err != nil {
		l.log.Error().Err(err).Msg("could not record the checks' outcomes")
	}
}

// close rolls back whatever transaction is still open on the connection,
// on a context that survives cancellation. A connection left in a
// transaction (the rollback failed) is closed by the pool on release.
func (l *loading) close(ctx context.Context) {
	if l.c == nil || l.c.PgConn().IsClosed() || l.c.PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := l.c.Exec(rctx, "ROLLBACK"); err != nil {
		l.log.Debug().Err(err).Msg("rollback failed: the connection is dropped")
	}
}
