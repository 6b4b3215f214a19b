package handlers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/internal/clock"
	"github.com/idem-data/idem/internal/lineage"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
	"github.com/idem-data/idem/strategies"
)

// DB is the database handle the handler needs; *pgxpool.Pool satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	// Acquire holds one connection for a load, whose round trips are
	// pipelined batches of one transaction.
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// Dataset is one configured dataset, ready to load.
type Dataset struct {
	Name          string
	PartitionType schemas.PartitionType // "" means date
	Strategy      strategies.Strategy
	// Timeout bounds each statement of the load (SET LOCAL statement_timeout); 0: none.
	Timeout time.Duration
	// Then names the downstream datasets a success of this one triggers, for
	// the same partition and run_id, through the outbox.
	Then []string
	// Upstreams names the datasets whose Then lists this one. With more than
	// one it is a join: a success of one upstream triggers it only when
	// every other upstream's latest attempt for the partition succeeded.
	Upstreams []string
	// Checks run on the rows each load produced, before its commit; nil
	// when the dataset has none.
	Checks *checks.Set
	// Target is the target table, schema.table; Inputs are the tables its
	// source reads, as lineage names them (empty when not known).
	Target string
	Inputs []lineage.InputDataset
	// Stage, when set, is a source outside the warehouse (files, another
	// PostgreSQL): its rows are copied into the load's transaction and the
	// strategy reads them from there (StageSQL).
	Stage *Staged
	// Ready, when set, is a SELECT source's ready_when: asked before each
	// attempt, it holds the event while the partition is not ready.
	Ready *ReadyWhen
	// Fingerprint, when set (recheck:), fingerprints the partition's
	// source before each attempt; the success stores it.
	Fingerprint *Fingerprint
	// Archive, when set, says where the partition's rows are (its
	// partition column) and where its versions are kept: with Keep > 0,
	// each load archives the rows it replaces; restore and retract use it.
	Archive *audit.Archive
	// DefinitionHash names the definition the dataset's loads run
	// (config.Dataset.DefinitionHash), recorded in each attempt's row.
	DefinitionHash string

	prepareMu sync.Mutex
	prepared  atomic.Bool
}

// Handler turns one decoded event into one load transaction.
type Handler struct {
	DB       DB
	Pipeline string // audit dag_id
	Datasets map[string]*Dataset
	Log      zerolog.Logger
	// Now is the clock a source's readiness is judged by (ready rules,
	// wait_up_to): the site's (clock.Site.Now) in idem serve; nil is
	// clock.Local.
	Now func() time.Time
	// Enqueued, when set, is called after a commit that queued downstream
	// events, so the relay publishes them without waiting for its next poll.
	Enqueued func()
	// Started, when set, is called once an attempt's `started` row is
	// committed, before its load runs: a process that dies from here on has
	// spent one of the message's attempts.
	Started func(dataset, runID string, attempt int)
	// RemoteApply makes every load commit with synchronous_commit =
	// remote_apply instead of on: for a server whose sessions default to it
	// (synchronous standbys that must have applied a load before it counts),
	// which the pool's asynchronous bookkeeping must not weaken.
	RemoteApply bool
	// Verified, when set, is called before every load but a re-verification:
	// it returns once the warehouse this process talks to is one whose
	// recent loads were verified, so that nothing loads on a promoted
	// standby before its lost loads are back (or with ctx's error).
	Verified func(ctx context.Context) error
	// SchemaPeer, when set, names another live replica of the fleet that
	// runs dataset with an on_schema_change other than this one's, and that
	// policy ("" when none): see leaveToFleet.
	SchemaPeer func(ctx context.Context, dataset string) (replica, policy string)
	// MaxGroup bounds how many events of one dataset a group load takes
	// (HandleGroup); 0 means DefaultMaxGroup, 1 turns grouping off.
	MaxGroup int
	// Lineage, when set, makes every attempt write its OpenLineage run
	// events to the outbox.
	Lineage *Lineage
	// Results makes every load and skip write the event's result (package
	// results) to the outbox, in the load's transaction, for the relay to
	// publish on the results stream.
	Results bool
	// Tracer makes the spans of a load's steps (the strategy's work, the
	// checks) under the span ctx holds; nil makes none.
	Tracer trace.Tracer

	// mu guards Datasets once the handler serves: Replace swaps the map, a
	// load keeps the *Dataset it started with.
	mu         sync.RWMutex
	unrecorded unrecorded
	// beforeBegin, set by tests only, runs just before an attempt's begin
	// statement is sent: what an operator does in that moment.
	beforeBegin func()
}

