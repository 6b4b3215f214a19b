// Package checks runs a dataset's checks (checks: in the config) on the
// rows a load produced, inside the load's transaction, before it commits:
// a partition that fails a check of severity error is never seen by a
// reader. It builds the SQL (identifiers quoted, values bound), evaluates
// thresholds and returns each check's outcome; it never ends the
// transaction (its only rollback is to its own savepoint) and records
// nothing: the handler owns the transaction and the audit.
//
// The NULL rules, as dbt's tests have them:
//   - unique: rows whose key has a NULL are ignored; failing = duplicated key values;
//   - not_null: failing = rows with a NULL in any of the columns;
//   - accepted_values, accepted_range, relationships: NULL passes;
//   - expression: failing = rows where it is false (NULL is not false);
//   - sql: failing = the rows it returns;
//   - row_count, row_count_change: count rows, NULLs included.
package checks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// Outcome statuses.
const (
	StatusPass    = "pass"
	StatusFail    = "fail"    // a severity error check failed: the load rolls back
	StatusWarn    = "warn"    // a severity warn check failed: the load commits
	StatusSkipped = "skipped" // row_count_change under its baseline
)

// Outcome is one check's result for one load: the audit's record of it
// (audit.CheckOutcome), so a load records what its checks returned as is.
type Outcome = audit.CheckOutcome

// Set is a dataset's checks, ready to run.
type Set struct {
	checks   []check
	produced string // FROM ... AS t WHERE ...
	replaced string
	baseline bool // a row_count_change needs the replaced rows counted before the load
	hashes   bool // a unique check hashes its keys (see New)
}

type check struct {
	cfg  Spec
	name string
	kind string
	// count is the expression of the failing rows in the shared statement
	// (a FILTER'ed count over the produced rows, or a scalar subquery);
	// sample selects up to 5 failing rows or keys as JSON.
	count, sample string
	// exact, for a unique check, counts the duplicated key values; its
	// count only says whether there are any (see New).
	exact string
	args  pgx.NamedArgs
}

// New builds the checks of a dataset loaded by s; nil when it has none.
func New(cs []Spec, s strategies.Strategy) *Set {
	if len(cs) == 0 {
		return nil
	}
	set := &Set{produced: s.ProducedRows(), replaced: s.ReplacedRows()}
	for i, c := range cs {
		ch := check{cfg: c, name: c.DisplayName(), kind: c.Kind(), args: pgx.NamedArgs{}}
		arg := func(suffix string, v any) string {
			n := fmt.Sprintf("idem_check_%d_%s", i, suffix)
			ch.args[n] = v
			return "@" + n
		}
		where := func(cond string) {
			ch.count = "count(*) FILTER (WHERE " + cond + ")"
			ch.sample = "SELECT coalesce(json_agg(row_to_json(x)), '[]') FROM (SELECT t.* " + set.produced + " AND (" + cond + ") LIMIT 5) x"
		}
		switch ch.kind {
		case KindUnique:
			keys, notNull := cols("t.", c.Unique), nullTest("t.", c.Unique, " IS NOT NULL", " AND ")
			scope := " " + set.produced + " AND " + notNull
			groups := scope + " GROUP BY " + keys + " HAVING count(*) > 1"
			// Grouping the rows by key, as many groups as rows (a hash
			// aggregate spilling past work_mem), was most of the checks'
			// time on a big partition. The shared statement only asks
			// whether a key repeats: the rows minus the distinct 64-bit
			// hashes of their keys (the key types' own hash functions, so
			// equal keys hash alike), a sort of bigints whatever the types
			// and collations. Zero: no key repeats. Otherwise (a repeat,
			// or two keys hashing alike) exact counts the duplicated key
			// values, as does a key type without a hash function (Run).
			ch.count = "(SELECT count(*) - count(DISTINCT hash_record_extended(ROW(" + keys + "), 0))" + scope + ")"
			ch.exact = "(SELECT count(*) FROM (SELECT 1" + groups + ") d)"
			set.hashes = true
			ch.sample = "SELECT coalesce(json_agg(row_to_json(x)), '[]') FROM (SELECT " + keys + ", count(*) AS rows" + groups + " LIMIT 5) x"
		case KindNotNull:
			where(nullTest("t.", c.NotNull, " IS NULL", " OR "))
		case KindAcceptedValues:
			col := "t." + q(c.AcceptedValues.Column)
			where(col + " IS NOT NULL AND " + col + "::text <> ALL(" + arg("values", c.AcceptedValues.Values) + "::text[])")
		case KindAcceptedRange:
			col := "t." + q(c.AcceptedRange.Column)
			var out []string
			if c.AcceptedRange.Min != nil {
				out = append(out, col+" < "+arg("min", *c.AcceptedRange.Min))
			}
			if c.AcceptedRange.Max != nil {
				out = append(out, col+" > "+arg("max", *c.AcceptedRange.Max))
			}
			where(strings.Join(out, " OR "))
		case KindRelationships:
			r := c.Relationships
			col := "t." + q(r.Column)
			where(col + " IS NOT NULL AND NOT EXISTS (SELECT 1 FROM " + strategies.Ident(r.To) + " AS r WHERE r." + q(r.Field) + " = " + col + ")")
		case KindExpression:
			where("NOT (" + c.Expression + ")")
		case KindSQL:
			ch.count = "(SELECT count(*) FROM (" + c.SQL + "\n) q)"
			ch.sample = "SELECT coalesce(json_agg(row_to_json(x)), '[]') FROM (SELECT * FROM (" + c.SQL + "\n) q LIMIT 5) x"
		case KindRowCountChange:
			set.baseline = set.replaced != ""
		}
		set.checks = append(set.checks, ch)
	}
	return set
}

