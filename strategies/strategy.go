package strategies

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/schemas"
)

// Table is a schema-qualified relation name, quoted only through pgx.Identifier.
type Table struct {
	Schema, Name string
}

func (t Table) ident() string  { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }
func (t Table) String() string { return t.Schema + "." + t.Name }

// Spec is what a strategy needs to know about one dataset. The handler builds it
// from the configuration; strategies never read configuration themselves.
type Spec struct {
	Dataset string
	Target  Table
	// Source is a single SELECT (or WITH ... SELECT) using @partition and @run_id.
	Source string
	// PartitionColumn is the target column holding the partition key
	// (delete_insert; optional for append_dedupe, where it narrows the view).
	PartitionColumn string
	// Key is the natural key (merge, append_dedupe).
	Key []string
	// VersionColumn, when set, lets merge update a row only with an equal or
	// newer version.
	VersionColumn string
	// View is the dedupe view append_dedupe maintains.
	View Table
	// RunIDColumn and LoadSeqColumn are append_dedupe's bookkeeping columns
	// (default DefaultRunIDColumn and DefaultLoadSeqColumn).
	RunIDColumn, LoadSeqColumn string
	// AllowEmpty accepts an empty source partition; otherwise it is a fatal error.
	AllowEmpty bool
	// TruncatePartition lets delete_insert TRUNCATE the child of a natively
	// partitioned target that holds exactly the partition, instead of
	// deleting its rows: faster and without dead tuples, but not MVCC-safe
	// (a reader whose snapshot predates the load sees the child empty) and
	// it takes ACCESS EXCLUSIVE on the child, waiting at most LockTimeout.
	TruncatePartition bool
	// OnSchemaChange is what a load does when the source's columns differ
	// from the target's: OnSchemaChangeFail (the default, ""), Ignore,
	// Append or Sync.
	OnSchemaChange string
}

// LockTimeout bounds how long a statement that every reader would queue
// behind (TRUNCATE of a child, the dedupe view's DDL) waits for its lock, or
// how long the dedupe index waits behind writers. Past it the statement fails
// with SQLSTATE 55P03, which is transient: the load or the setup is retried
// later instead of stalling readers. A shorter lock_timeout of the session is
// kept.
const LockTimeout = 2 * time.Second

// Params are the values of one load: bound as parameters, never spliced into SQL.
type Params struct {
	Partition string // canonical partition key, e.g. 2026-11-28
	RunID     string
}

func (p Params) args() pgx.NamedArgs {
	return pgx.NamedArgs{
		"partition":           p.Partition,
		"run_id":              p.RunID,
		"idem_partition":      p.Partition,
		"idem_partition_text": p.Partition,
	}
}

// Result counts what a load did. Deleted is -1 when the route does not count
// it (TRUNCATE of a partition child).
type Result struct {
	Inserted, Updated, Deleted int64
	// Route names the SQL path taken, for logs and benchmarks: group (a
	// delete_insert load made with the rest of its group in one DELETE
	// and one INSERT for them all), delete,
	// delete_child or truncate_child (delete_insert; copy_ before it when
	// the rows were copied straight into the target), merge, on_conflict or
	// on_conflict_deduped (merge), append (append_dedupe).
	Route string
}

// Strategy loads one partition idempotently inside a transaction the caller
// owns: running Load once or five times for the same source leaves the same
// target contents.
type Strategy interface {
	// Name is the config name: delete_insert, merge or append_dedupe.
	Name() string
	// Prepare creates what the strategy maintains besides the target (the
	// dedupe view); run once per process, in its own transaction.
	Prepare(ctx context.Context, tx pgx.Tx) error
	// Describe queues on b the catalog reads a load of p needs, so the caller
	// can send them in the same round trip as its own statements; the Plan
	// is ready once b's results are read.
	Describe(b *pgx.Batch, p Params) *Plan
	// Execute runs the load of p that pl describes, inside tx.
	Execute(ctx context.Context, tx pgx.Tx, pl *Plan, p Params) (Result, error)
	// Check plans every statement of a load with EXPLAIN (nothing runs) to find
	// missing tables or columns and type mismatches before the first event.
	// The caller rolls tx back.
	Check(ctx context.Context, tx pgx.Tx, p Params) error
	// ProducedRows is a FROM clause (alias t) over the rows a load of the
	// transaction produced, for the dataset's checks; ReplacedRows over the
	// rows it replaces, read before it runs ("" when it cannot say).
	ProducedRows() string
	ReplacedRows() string
	// Counts says which of those scopes a load's Result counts exactly:
	// produced, the rows ProducedRows selects after the load
	// (Result.Inserted); replaced, the rows ReplacedRows selected before it
	// (Result.Deleted, unless -1). A row-count check reads them instead of
	// running a statement of its own.
	Counts() (produced, replaced bool)
}