// dataset is the configured dataset of that name, as of now.
func (h *Handler) dataset(name string) (*Dataset, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	ds, ok := h.Datasets[name]
	return ds, ok
}

// Replace swaps the configured datasets (a reloaded config). Loads already
// running finish with the datasets they started with; the next events get
// the new ones. A dataset carried over unchanged should be passed as the
// same *Dataset, so its one-time setup is not run again.
func (h *Handler) Replace(ds map[string]*Dataset) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Datasets = ds
}

// TriggeredByAttribute is the event attribute that names the upstream run
// of a downstream event: "<dataset>:<partition>:<run_id>".
const TriggeredByAttribute = "triggered_by"

// Meta is what the delivery knows about an event.
type Meta struct {
	// StreamSeq is the stream sequence, 0 when not from JetStream. With the
	// run it names the message whose attempts the budget counts.
	StreamSeq uint64
	// MaxAttempts is the message's budget of loads that run (retries + 1);
	// 0 means no limit.
	MaxAttempts int
	// Reverify marks a load again after a warehouse failover: it runs while
	// Handler.Verified holds the other loads back.
	Reverify bool
	// Stream, MsgID and Published locate the message for its result: its
	// stream, Nats-Msg-Id and when the stream stored it.
	Stream, MsgID string
	Published     time.Time
	// Trace is the span of the delivery's processing, whose trace the
	// attempt's downstream events continue; zero: the span ctx holds.
	Trace trace.SpanContext
}

// Outcome of a handled event.
type Outcome struct {
	Status  string // audit.StatusSuccess, audit.StatusSkipped or audit.StatusCancelled
	Rows    strategies.Result
	AuditID int64
	// Checks are the outcomes of the dataset's checks, also when they
	// refused the load (the error is then a *checks.Error).
	Checks []checks.Outcome
	// SchemaChanges are the differences between the source's columns and
	// the target's the load met, and what its on_schema_change did, also
	// when it refused the load (a *strategies.SchemaChangeError).
	SchemaChanges []strategies.SchemaChange
}

// Lookup tells the decoder a dataset's partition type.
func (h *Handler) Lookup(dataset string) (schemas.PartitionType, bool) {
	ds, ok := h.dataset(dataset)
	if !ok {
		return "", false
	}
	if ds.PartitionType == "" {
		return schemas.PartitionDate, true
	}
	return ds.PartitionType, true
}

// HandleMessage decodes a raw message body and handles it. An undecodable or
// invalid body is a fatal error that reaches no database.
func (h *Handler) HandleMessage(ctx context.Context, subject string, body []byte, m Meta) (Outcome, error) {
	ev, err := schemas.Decode(subject, body, h.Lookup)
	if err != nil {
		return Outcome{}, err
	}
	return h.Handle(ctx, ev, m)
}

// Handle takes one decoded event to its load:
//
//  1. one statement checks the ledger (a run already done is recorded
//     `skipped` and acknowledged), counts the loads of this message that
//     already ran, and, within the budget, commits the `started` row, so it
//     survives a crash;
//  2. one transaction takes the partition's advisory lock, checks the ledger
//     again (a concurrent duplicate may have won the lock first), runs the
//     strategy, marks the audit row `success` and records the ledger entry.
//
// Errors come back classified: *FatalError (no retry can help),
// *UnavailableError (the warehouse cannot be used at all: the consumer's
// circuit, not this event's budget), *BudgetSpentError (the message's
// attempts are used up; nothing ran), or transient. Every error after the
// `started` row is an *AttemptError carrying the attempt's number.
func (h *Handler) Handle(ctx context.Context, ev schemas.Event, m Meta) (Outcome, error) {
	ds, a, log, err := h.attempt(ctx, ev, m)
	if err != nil {
		return Outcome{}, err
	}
	if out, done, err := h.cancelled(ctx, a, m); done || err != nil {
		return out, err
	}
	// A source is asked whether the partition is there before an attempt
	// is counted: one that is not waits.
	st, err := h.sourceReady(ctx, ds, ev, a, m)
	if err != nil {
		return Outcome{}, err
	}
	var fp *audit.SourceFingerprint
	if ds.Fingerprint != nil {
		// Taken before the load reads: a change landing in between moves
		// the next recheck's, which reloads; it is never missed.
		f, err := h.fingerprint(ctx, ds, ev.Key, st)
		if s := ds.Stage; err != nil && s != nil {
			err = s.unanswered(ctx, err, m.Published, h.now())
			h.recordWait(ctx, a, s.WaitUpTo, m.Published, err)
		}
		if err != nil {
			return Outcome{}, err
		}
		fp = &f
	}
	h.unrecorded.flush(ctx, h.DB, log)
	out, err := h.load(ctx, &loading{h: h, ds: ds, a: a, key: ev.Key, m: m, log: log, stage: st, fp: fp})
	if errors.Is(err, errCancelledMeanwhile) {
		// Its connection is back in the pool: the cancelled row takes one.
		return h.cancelledMeanwhile(ctx, a, m)
	}
	return out, err
}

