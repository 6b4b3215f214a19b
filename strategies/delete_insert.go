package strategies

import (
	"context"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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

func (s *DeleteInsert) plan(ctx context.Context, tx pgx.Tx, p Params) (*deleteInsertPlan, error) {
	t, err := describeTable(ctx, tx, s.spec.Target)
	if err != nil {
		return nil, err
	}
	pc := s.spec.PartitionColumn
	if err := requireColumns(t, "partition_column", pc); err != nil {
		return nil, err
	}
	src, err := sourceColumns(ctx, tx, s.spec.Source, p)
	if err != nil {
		return nil, err
	}
	cols, err := insertColumns(t, src)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(","+strings.Join(cols, ",")+",", ","+pc+",") {
		return nil, schemaErr("the source does not return the partition column %q; idem checks every row belongs to the partition it loads", pc)
	}
	selects := make([]string, len(cols))
	for i, c := range cols {
		selects[i] = "s." + q(c)
		if c == pc {
			// CASE evaluates the error branch only for a stray row.
			selects[i] = "CASE WHEN s." + q(pc) + " = @idem_partition THEN s." + q(pc) +
				" ELSE idem.outside_partition(s." + q(pc) + ", @idem_partition_text) END"
		}
	}
	into := t.Table
	pl := &deleteInsertPlan{route: "delete"}
	if t.Kind == "p" {
		child, err := exactChild(ctx, tx, t, pc, p.Partition)
		if err != nil {
			return nil, err
		}
		if child != nil {
			into, pl.route, pl.truncate = *child, "truncate_child", true
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

func (s *DeleteInsert) Load(ctx context.Context, tx pgx.Tx, p Params) (Result, error) {
	pl, err := s.plan(ctx, tx, p)
	if err != nil {
		return Result{}, err
	}
	res := Result{Route: pl.route, Deleted: -1}
	if pl.truncate {
		if _, err := tx.Exec(ctx, pl.del); err != nil {
			return res, err
		}
	} else {
		tag, err := tx.Exec(ctx, pl.del, p.args())
		if err != nil {
			return res, err
		}
		res.Deleted = tag.RowsAffected()
	}
	tag, err := tx.Exec(ctx, pl.ins, p.args())
	if err != nil {
		return res, err
	}
	res.Inserted = tag.RowsAffected()
	if res.Inserted == 0 && !s.spec.AllowEmpty {
		return res, ErrEmptySource
	}
	return res, nil
}

func (s *DeleteInsert) Check(ctx context.Context, tx pgx.Tx, p Params) error {
	pl, err := s.plan(ctx, tx, p)
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
func exactChild(ctx context.Context, tx pgx.Tx, t *table, pc, partition string) (*Table, error) {
	var strat, keyCol, keyType string
	var natts int
	err := tx.QueryRow(ctx, `
		SELECT pt.partstrat::text, pt.partnatts, a.attname::text, format_type(a.atttypid, a.atttypmod)
		  FROM pg_partitioned_table pt
		  JOIN pg_attribute a ON a.attrelid = pt.partrelid AND a.attnum = pt.partattrs[0]
		 WHERE pt.partrelid = $1`, t.OID).Scan(&strat, &natts, &keyCol, &keyType)
	if err == pgx.ErrNoRows {
		return nil, nil // partitioned by an expression
	}
	if err != nil {
		return nil, err
	}
	if natts != 1 || keyCol != pc || (strat != "l" && strat != "r") || (strat == "r" && keyType != "date") {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `
		SELECT n.nspname::text, c.relname::text, pg_get_expr(c.relpartbound, c.oid)
		  FROM pg_inherits i
		  JOIN pg_class c ON c.oid = i.inhrelid
		  JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE i.inhparent = $1 AND c.relkind = 'r'`, t.OID)
	if err != nil {
		return nil, err
	}
	type child struct{ schema, name, bound string }
	children, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (child, error) {
		var c child
		err := r.Scan(&c.schema, &c.name, &c.bound)
		return c, err
	})
	if err != nil {
		return nil, err
	}
	for _, c := range children {
		if boundIsExactly(strat, c.bound, partition) {
			return &Table{Schema: c.schema, Name: c.name}, nil
		}
	}
	return nil, nil
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