func q(col string) string { return pgx.Identifier{col}.Sanitize() }

func (c check) countExpr(exact bool) string {
	if exact && c.exact != "" {
		return c.exact
	}
	return c.count
}

// noHash says err is a key type without a hash function (bit, varbit,
// money, tsvector, tsquery): its unique check must group instead.
func noHash(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42883" && strings.Contains(pe.Message, "hash function")
}

// with is p's arguments and the check's own values.
func (c check) with(p strategies.Params) pgx.NamedArgs {
	args := p.NamedArgs()
	for k, v := range c.args {
		args[k] = v
	}
	return args
}

func cols(prefix string, cs []string) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = prefix + q(c)
	}
	return strings.Join(out, ", ")
}

func nullTest(prefix string, cs []string, test, join string) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = prefix + q(c) + test
	}
	return "(" + strings.Join(out, join) + ")"
}

// NeedsBaseline says whether Baseline must run before the load.
func (s *Set) NeedsBaseline() bool { return s != nil && s.baseline }

// Baseline counts the rows the load replaces, before it runs.
func (s *Set) Baseline(ctx context.Context, tx pgx.Tx, p strategies.Params) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, "SELECT count(*) "+s.replaced, p.NamedArgs()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("checks: rows the load replaces: %w", err)
	}
	return n, nil
}

// statement is the one statement that computes every check's failing count
// over the produced rows: one scan for the column checks, a subquery each
// for unique, relationships and sql; exact counts a unique check's
// duplicated key values by grouping instead of hashing.
func (s *Set) statement(p strategies.Params, exact bool) (string, pgx.NamedArgs) {
	args := p.NamedArgs()
	parts := []string{"count(*)"}
	for _, c := range s.checks {
		if c.count != "" {
			parts = append(parts, c.countExpr(exact))
		}
		for k, v := range c.args {
			args[k] = v
		}
	}
	return "SELECT " + strings.Join(parts, ", ") + " " + s.produced, args
}