// load runs l's attempt on a connection of its own.
func (h *Handler) load(ctx context.Context, l *loading) (Outcome, error) {
	c, err := h.DB.Acquire(ctx)
	if err != nil {
		return Outcome{}, classifyBeforeLoad(fmt.Errorf("audit: begin: %w", err))
	}
	l.c = c.Conn()
	defer func() { l.close(ctx); c.Release() }()
	// Round trip 1: the ledger check, the budget and the `started` row (or a
	// `skipped` row), committed at once, then the load's transaction opened
	// behind it in the same pipeline. Until the first statement has run,
	// any failure but a fatal one is the warehouse's, not the event's.
	if h.beforeBegin != nil {
		h.beforeBegin()
	}
	b, err := l.begin(ctx, l.m.MaxAttempts)
	if !l.begun {
		return Outcome{}, classifyBeforeLoad(err)
	}
	return h.run(ctx, l, b, err)
}

// attempt finds ev's dataset and builds its attempt and logger; with
// Handler.Verified, it waits for the warehouse to be verified.
func (h *Handler) attempt(ctx context.Context, ev schemas.Event, m Meta) (*Dataset, audit.Attempt, zerolog.Logger, error) {
	ds, ok := h.dataset(ev.Dataset)
	if !ok {
		return nil, audit.Attempt{}, zerolog.Logger{}, Fatal(ReasonUnknownDataset, fmt.Errorf("dataset %q is not configured", ev.Dataset))
	}
	a := h.attemptOf(ctx, ds, ev, m)
	log := h.Log.With().Str("dataset", ev.Dataset).Str("partition", a.Partition).Str("run_id", ev.RunID).
		Uint64("stream_seq", m.StreamSeq).Logger()
	if h.Verified != nil && !m.Reverify {
		if err := h.Verified(ctx); err != nil {
			return nil, audit.Attempt{}, log, classifyBeforeLoad(err)
		}
	}
	return ds, a, log, nil
}

// attemptOf is ev's attempt of dataset ds, as the audit records it.
func (h *Handler) attemptOf(ctx context.Context, ds *Dataset, ev schemas.Event, m Meta) audit.Attempt {
	a := audit.Attempt{
		RunKey:      audit.RunKey{Pipeline: h.Pipeline, Dataset: ev.Dataset, Partition: ev.Key.Key, RunID: ev.RunID},
		StreamSeq:   m.StreamSeq,
		Force:       ev.Force,
		TriggeredBy: ev.Attributes[TriggeredByAttribute],
		Published:   m.Published,
		Attributes:  ev.Attributes,
		Trace:       traceOf(ctx, m),

		DefinitionHash: ds.DefinitionHash,
	}
	if m.Reverify {
		// The audit says which loads ran again after a failover.
		a.Attributes = maps.Clone(ev.Attributes)
		if a.Attributes == nil {
			a.Attributes = map[string]string{}
		}
		a.Attributes[audit.ReverifyAttribute] = "true"
		// It restores an acknowledged load: a pause does not hold it.
		a.ThroughPause = true
	}
	if d, ok := ev.Key.LogicalDate(); ok {
		a.LogicalDate = &d
	}
	return a
}

