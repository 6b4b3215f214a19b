package strategies

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/internal/sqlcheck"

	"github.com/idem-data/idem/schemas"
)

// DeleteInsert replaces one partition: delete its rows, insert the source's.
// Every source row must belong to the partition being loaded (a row of another
// partition would be doubled by that partition's next rerun), so the insert
// raises an error on the first stray row.
//
// When the target is natively partitioned and one child holds exactly this
// partition, the rows go straight into that child (tuple routing through the
// parent costs +60 % on a big insert) and the child's partition constraint
// refuses a stray row. Its old rows are deleted, which readers never wait for
// and never see half done: a reader whose snapshot predates the load keeps
// seeing the old rows. Only with Spec.TruncatePartition is the child
// truncated instead (no dead tuples, but ACCESS EXCLUSIVE and not MVCC-safe).
type DeleteInsert struct {
	spec Spec
	cat  catalogCache
	// ptypes: the type of the source's @partition, for group loads.
	ptypes paramTypes
}

var _ Strategy = (*DeleteInsert)(nil)

func (*DeleteInsert) Name() string                          { return "delete_insert" }
func (*DeleteInsert) Prepare(context.Context, pgx.Tx) error { return nil }

// The routes of a delete_insert load, as Result.Route names them. Benchmarks
// and logs read them: they do not change once shipped.
const (
	// routeDelete deletes and inserts through the target; a CASE refuses a
	// row of another partition.
	routeDelete = "delete"
	// routeDeleteChild deletes the partition's rows through the parent (the
	// grants on the parent apply, and pruning leaves only the child) and
	// inserts straight into the child that holds exactly the partition.
	routeDeleteChild = "delete_child"
	// routeTruncateChild truncates that child and inserts into it
	// (truncate_partition).
	routeTruncateChild = "truncate_child"
)

type deleteInsertPlan struct {
	del, ins string
	route    string
	into     Table
	// cols are the target's columns the source fills, in the INSERT's order.
	cols []string
}

func (pl *deleteInsertPlan) truncate() bool { return pl.route == routeTruncateChild }

func (s *DeleteInsert) Describe(b *pgx.Batch, p Params) *Plan {
	return s.cat.describe(b, s.spec, p, true, nil)
}

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
	pl := &deleteInsertPlan{route: routeDelete, into: t.Table, cols: cols}
	if t.Kind == "p" {
		if child := exactChild(dp, pc, p.Partition); child != nil {
			pl.into, pl.route = *child, routeDeleteChild
			if s.spec.TruncatePartition {
				pl.route = routeTruncateChild
			}
		}
	}
	selects := make([]string, len(cols))
	for i, c := range cols {
		selects[i] = "s." + q(c)
		// Inserting straight into the child already rejects a stray row
		// (its partition constraint, 23514); elsewhere CASE raises on the
		// first one, evaluating the error branch only for it.
		if c == pc && pl.route == routeDelete {
			selects[i] = "CASE WHEN s." + q(pc) + " = @idem_partition THEN s." + q(pc) +
				" ELSE idem.outside_partition(s." + q(pc) + ", @idem_partition_text) END"
		}
	}
	if pl.truncate() {
		pl.del = "TRUNCATE " + pl.into.ident()
	} else {
		pl.del = "DELETE FROM " + t.ident() + " WHERE " + q(pc) + " = @partition"
	}
	pl.ins = "INSERT INTO " + pl.into.ident() + " (" + quoteAll("", cols) + ")\nSELECT " +
		strings.Join(selects, ", ") + "\n  FROM (" + s.spec.Source + "\n) AS s"
	return pl, nil
}

func (s *DeleteInsert) Execute(ctx context.Context, tx pgx.Tx, dp *Plan, p Params) (Result, error) {
	if err := dp.resolve(ctx, tx); err != nil {
		return Result{}, err
	}
	res, err := s.execute(ctx, tx, dp, p)
	return res, dp.stale(err)
}

func (s *DeleteInsert) execute(ctx context.Context, tx pgx.Tx, dp *Plan, p Params) (Result, error) {
	pl, err := s.plan(dp, p)
	if err != nil {
		return Result{}, err
	}
	res := Result{Route: pl.route, Deleted: -1}
	// Every statement in one round trip.
	b := &pgx.Batch{}
	pl.queue(b, p, &res)
	if err := send(ctx, tx, b); err != nil {
		return res, pl.sendErr(err)
	}
	if res.Inserted == 0 && !s.spec.AllowEmpty {
		return res, ErrEmptySource
	}
	return res, nil
}