// GroupLoader is a strategy whose loads of several partitions can share one
// transaction and one round trip (delete_insert).
type GroupLoader interface {
	Strategy
	// Groupable says whether this dataset's loads may be grouped.
	Groupable() bool
	// DescribeShared is Describe for a load after first in the same group:
	// one fingerprint of the target for the group.
	DescribeShared(b *pgx.Batch, p Params, first *Plan) *Plan
	// QueueLoads queues on b the loads of a group's partitions ps, pls[i]
	// describing ps[i]'s, in as few statements as the strategy can;
	// finish maps the batch's error (nil when it went through) to the
	// group's.
	QueueLoads(ctx context.Context, tx pgx.Tx, pls []*Plan, ps []Params, b *pgx.Batch) (res []*Result, finish func(error) error, err error)
}

// CopyLoader is a strategy that can take a partition's rows straight from
// a COPY into the target, instead of an INSERT … SELECT from a source
// (delete_insert, for sources outside the warehouse).
type CopyLoader interface {
	Strategy
	// ExecuteCopy is Execute with copyIn in place of the INSERT: it
	// deletes (or truncates) the partition, then copyIn copies the rows
	// into the table the INSERT would write, checking each against where
	// (a COPY … WHERE condition; "" when the table's own constraint
	// does), and returns the rows it wrote.
	ExecuteCopy(ctx context.Context, tx pgx.Tx, pl *Plan, p Params, copyIn CopyIn) (Result, error)
}

// CopyIn copies a partition's rows into table, each row meeting where.
type CopyIn func(ctx context.Context, table pgx.Identifier, where string) (int64, error)

// Load describes and runs a load of p inside tx, for callers with nothing to
// send in the same round trip as the catalog reads.
func Load(ctx context.Context, tx pgx.Tx, s Strategy, p Params) (Result, error) {
	res, _, err := LoadChanges(ctx, tx, s, p)
	return res, err
}

// LoadChanges is Load, also returning the schema changes the load met and
// what its on_schema_change did with them (those refused, when it was).
func LoadChanges(ctx context.Context, tx pgx.Tx, s Strategy, p Params) (Result, []SchemaChange, error) {
	b := &pgx.Batch{}
	pl := s.Describe(b, p)
	if err := send(ctx, tx, b); err != nil {
		return Result{}, nil, err
	}
	res, err := s.Execute(ctx, tx, pl, p)
	var sc *SchemaChangeError
	if errors.As(err, &sc) {
		return res, sc.Changes, err
	}
	return res, pl.SchemaChanges(), err
}

// described runs Describe alone, for Check.
func described(ctx context.Context, tx pgx.Tx, s Strategy, p Params) (*Plan, error) {
	b := &pgx.Batch{}
	pl := s.Describe(b, p)
	pl.dry = true
	if err := send(ctx, tx, b); err != nil {
		return pl, err
	}
	return pl, pl.resolve(ctx, tx)
}

// Predict says what a load of p would meet now: the differences between
// the source's columns and the target's, and what the dataset's
// on_schema_change would do with each (an addition or a widening it would
// make is reported as made). Nothing is altered; the caller rolls tx back.
func Predict(ctx context.Context, tx pgx.Tx, s Strategy, p Params) ([]SchemaChange, error) {
	pl, err := described(ctx, tx, s, p)
	var sc *SchemaChangeError
	if errors.As(err, &sc) {
		return sc.Changes, err
	}
	return pl.SchemaChanges(), err
}