// run takes an attempt whose audit statement ran (b) to its end: the load
// in the transaction l opened (err: what opening it said), the failure
// recorded, or the skip's result written.
func (h *Handler) run(ctx context.Context, l *loading, b audit.Begun, err error) (Outcome, error) {
	log := l.log.With().Int("attempt", b.Attempt).Logger()
	l.log = log
	switch {
	case b.Paused && b.ID == 0:
		log.Info().Msg("dataset paused: no attempt began, the message goes back for later")
		return Outcome{}, &PausedError{Dataset: l.a.Dataset}
	case b.Cancelled && b.ID == 0:
		return Outcome{}, errCancelledMeanwhile
	case b.Spent:
		err := &BudgetSpentError{Attempts: b.Prior, LastDied: b.LastDied}
		log.Warn().Err(err).Msg("retry budget spent: not loading again")
		return Outcome{}, err
	case b.Skipped:
		log.Info().Msg("run already succeeded: skipped")
		l.close(ctx)
		if err := l.skipped(ctx, b.ID, b.ResultWritten); err != nil {
			log.Warn().Err(err).Msg("skip's result not written")
			return Outcome{}, classifyBeforeLoad(err)
		}
		return Outcome{Status: audit.StatusSkipped, AuditID: b.ID}, nil
	}
	l.a.Attempt = b.Attempt
	if l.started.IsZero() {
		l.started = time.Now()
	}
	if h.Started != nil {
		h.Started(l.a.Dataset, l.a.RunID, b.Attempt)
	}
	var out Outcome
	if err == nil {
		out, err = l.load(ctx, b.ID)
	}
	if err != nil {
		return h.failed(ctx, l, b, err)
	}
	l.recordChecks(ctx, b.ID, nil)
	out.Checks = l.checked
	out.SchemaChanges = l.plan.SchemaChanges()
	switch {
	case out.Status == audit.StatusSkipped && l.retracted != "" && !l.alreadyLoaded:
		log.Info().Str("reason", l.retracted).Msg("partition retracted: skipped")
	case out.Status == audit.StatusSkipped && l.superseded != "" && !l.alreadyLoaded:
		log.Info().Str("reason", l.superseded).Msg("the files were loaded by a later event: skipped")
	case out.Status == audit.StatusSkipped:
		log.Info().Msg("a concurrent delivery of this run succeeded first: skipped")
	default:
		log.Info().Int64("rows_inserted", out.Rows.Inserted).Int64("rows_updated", out.Rows.Updated).
			Int64("rows_deleted", out.Rows.Deleted).Str("route", out.Rows.Route).Msg("loaded")
	}
	return out, nil
}

// failed records attempt b's failure err (its transaction rolled back) and
// returns it classified.
func (h *Handler) failed(ctx context.Context, l *loading, b audit.Begun, err error) (Outcome, error) {
	log := l.log
	// The connection goes back to the pool before the failure is
	// recorded on another one.
	l.close(ctx)
	changes := l.recordSchemaChanges(ctx, b.ID, err)
	err = h.leaveToFleet(ctx, l, err)
	err = Classify(err)
	l.recordChecks(ctx, b.ID, err)
	kind := audit.KindTransient
	var refused *checks.Error
	var lag interface{ NotReady() bool }
	switch {
	case l.ds.Stage != nil && !IsFatal(err) && (errors.As(err, &lag) && lag.NotReady() || files.StoreUnavailable(err) || sourceUnavailable(err)):
		// The source's standby fell behind between the gate asked before
		// the attempt and the copy's own, the source database refused the
		// copy's connection or shut down (a failover), or the object store
		// failed to serve a file (5xx, SlowDown, a cut connection): a
		// wait, as the gate's or a listing's would have been, recorded
		// unavailable so that it spends no attempt; past wait_up_to, fatal.
		err = l.ds.Stage.wait(err, l.m.Published, h.now())
		kind = audit.KindUnavailable
		if IsFatal(err) {
			kind = audit.KindFatal
		}
	case errors.As(err, &refused):
		kind = audit.KindCheck
	case IsFatal(err):
		kind = audit.KindFatal
	case IsUnavailable(err):
		kind = audit.KindUnavailable
	case ctx.Err() != nil:
		// The consumer cancels a handler only when a stop's grace runs
		// out: idem stopped the load, the load did not fail.
		kind = audit.KindInterrupted
	}
	// The audit row must say what happened even when ctx is being
	// cancelled. When the warehouse does not answer, the failure is kept
	// and written before the next attempt, so the row left `started` is
	// not counted as a crash. A transient failure kept so (the load lost
	// its connection and the warehouse cannot even record that) holds its
	// message for the warehouse: whether the message is to blame is known
	// only once it answers (did it restart under the load?), and the next
	// attempt's begin counts the failure unless it did.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	if ferr := audit.Fail(fctx, h.DB, b.ID, err, kind); ferr != nil {
		if IsFatal(Classify(ferr)) { // the statement, not the warehouse
			log.Error().Err(ferr).Msg("could not record the failure in the audit table")
		} else {
			h.unrecorded.add(failure{id: b.ID, err: err, kind: kind})
			log.Debug().Err(ferr).Msg("failure not recorded yet: the warehouse did not answer; recorded before the next attempt")
			if kind == audit.KindTransient {
				err = &UnavailableError{Err: err}
			}
		}
	}
	if l.started.IsZero() {
		l.started = time.Now()
	}
	l.enqueueFail(fctx, b.ID, err)
	cancel()
	log.Warn().Err(err).Str("error_kind", kind).Msg("load failed")
	return Outcome{AuditID: b.ID, Checks: l.checked, SchemaChanges: changes}, &AttemptError{N: b.Attempt, Err: err}
}