// Run runs every check on the rows the load produced, in tx, and returns
// their outcomes; baseline is what Baseline counted (unused otherwise). A
// check that cannot run (an expression dividing by zero) comes back as an
// *Error naming it. Run never ends tx.
func (s *Set) Run(ctx context.Context, tx pgx.Tx, p strategies.Params, baseline int64) ([]Outcome, error) {
	start := time.Now()
	counts := make([]int64, 1, len(s.checks)+1)
	dest := []any{&counts[0]}
	for _, c := range s.checks {
		if c.count != "" {
			counts = append(counts, 0)
		}
	}
	for i := 1; i < len(counts); i++ {
		dest = append(dest, &counts[i])
	}
	// Under a savepoint, in the same round trip: a check that cannot run
	// (a division by zero) must not abort the transaction before the
	// failure can be pinned on it. The statement only reads, so the
	// subtransaction never takes a transaction id of its own.
	send := func(exact bool) error {
		sql, args := s.statement(p, exact)
		b := &pgx.Batch{}
		b.Queue("SAVEPOINT idem_checks")
		b.Queue(sql, args).QueryRow(func(r pgx.Row) error { return r.Scan(dest...) })
		b.Queue("RELEASE SAVEPOINT idem_checks")
		err := tx.SendBatch(ctx, b).Close()
		if err != nil && ctx.Err() == nil {
			if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT idem_checks"); rerr != nil {
				return &Error{Broken: "(the checks' statement)", Err: err}
			}
		}
		return err
	}
	exact := false
	err := send(false)
	if err != nil && ctx.Err() == nil && s.hashes && noHash(err) {
		// A unique key's type cannot be hashed: group by it instead,
		// after leaving the savepoint that failed.
		if _, rerr := tx.Exec(ctx, "RELEASE SAVEPOINT idem_checks"); rerr != nil {
			return nil, &Error{Broken: "(the checks' statement)", Err: err}
		}
		exact = true
		err = send(true)
	}
	if err != nil {
		var broken *Error
		if ctx.Err() != nil || errors.As(err, &broken) {
			return nil, err
		}
		return nil, s.broken(ctx, tx, p, err, exact)
	}
	took := time.Since(start)
	rows := counts[0]
	out := make([]Outcome, 0, len(s.checks))
	j := 1
	for _, c := range s.checks {
		o := Outcome{Name: c.name, Kind: c.kind, Severity: c.cfg.SeverityOrDefault(), Checked: rows, Duration: took}
		switch c.kind {
		case KindRowCount, KindRowCountChange:
			s.rowCount(&o, c, baseline)
		default:
			o.Failing = counts[j]
			j++
			if c.exact != "" && !exact && o.Failing > 0 {
				// A key repeats (or two keys hash alike): count the
				// duplicated key values.
				if err := tx.QueryRow(ctx, "SELECT "+c.exact, c.with(p)).Scan(&o.Failing); err != nil {
					return nil, &Error{Broken: c.name, Err: err}
				}
			}
			limit, failed := threshold(c.cfg, o.Failing, rows)
			o.Threshold = limit
			o.Status = status(o, failed)
		}
		out = append(out, o)
	}
	// Samples only for what failed: nothing more runs on a passing load.
	for i, c := range s.checks {
		if out[i].Status != StatusFail && out[i].Status != StatusWarn || c.sample == "" {
			continue
		}
		args := c.with(p)
		var samples []byte
		if err := tx.QueryRow(ctx, c.sample, args).Scan(&samples); err != nil {
			return nil, &Error{Broken: c.name, Err: err}
		}
		out[i].Samples = samples
	}
	return out, nil
}

// CountsOnly says whether every check of s counts rows (row_count,
// row_count_change), so that FromCounts can evaluate them without a
// statement when the strategy counts what its load produced.
func (s *Set) CountsOnly() bool {
	if s == nil {
		return false
	}
	for _, c := range s.checks {
		if c.kind != KindRowCount && c.kind != KindRowCountChange {
			return false
		}
	}
	return true
}

