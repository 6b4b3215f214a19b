package strategies

import (
	"context"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DeleteInsert replaces one partition: delete its rows, insert the source's.
// Every source row must belong to the partition being loaded (a row of another
// partition would be doubled by that partition's next rerun), so the insert
// raises an error on the first stray row. When the target is natively
// partitioned and one child holds exactly this partition, it truncates that
// child and inserts straight into it: the same end state, without dead tuples
// or tuple routing through the parent.
type DeleteInsert struct{ spec Spec }

var _ Strategy = (*DeleteInsert)(nil)

func (*DeleteInsert) Name() string                          { return "delete_insert" }
func (*DeleteInsert) Prepare(context.Context, pgx.Tx) error { return nil }

type deleteInsertPlan struct {
	del, ins string
	route    string
	truncate bool
}

func (s *DeleteInsert) Describe(b *pgx.Batch, p Params) *Plan { return describe(b, s.spec, p, true) }

func (s *DeleteInsert) plan(dp *Plan, p Params) (*deleteInsertPlan, error) {
	t, src, err := dp.checked()
	if err != nil {
		return nil, err
	}
	pc := s.spec.PartitionColumn
	if err := requireColumns(t, "partition_column", pc); err != nil {
		return nil, err
	}
	cols, err := insertColumns(t, src)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(","+strings.Join(cols, ",")+",", ","+pc+",") {
		return nil, schemaErr("the source does not return the partition column %q; idem checks every row belongs to the partition it loads", pc)
	}
	into := t.Table
	pl := &deleteInsertPlan{route: "delete"}
	if t.Kind == "p" {
		if child := exactChild(dp, pc, p.Partition); child != nil {
			into, pl.route, pl.truncate = *child, "truncate_child", true
		}
	}
	selects := make([]string, len(cols))
	for i, c := range cols {
		selects[i] = "s." + q(c)
		// Inserting straight into the child already rejects a stray row
		// (its partition constraint, 23514); elsewhere CASE raises on the
		// first one, evaluating the error branch only for it.
		if c == pc && !pl.truncate {
			selects[i] = "CASE WHEN s." + q(pc) + " = @idem_partition THEN s." + q(pc) +
				" ELSE idem.outside_partition(s." + q(pc) + ", @idem_partition_text) END"
		}
	}
	if pl.truncate {
		pl.del = "TRUNCATE " + into.ident()
	} else {
		pl.del = "DELETE FROM " + t.ident() + " WHERE " + q(pc) + " = @partition"
	}
	pl.ins = "INSERT INTO " + into.ident() + " (" + quoteAll("", cols) + ")\nSELECT " +
		strings.Join(selects, ", ") + "\n  FROM (" + s.spec.Source + "\n) AS s"
	return pl, nil
}

func (s *DeleteInsert) Execute(ctx context.Context, tx pgx.Tx, dp *Plan, p Params) (Result, error) {
	pl, err := s.plan(dp, p)
	if err != nil {
		return Result{}, err
	}
	res := Result{Route: pl.route, Deleted: -1}
	// Both statements in one round trip.
	b := &pgx.Batch{}
	if pl.truncate {
		b.Queue(pl.del)
	} else {
		b.Queue(pl.del, p.args()).Exec(func(ct pgconn.CommandTag) error { res.Deleted = ct.RowsAffected(); return nil })
	}
	b.Queue(pl.ins, p.args()).Exec(func(ct pgconn.CommandTag) error { res.Inserted = ct.RowsAffected(); return nil })
	if err := send(ctx, tx, b); err != nil {
		return res, err
	}
	if res.Inserted == 0 && !s.spec.AllowEmpty {
		return res, ErrEmptySource
	}
	return res, nil
}

func (s *DeleteInsert) Check(ctx context.Context, tx pgx.Tx, p Params) error {
	dp, err := described(ctx, tx, s, p)
	if err != nil {
		return err
	}
	pl, err := s.plan(dp, p)
	if err != nil {
		return err
	}
	if pl.truncate {
		return explain(ctx, tx, p, pl.ins)
	}
	return explain(ctx, tx, p, pl.del, pl.ins)
}

var (
	listBound  = regexp.MustCompile(`^FOR VALUES IN \('((?:[^']|'')*)'\)$`)
	rangeBound = regexp.MustCompile(`^FOR VALUES FROM \('((?:[^']|'')*)'\) TO \('((?:[^']|'')*)'\)$`)
)

// exactChild finds the child of a partitioned table that holds exactly the
// rows whose partition column equals partition: a LIST child with that single
// value, or a RANGE child on a date column from that day to the next. Any other
// layout (monthly ranges, several key columns, sub-partitions) takes the
// DELETE route, which is always correct.
func exactChild(dp *Plan, pc, partition string) *Table {
	if dp.partNatts != 1 || dp.partKey != pc || (dp.partStrat != "l" && dp.partStrat != "r") ||
		(dp.partStrat == "r" && dp.partKeyType != "date") {
		return nil
	}
	for _, c := range dp.children {
		if boundIsExactly(dp.partStrat, c.bound, partition) {
			return &Table{Schema: c.schema, Name: c.name}
		}
	}
	return nil
}

// boundIsExactly compares a child's bound, as pg_get_expr prints it, with the
// canonical partition key. It is conservative: a bound printed in another
// DateStyle simply does not match, and the load takes the DELETE route.
func boundIsExactly(strat, bound, partition string) bool {
	if strat == "l" {
		m := listBound.FindStringSubmatch(bound)
		return m != nil && unquote(m[1]) == partition
	}
	m := rangeBound.FindStringSubmatch(bound)
	if m == nil {
		return false
	}
	lo, err1 := time.Parse(time.DateOnly, unquote(m[1]))
	hi, err2 := time.Parse(time.DateOnly, unquote(m[2]))
	return err1 == nil && err2 == nil && lo.Format(time.DateOnly) == partition && hi.Equal(lo.AddDate(0, 0, 1))
}

func unquote(s string) string { return strings.ReplaceAll(s, "''", "'") }