// ExecuteCopy loads the partition with copyIn in place of the INSERT …
// SELECT (route copy_delete, copy_delete_child or copy_truncate_child): the
// rows are written once, into the target, instead of into a stage and
// again from it. On the parent, each row is checked against the partition
// as the INSERT checks it (idem.partition_mismatch raises for a row
// outside it); a child's partition constraint checks it there.
func (s *DeleteInsert) ExecuteCopy(ctx context.Context, tx pgx.Tx, dp *Plan, p Params, copyIn CopyIn) (Result, error) {
	if err := dp.resolve(ctx, tx); err != nil {
		return Result{}, err
	}
	res, err := s.executeCopy(ctx, tx, dp, p, copyIn)
	return res, dp.stale(err)
}

func (s *DeleteInsert) executeCopy(ctx context.Context, tx pgx.Tx, dp *Plan, p Params, copyIn CopyIn) (Result, error) {
	pl, err := s.plan(dp, p)
	if err != nil {
		return Result{}, err
	}
	res := Result{Route: "copy_" + pl.route, Deleted: -1}
	where := ""
	if pl.route == routeDelete {
		pc := s.spec.PartitionColumn
		col, _ := dp.target.column(pc)
		lit, err := sqlcheck.Literal(p.Partition)
		if err != nil {
			return res, fmt.Errorf("partition %q %w", p.Partition, err)
		}
		// The literal is folded into a constant of the column's type once;
		// only a row outside the partition reaches the function.
		where = "CASE WHEN " + q(pc) + " = " + lit + "::" + col.Type + " THEN true ELSE idem.partition_mismatch(" + q(pc) + ", " + lit + ") END"
	}
	b := &pgx.Batch{}
	// The literals are U&'…' constants beyond plain characters, which need
	// standard_conforming_strings.
	b.Queue("SET LOCAL standard_conforming_strings = on")
	pl.queueDelete(b, p, &res)
	if err := send(ctx, tx, b); err != nil {
		return res, pl.sendErr(err)
	}
	if res.Inserted, err = copyIn(ctx, pgx.Identifier{pl.into.Schema, pl.into.Name}, where); err != nil {
		return res, err
	}
	if res.Inserted == 0 && !s.spec.AllowEmpty {
		return res, ErrEmptySource
	}
	return res, nil
}

// sendErr says why the load's statements failed: a TRUNCATE that gave up
// waiting for the child's readers says so.
func (pl *deleteInsertPlan) sendErr(err error) error {
	if pl.truncate() && isLockTimeout(err) {
		return fmt.Errorf("truncate_partition: TRUNCATE %s waited %s for queries reading it and gave up so as not to stall its readers; the load is retried later: %w",
			pl.into, LockTimeout, err)
	}
	return err
}

// queue puts the load's statements on b; their callbacks count into res.
func (pl *deleteInsertPlan) queue(b *pgx.Batch, p Params, res *Result) {
	pl.queueDelete(b, p, res)
	b.Queue(pl.ins, p.args()).Exec(func(ct pgconn.CommandTag) error { res.Inserted = ct.RowsAffected(); return nil })
}

// queueDelete puts the DELETE (or the child's TRUNCATE) on b.
func (pl *deleteInsertPlan) queueDelete(b *pgx.Batch, p Params, res *Result) {
	if pl.truncate() {
		// TRUNCATE waits for every reader of the child, and every later
		// reader waits behind it: bounded, so a long report makes the load
		// retry later instead of stalling the partition's readers.
		queueLockTimeout(b)
		b.Queue(pl.del)
		restoreLockTimeout(b)
	} else {
		b.Queue(pl.del, p.args()).Exec(func(ct pgconn.CommandTag) error { res.Deleted = ct.RowsAffected(); return nil })
	}
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
	if s.spec.TruncatePartition {
		if err := s.checkTruncate(ctx, tx); err != nil {
			return err
		}
	}
	if pl.truncate() {
		return explain(ctx, tx, p, pl.ins)
	}
	return explain(ctx, tx, p, pl.del, pl.ins)
}