// FromCounts evaluates a CountsOnly set from the load's own counts: rows
// it produced, baseline rows it replaced (see strategies.Strategy.Counts).
// Nothing runs: on a small event the statement's round trip was the
// checks' whole cost.
func (s *Set) FromCounts(rows, baseline int64) []Outcome {
	out := make([]Outcome, 0, len(s.checks))
	for _, c := range s.checks {
		o := Outcome{Name: c.name, Kind: c.kind, Severity: c.cfg.SeverityOrDefault(), Checked: rows}
		s.rowCount(&o, c, baseline)
		out = append(out, o)
	}
	return out
}

// rowCount evaluates a row_count or row_count_change check on o.Checked
// rows.
func (s *Set) rowCount(o *Outcome, c check, baseline int64) {
	rows := o.Checked
	if c.kind == KindRowCountChange {
		s.rowCountChange(o, c.cfg.RowCountChange, baseline, rows)
		return
	}
	o.Failing, o.Threshold = 0, rangeText(c.cfg.RowCount.Min, c.cfg.RowCount.Max)
	if r := c.cfg.RowCount; r.Min != nil && rows < *r.Min || r.Max != nil && rows > *r.Max {
		o.Failing = rows
	}
	o.Note = fmt.Sprintf("%d row(s)", rows)
	o.Status = status(*o, o.Failing > 0)
}

func (s *Set) rowCountChange(o *Outcome, r *RowCountChange, baseline, rows int64) {
	minBase := int64(DefaultMinBaseline)
	if r.MinBaseline != nil {
		minBase = *r.MinBaseline
	}
	var lim []string
	if r.MaxDrop != nil {
		lim = append(lim, "drop <= "+pct(*r.MaxDrop))
	}
	if r.MaxRise != nil {
		lim = append(lim, "rise <= "+pct(*r.MaxRise))
	}
	o.Threshold = strings.Join(lim, ", ")
	if !s.baseline || baseline == 0 || baseline < minBase {
		o.Status, o.Note = StatusSkipped, fmt.Sprintf("baseline %d row(s), under min_baseline %d", baseline, minBase)
		return
	}
	change := float64(rows-baseline) / float64(baseline)
	o.Note = fmt.Sprintf("%d row(s) replace %d (%s)", rows, baseline, signedPct(change))
	failed := r.MaxDrop != nil && -change > *r.MaxDrop || r.MaxRise != nil && change > *r.MaxRise
	if failed {
		o.Failing = rows
	}
	o.Status = status(*o, failed)
}

func status(o Outcome, failed bool) string {
	switch {
	case !failed:
		return StatusPass
	case o.Severity == SeverityWarn:
		return StatusWarn
	default:
		return StatusFail
	}
}

// threshold says whether failing rows of checked pass c's threshold.
func threshold(c Spec, failing, checked int64) (string, bool) {
	switch {
	case c.MaxFailingRatio != nil:
		ratio := 0.0
		if checked > 0 {
			ratio = float64(failing) / float64(checked)
		}
		return "failing <= " + pct(*c.MaxFailingRatio) + " of rows", ratio > *c.MaxFailingRatio
	case c.MaxFailing != nil:
		return "failing <= " + strconv.FormatInt(*c.MaxFailing, 10), failing > *c.MaxFailing
	default:
		return "failing <= 0", failing > 0
	}
}

func rangeText(min, max *int64) string {
	switch {
	case min != nil && max != nil:
		return fmt.Sprintf("%d <= rows <= %d", *min, *max)
	case min != nil:
		return fmt.Sprintf("rows >= %d", *min)
	default:
		return fmt.Sprintf("rows <= %d", *max)
	}
}

func pct(f float64) string { return strconv.FormatFloat(f*100, 'f', -1, 64) + "%" }

func signedPct(f float64) string {
	s := strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
	if f > 0 {
		return "+" + s
	}
	return s
}