// SchemaPeerError is a load this replica's on_schema_change refused while
// another live replica of the fleet runs the dataset with a policy that
// would take the change: during a rolling config change, the message is
// left to that replica (redelivered) rather than dead-lettered here.
type SchemaPeerError struct {
	Replica, Policy string
	Err             error
}

func (e *SchemaPeerError) Error() string {
	return fmt.Sprintf("replica %s runs this dataset with on_schema_change %s; left to it (redelivered): %v", e.Replica, e.Policy, e.Err)
}

func (e *SchemaPeerError) Unwrap() error { return e.Err }

// Fatal reports false: another replica may load it.
func (e *SchemaPeerError) Fatal() bool { return false }

// leaveToFleet turns a load refused by this replica's on_schema_change into
// a transient error when another live replica runs the dataset with a
// policy that would take the change (SchemaPeer).
func (h *Handler) leaveToFleet(ctx context.Context, l *loading, err error) error {
	var sc *strategies.SchemaChangeError
	if h.SchemaPeer == nil || !errors.As(err, &sc) {
		return err
	}
	replica, policy := h.SchemaPeer(ctx, l.a.Dataset)
	if replica == "" || !takes(policy, sc.Changes) {
		return err
	}
	return &SchemaPeerError{Replica: replica, Policy: policy, Err: err}
}

// takes reports whether policy would load without refusing changes.
func takes(policy string, cs []strategies.SchemaChange) bool {
	for _, c := range cs {
		if c.Action != strategies.ActionRefused {
			continue
		}
		switch {
		case c.Change == strategies.ChangeNew && policy != strategies.OnSchemaChangeFail:
		default:
			return false
		}
	}
	return true
}

// pendingJoin is a join downstream of attempt id of a, whose readiness
// the last round trip asks (finish).
type pendingJoin struct {
	down  string
	ready *bool
	a     audit.Attempt
	id    int64
}

// queueDownstream queues, inside the load's transaction, one event per
// downstream dataset into the outbox: the downstream runs if and only if
// this load committed. A downstream with other upstreams (a join) is not
// queued here: its lock and readiness check are, and it is returned, to be
// queued once the answer is known.
func (h *Handler) queueDownstream(b *pgx.Batch, ds *Dataset, a audit.Attempt, auditID int64) ([]pendingJoin, error) {
	var joins []pendingJoin
	for _, down := range ds.Then {
		var others []string
		if d, ok := h.dataset(down); ok {
			for _, up := range d.Upstreams {
				if up != ds.Name {
					others = append(others, up)
				}
			}
		}
		if len(others) == 0 {
			if err := h.enqueue(b, down, a, auditID); err != nil {
				return nil, err
			}
			continue
		}
		j := pendingJoin{down: down, ready: new(bool), a: a, id: auditID}
		audit.QueueJoinReady(b, a.Pipeline, down, a.Partition, others, j.ready)
		joins = append(joins, j)
	}
	return joins, nil
}