// checkTruncate finds the children that truncate_partition would truncate
// (those holding exactly one partition) and that this role may not
// TRUNCATE: a load of their partition would fail with permission_denied.
// EXPLAIN cannot plan a TRUNCATE, so the catalog is asked.
func (s *DeleteInsert) checkTruncate(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `
		SELECT pt.partstrat::text, pt.partnatts, ka.attname::text, format_type(ka.atttypid, ka.atttypmod),
		       n.nspname::text, ch.relname::text, pg_get_expr(ch.relpartbound, ch.oid), current_user::text
		  FROM pg_partitioned_table pt
		  JOIN pg_attribute ka ON ka.attrelid = pt.partrelid AND ka.attnum = pt.partattrs[0]
		  JOIN pg_inherits i ON i.inhparent = pt.partrelid
		  JOIN pg_class ch ON ch.oid = i.inhrelid AND ch.relkind = 'r'
		  JOIN pg_namespace n ON n.oid = ch.relnamespace
		 WHERE pt.partrelid = to_regclass($1) AND NOT has_table_privilege(ch.oid, 'TRUNCATE')
		 ORDER BY n.nspname, ch.relname`, s.spec.Target.ident())
	if err != nil {
		return err
	}
	var denied []string
	var role string
	for rows.Next() {
		var pl Plan
		var c child
		if err := rows.Scan(&pl.partStrat, &pl.partNatts, &pl.partKey, &pl.partKeyType, &c.schema, &c.name, &c.bound, &role); err != nil {
			rows.Close()
			return err
		}
		if exactLayout(&pl, s.spec.PartitionColumn) {
			if _, ok := heldPartition(pl.partStrat, c.bound); ok {
				denied = append(denied, Table{Schema: c.schema, Name: c.name}.String())
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(denied) == 0 {
		return nil
	}
	shown := denied
	if len(shown) > 5 {
		shown = append(shown[:5:5], fmt.Sprintf("and %d more", len(denied)-5))
	}
	return &Error{Reason: schemas.ReasonPermissionDenied, Msg: fmt.Sprintf(
		"truncate_partition: role %s may not TRUNCATE %s, which hold one partition each, so their loads would fail: GRANT TRUNCATE on each child (and on every new one), or remove truncate_partition to load them with DELETE",
		role, strings.Join(shown, ", "))}
}

var (
	listBound  = regexp.MustCompile(`^FOR VALUES IN \('((?:[^']|'')*)'\)$`)
	rangeBound = regexp.MustCompile(`^FOR VALUES FROM \('((?:[^']|'')*)'\) TO \('((?:[^']|'')*)'\)$`)
)

// exactChild finds the child of a partitioned table that holds exactly the
// rows whose partition column equals partition: a LIST child with that single
// value, or a RANGE child on a date column from that day to the next. Any other
// layout (monthly ranges, several key columns, sub-partitions) takes the
// DELETE route through the parent, which is always correct.
func exactChild(dp *Plan, pc, partition string) *Table {
	if !exactLayout(dp, pc) {
		return nil
	}
	for _, c := range dp.children {
		if held, ok := heldPartition(dp.partStrat, c.bound); ok && held == partition {
			return &Table{Schema: c.schema, Name: c.name}
		}
	}
	return nil
}

// exactLayout reports whether the parent is partitioned in a way whose
// children can hold exactly one partition: by pc alone, LIST, or RANGE on a
// date.
func exactLayout(dp *Plan, pc string) bool {
	return dp.partNatts == 1 && dp.partKey == pc &&
		(dp.partStrat == "l" || dp.partStrat == "r" && dp.partKeyType == "date")
}

// heldPartition reads a child's bound, as pg_get_expr prints it, and returns
// the canonical partition key of the one partition it holds exactly. It is
// conservative: a bound printed in another DateStyle simply does not match,
// and the load takes the DELETE route through the parent.
func heldPartition(strat, bound string) (string, bool) {
	if strat == "l" {
		m := listBound.FindStringSubmatch(bound)
		if m == nil {
			return "", false
		}
		return unquote(m[1]), true
	}
	m := rangeBound.FindStringSubmatch(bound)
	if m == nil {
		return "", false
	}
	lo, err1 := time.Parse(time.DateOnly, unquote(m[1]))
	hi, err2 := time.Parse(time.DateOnly, unquote(m[2]))
	if err1 != nil || err2 != nil || !hi.Equal(lo.AddDate(0, 0, 1)) {
		return "", false
	}
	return lo.Format(time.DateOnly), true
}

func unquote(s string) string { return strings.ReplaceAll(s, "''", "'") }

// DescribeShared is Describe for a load grouped after first, of the same
// target in the same transaction: it shares first's fingerprint read.
func (s *DeleteInsert) DescribeShared(b *pgx.Batch, p Params, first *Plan) *Plan {
	return s.cat.describe(b, s.spec, p, true, first)
}

// Groupable: loads of several partitions may share one transaction, and
// one DELETE and one INSERT (QueueLoads), unless truncate_partition (a
// TRUNCATE takes an exclusive lock per child, and waits for readers).
func (s *DeleteInsert) Groupable() bool { return !s.spec.TruncatePartition }