// broken finds which check made the shared statement fail, running each
// alone under a savepoint (this path only: a failing load, a handful of
// checks), and returns an *Error naming it; exact as the statement had it.
func (s *Set) broken(ctx context.Context, tx pgx.Tx, p strategies.Params, err error, exact bool) error {
	if ctx.Err() != nil {
		return err
	}
	for _, c := range s.checks {
		if c.count == "" {
			continue
		}
		args := c.with(p)
		// alone runs count under a savepoint: ok false when the
		// transaction cannot go on.
		alone := func(count string) (ok bool, e error) {
			if _, e := tx.Exec(ctx, "SAVEPOINT idem_check"); e != nil {
				return false, nil
			}
			var n int64
			e = tx.QueryRow(ctx, "SELECT "+count+" "+s.produced, args).Scan(&n)
			if _, re := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT idem_check"); re != nil {
				return false, nil
			}
			return true, e
		}
		ok, e := alone(c.countExpr(exact))
		if ok && e != nil && !exact && c.exact != "" && noHash(e) {
			// A key type without a hash function is not the fault: its
			// grouping is what the statement would run.
			ok, e = alone(c.exact)
		}
		if !ok {
			break
		}
		if e != nil {
			return &Error{Broken: c.name, Err: e}
		}
	}
	return &Error{Broken: "(the checks' statement)", Err: err}
}

// Error is a load the checks refused: the checks of severity error that
// failed, or the check that could not run. It is fatal: the same staging
// data fails the same way.
type Error struct {
	Failed []Outcome
	Broken string // the check that errored, when one did
	Err    error
}

func (e *Error) Error() string {
	if e.Broken != "" {
		return fmt.Sprintf("%s: check %s could not run: %v", schemas.ReasonCheckFailed, e.Broken, e.Err)
	}
	parts := make([]string, len(e.Failed))
	for i, o := range e.Failed {
		parts[i] = fmt.Sprintf("%s: %d failing (%s)", o.Name, o.Failing, o.Threshold)
		if o.Note != "" {
			parts[i] += ", " + o.Note
		}
	}
	return schemas.ReasonCheckFailed + ": " + strings.Join(parts, "; ")
}

// Fatal: retrying the same data fails the same way.
func (e *Error) Fatal() bool { return true }

func (e *Error) Unwrap() error { return e.Err }

// Refused returns the *Error for outs when a check of severity error
// failed, else nil.
func Refused(outs []Outcome) error {
	var failed []Outcome
	for _, o := range outs {
		if o.Status == StatusFail {
			failed = append(failed, o)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &Error{Failed: failed}
}

// Explain plans every statement the checks would run, with EXPLAIN (nothing
// runs): a missing column or table, a type mismatch or a value the column's
// type cannot read is found before the first event; and a check whose plan
// writes (a data-modifying WITH, a function the lexer could not see into
// that is planned as a write) is refused.
func (s *Set) Explain(ctx context.Context, tx pgx.Tx, p strategies.Params) error {
	if s == nil {
		return nil
	}
	if s.baseline {
		if _, err := tx.Exec(ctx, "EXPLAIN SELECT count(*) "+s.replaced, p.NamedArgs()); err != nil {
			return fmt.Errorf("row_count_change: the rows the load replaces: %w", err)
		}
	}
	for _, c := range s.checks {
		if c.count == "" {
			continue
		}
		args := c.with(p)
		// A unique check's grouping too: a key type without equality
		// (json) is refused here, where its hashing is not.
		for _, count := range []string{c.count, c.exact} {
			if count == "" {
				continue
			}
			var plan []byte
			if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) SELECT "+count+" "+s.produced, args).Scan(&plan); err != nil {
				return fmt.Errorf("check %s: %w", c.name, err)
			}
			if strings.Contains(string(plan), `"ModifyTable"`) || strings.Contains(string(plan), `"LockRows"`) {
				return fmt.Errorf("check %s: its plan writes or locks rows; a check only reads", c.name)
			}
		}
	}
	return nil
}
