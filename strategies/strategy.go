package strategies

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
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
	// RunIDColumn and LoadSeqColumn are append_dedupe's bookkeeping columns.
	RunIDColumn, LoadSeqColumn string
	// AllowEmpty accepts an empty source partition; otherwise it is a fatal error.
	AllowEmpty bool
}

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
	// Route names the SQL path taken, for logs and benchmarks.
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
}

// Load describes and runs a load of p inside tx, for callers with nothing to
// send in the same round trip as the catalog reads.
func Load(ctx context.Context, tx pgx.Tx, s Strategy, p Params) (Result, error) {
	b := &pgx.Batch{}
	pl := s.Describe(b, p)
	if err := send(ctx, tx, b); err != nil {
		return Result{}, err
	}
	return s.Execute(ctx, tx, pl, p)
}

// described runs Describe alone, for Check.
func described(ctx context.Context, tx pgx.Tx, s Strategy, p Params) (*Plan, error) {
	b := &pgx.Batch{}
	pl := s.Describe(b, p)
	return pl, send(ctx, tx, b)
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
			spec.RunIDColumn = "run_id"
		}
		if spec.LoadSeqColumn == "" {
			spec.LoadSeqColumn = "load_seq"
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

// Error is a load failure that will repeat on every attempt (a schema that does
// not fit, an empty source): the consumer dead-letters it without retrying.
type Error struct {
	Reason string // stable word: schema_mismatch, empty_source, undefined_object
	Msg    string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Msg }

// Fatal marks the error as not worth retrying (see handlers.IsFatal).
func (e *Error) Fatal() bool { return true }

func schemaErr(format string, args ...any) error {
	return &Error{Reason: "schema_mismatch", Msg: fmt.Sprintf(format, args...)}
}

// ErrEmptySource is returned when the source has no rows for the partition and
// the dataset does not allow that: an empty load must never silently wipe a
// partition.
var ErrEmptySource = &Error{Reason: "empty_source", Msg: "the source returned no rows for this partition; if that is expected, set allow_empty: true on the dataset"}

func quoteAll(prefix string, cols []string) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = prefix + pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(out, ", ")
}

func q(col string) string { return pgx.Identifier{col}.Sanitize() }

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