// New returns the strategy called name for spec.
func New(name string, spec Spec) (Strategy, error) {
	spec.Source = normaliseSource(spec.Source)
	switch name {
	case "delete_insert":
		if spec.PartitionColumn == "" {
			return nil, errors.New("delete_insert needs a partition column")
		}
		return &DeleteInsert{spec: spec}, nil
	case "merge":
		if len(spec.Key) == 0 {
			return nil, errors.New("merge needs a key")
		}
		return &Merge{spec: spec}, nil
	case "append_dedupe":
		if len(spec.Key) == 0 || spec.View.Name == "" {
			return nil, errors.New("append_dedupe needs a key and a view")
		}
		if spec.RunIDColumn == "" {
			spec.RunIDColumn = DefaultRunIDColumn
		}
		if spec.LoadSeqColumn == "" {
			spec.LoadSeqColumn = DefaultLoadSeqColumn
		}
		return &AppendDedupe{spec: spec}, nil
	}
	return nil, fmt.Errorf("unknown strategy %q (want delete_insert, merge or append_dedupe)", name)
}

func normaliseSource(s string) string {
	s = strings.TrimSpace(s)
	for strings.HasSuffix(s, ";") {
		s = strings.TrimSpace(strings.TrimSuffix(s, ";"))
	}
	return s
}

// append_dedupe's bookkeeping columns in the target, when the spec names
// none.
const (
	DefaultRunIDColumn   = "run_id"
	DefaultLoadSeqColumn = "load_seq"
)

// Error is a load failure that will repeat on every attempt (a schema that does
// not fit, an empty source): the consumer dead-letters it without retrying.
type Error struct {
	Reason string // a schemas.Reason* word: schema_mismatch, empty_source, undefined_object
	Msg    string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Msg }

// Fatal marks the error as not worth retrying (see handlers.IsFatal).
func (e *Error) Fatal() bool { return true }

// FatalReason is the reason word, for the dead letter's Idem-Error-Reason.
func (e *Error) FatalReason() string { return e.Reason }

func schemaErr(format string, args ...any) error {
	return &Error{Reason: schemas.ReasonSchemaMismatch, Msg: fmt.Sprintf(format, args...)}
}

// ErrEmptySource is returned when the source has no rows for the partition and
// the dataset does not allow that: an empty load must never silently wipe a
// partition.
var ErrEmptySource = &Error{Reason: schemas.ReasonEmptySource, Msg: "the source returned no rows for this partition; if that is expected, set allow_empty: true on the dataset"}

func quoteAll(prefix string, cols []string) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = prefix + pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(out, ", ")
}

func q(col string) string { return pgx.Identifier{col}.Sanitize() }

// queueLockTimeout makes the statements queued after it on b wait at most
// LockTimeout for a lock (or the session's lock_timeout, when shorter), and
// restoreLockTimeout puts the transaction's own setting back. Both are
// transaction-local, sent in the caller's round trip.
func queueLockTimeout(b *pgx.Batch) {
	b.Queue("SELECT set_config('idem.lock_timeout_outside', current_setting('lock_timeout'), true)")
	b.Queue(`SELECT set_config('lock_timeout',
	                CASE WHEN s > interval '0' AND s < $1::text::interval THEN current_setting('lock_timeout') ELSE $1::text END, true)
	           FROM (SELECT current_setting('lock_timeout')::interval AS s) AS cur`,
		fmt.Sprintf("%dms", LockTimeout.Milliseconds()))
}

func restoreLockTimeout(b *pgx.Batch) {
	b.Queue("SELECT set_config('lock_timeout', current_setting('idem.lock_timeout_outside'), true)")
}

// isLockTimeout reports a statement that gave up waiting for its lock.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable
}

func explain(ctx context.Context, tx pgx.Tx, p Params, stmts ...string) error {
	for _, s := range stmts {
		rows, err := tx.Query(ctx, "EXPLAIN "+s, p.args())
		if err != nil {
			return err
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// queuedFinish is the finish of a group's queued loads (dp describes the
// target and source they share): the batch's error as the loads' (a stale
// description of the source), or an empty partition, as Execute would say.
func queuedFinish(dp *Plan, res []*Result, allowEmpty bool) func(error) error {
	return func(err error) error {
		if err != nil {
			return dp.stale(err)
		}
		for _, r := range res {
			if r.Inserted == 0 && !allowEmpty {
				return ErrEmptySource
			}
		}
		return nil
	}
}