// enqueue queues the event of downstream down that upstream attempt auditID
// triggers. It inherits the partition and the run_id, so one pipeline run
// keeps one run_id end to end, and it is forced: every upstream commit
// brings its downstream up to date, even for a run_id the downstream
// already loaded (a join's second upstream, an upstream rerun on new
// data). Its message id names the upstream attempt, so a relay that
// publishes it twice is deduplicated and its redelivery is skipped.
func (h *Handler) enqueue(b *pgx.Batch, down string, a audit.Attempt, auditID int64) error {
	ev := schemas.PartitionReady{
		Dataset: down, Partition: a.Partition, RunID: a.RunID, Force: true,
		Attributes: map[string]string{TriggeredByAttribute: a.Dataset + ":" + a.Partition + ":" + a.RunID},
	}
	if _, err := ev.Marshal(); err != nil {
		return Fatal(ReasonInvalidEvent, fmt.Errorf("downstream event for %s: %w", down, err))
	}
	return audit.QueueEnqueueEvent(b, audit.OutboxEvent{Event: ev, AuditID: auditID, Trace: a.Trace})
}

// Prepare runs every dataset's one-time setup (append_dedupe's view) now, so
// readers find the views before the first event. It returns the datasets that
// failed, by name: a broken dataset must not stop the others, and its events
// will fail with the same reason.
func (h *Handler) Prepare(ctx context.Context) map[string]error {
	failed := map[string]error{}
	h.mu.RLock()
	all := maps.Clone(h.Datasets)
	h.mu.RUnlock()
	for name, ds := range all {
		if err := h.prepare(ctx, ds); err != nil {
			failed[name] = Classify(err)
		}
	}
	return failed
}

// PrepareDataset runs ds's one-time setup now (a dataset added by a config
// reload, checked before it serves); its error is classified.
func (h *Handler) PrepareDataset(ctx context.Context, ds *Dataset) error {
	return Classify(h.prepare(ctx, ds))
}

// prepare runs the strategy's one-time setup (append_dedupe's view) in its own
// transaction the first time a dataset is loaded by this process.
func (h *Handler) prepare(ctx context.Context, ds *Dataset) error { return prepareOn(ctx, h.DB, ds) }

// prepareOn runs ds's setup on db (the pool, or the connection a load holds).
func prepareOn(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, ds *Dataset) error {
	ds.prepareMu.Lock()
	defer ds.prepareMu.Unlock()
	if ds.prepared.Load() {
		return nil
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Two processes starting together would race on CREATE OR REPLACE VIEW.
		if _, err := tx.Exec(ctx, audit.LockSQL, "prepare\x1f"+ds.Name); err != nil {
			return err
		}
		if err := ds.prepareStage(ctx, tx); err != nil {
			return err
		}
		return ds.Strategy.Prepare(ctx, tx)
	})
	if err == nil {
		ds.prepared.Store(true)
	}
	return err
}

// Check plans a dataset's load against the database without running it (for
// `idem validate`): the transaction is always rolled back.
func Check(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, ds *Dataset, partition string) error {
	_, err := Predict(ctx, db, ds, partition)
	return err
}

// Predict is Check that also returns the differences between the source's
// columns and the target's that a load would meet now, and what the
// dataset's on_schema_change would do with each (strategies.Predict): an
// addition or a widening it would make is reported as made, though nothing
// is altered. When the policy refuses one, the error is the
// *strategies.SchemaChangeError and the changes are still returned.
func Predict(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, ds *Dataset, partition string) ([]strategies.SchemaChange, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	p := strategies.Params{Partition: partition, RunID: "idem-validate"}
	if err := ds.prepareStage(ctx, tx); err != nil {
		return nil, err
	}
	changes, err := strategies.Predict(ctx, tx, ds.Strategy, p)
	if err != nil {
		return changes, err
	}
	if err := ds.Strategy.Check(ctx, tx, p); err != nil {
		return changes, err
	}
	if err := ds.Checks.Explain(ctx, tx, p); err != nil {
		return changes, Fatal(ReasonSchemaMismatch, err)
	}
	return changes, nil
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return clock.Local()
}
