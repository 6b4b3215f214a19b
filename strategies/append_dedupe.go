package strategies

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// AppendDedupe never deletes: each load appends the source rows tagged with its
// run_id and a load sequence that idem assigns (one value per load, from
// idem.load_seq), and a view keeps the latest row per key ordered by that
// sequence. run_id text need not sort by time: a replay of an older run_id
// loaded later wins, because it was loaded later.
//
// Duplicate keys within one source are reduced to one row per key (a
// deterministic choice) so the view never has to break a tie inside a load.
// With a partition column the view dedupes per (partition, key), which also
// lets a reader's partition filter reach the table.
type AppendDedupe struct {
	spec Spec
	cat  catalogCache
}

var _ Strategy = (*AppendDedupe)(nil)

func (*AppendDedupe) Name() string { return "append_dedupe" }

func (s *AppendDedupe) dedupeKey() []string {
	if s.spec.PartitionColumn != "" && !slices.Contains(s.spec.Key, s.spec.PartitionColumn) {
		return append([]string{s.spec.PartitionColumn}, s.spec.Key...)
	}
	return s.spec.Key
}

func (s *AppendDedupe) Describe(b *pgx.Batch, p Params) *Plan {
	return s.cat.describe(b, s.spec, p, false, nil)
}

// target checks the described target has what append_dedupe needs.
func (s *AppendDedupe) target(dp *Plan) (*table, []string, error) {
	t, src, err := dp.checked()
	if err != nil {
		return nil, nil, err
	}
	if err := requireColumns(t, "key column", s.dedupeKey()...); err != nil {
		return nil, nil, err
	}
	rc, _ := t.column(s.spec.RunIDColumn)
	lc, _ := t.column(s.spec.LoadSeqColumn)
	if rc.Type != "text" || lc.Type != "bigint" {
		return nil, nil, schemaErr("append_dedupe needs columns %s text and %s bigint on %s: ALTER TABLE %s ADD COLUMN %s text, ADD COLUMN %s bigint",
			s.spec.RunIDColumn, s.spec.LoadSeqColumn, t.Table, t.ident(), q(s.spec.RunIDColumn), q(s.spec.LoadSeqColumn))
	}
	return t, src, nil
}

// Prepare creates the index that serves the view and (re)creates the view over
// the target's other columns, each only when the catalog shows it is missing or
// different. It runs at every start of every replica, while reports read the
// view: CREATE OR REPLACE VIEW takes ACCESS EXCLUSIVE on the view, so it would
// wait for every running reader and make every later one wait behind it, even
// to change nothing. When DDL is needed it waits at most LockTimeout.
func (s *AppendDedupe) Prepare(ctx context.Context, tx pgx.Tx) error {
	// Prepare runs in a transaction of its own: the bound holds for all of it
	// (the temporary view below takes ACCESS SHARE on the target too).
	b := &pgx.Batch{}
	queueLockTimeout(b)
	// The view only needs the target; an empty source describes fine.
	spec := s.spec
	spec.Source = "SELECT 1"
	dp := describe(b, spec, Params{}, false)
	if err := send(ctx, tx, b); err != nil {
		return err
	}
	t, _, err := s.target(dp)
	if err != nil {
		return err
	}
	idx, createIndex, visible, body := s.setup(t)
	// DDL needs ownership even when it would change nothing (CREATE INDEX IF
	// NOT EXISTS checks the owner first), so a role with only SELECT and
	// INSERT on the target may run idem once an administrator made them:
	// look before creating.
	var haveIndex, ownView bool
	var viewCols []string
	b = &pgx.Batch{}
	b.Queue("SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{s.spec.Target.Schema, idx}.Sanitize()).QueryRow(func(r pgx.Row) error { return r.Scan(&haveIndex) })
	b.Queue(`SELECT coalesce(array_agg(a.attname::text ORDER BY a.attnum), '{}'),
	                coalesce(bool_or(pg_has_role(c.relowner, 'USAGE')), false)
	           FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	          WHERE c.oid = to_regclass($1)`, s.spec.View.ident()).QueryRow(func(r pgx.Row) error { return r.Scan(&viewCols, &ownView) })
	if err := send(ctx, tx, b); err != nil {
		return err
	}
	keepView := !ownView && slices.Equal(viewCols, visible)
	if !keepView && len(viewCols) > 0 {
		// A view idem owns is kept only when its definition is the one
		// idem would write, so a changed key or column still reaches it.
		if keepView, err = sameView(ctx, tx, s.spec.View, body); err != nil {
			return s.lockErr(err, "the target "+t.String())
		}
	}
	if !haveIndex {
		if _, err := tx.Exec(ctx, createIndex); err != nil {
			return s.lockErr(err, "the target "+t.String()+" (to create index "+idx+")")
		}
	}
	if keepView {
		// Unchanged, or made by an administrator for a role that may not
		// replace it and showing exactly the target's other columns.
		return nil
	}
	return s.lockErr(replaceView(ctx, tx, s.spec.View, body), "the view "+s.spec.View.String())
}

// setup returns what Prepare maintains for target t: the index that serves
// the view (its name and its CREATE statement), the columns the view shows,
// and the view's body (" AS SELECT ...").
func (s *AppendDedupe) setup(t *table) (idx, createIndex string, visible []string, body string) {
	key := s.dedupeKey()
	idx = indexName(s.spec.Target.Name, "idem_dedupe")
	for _, c := range t.Columns {
		if c.Name != s.spec.RunIDColumn && c.Name != s.spec.LoadSeqColumn {
			visible = append(visible, c.Name)
		}
	}
	body = " AS\nSELECT " + quoteAll("d.", visible) + "\n  FROM (SELECT DISTINCT ON (" + quoteAll("", key) + ") *\n" +
		"          FROM " + t.ident() + "\n         ORDER BY " + quoteAll("", key) + ", " + q(s.spec.LoadSeqColumn) + " DESC) AS d"
	createIndex = "CREATE INDEX IF NOT EXISTS " + q(idx) + " ON " + t.ident() +
		" (" + quoteAll("", key) + ", " + q(s.spec.LoadSeqColumn) + " DESC)"
	return idx, createIndex, visible, body
}

// replaceView (re)creates view with body.
func replaceView(ctx context.Context, tx pgx.Tx, view Table, body string) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	_, err = sp.Exec(ctx, "CREATE OR REPLACE VIEW "+view.ident()+body)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InvalidTableDefinition {
		// The target lost or reordered columns: CREATE OR REPLACE cannot drop
		// view columns, so rebuild it.
		_ = sp.Rollback(ctx)
		_, err = tx.Exec(ctx, "DROP VIEW "+view.ident()+"; CREATE VIEW "+view.ident()+body)
		return err
	}
	if err != nil {
		_ = sp.Rollback(ctx)
		return err
	}
	return sp.Commit(ctx)
}

// sameView reports whether view already has the definition body gives: the
// server deparses both, the wanted one from a temporary view made in a
// savepoint that is rolled back, so no text comparison guesses at its
// formatting. A role that may not create temporary objects compares
// nothing: the view is then replaced, as idem always did.
func sameView(ctx context.Context, tx pgx.Tx, view Table, body string) (bool, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = sp.Rollback(ctx) }()
	if _, err := sp.Exec(ctx, "CREATE TEMPORARY VIEW idem_wanted_view"+body); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege {
			return false, nil
		}
		return false, err
	}
	var same bool
	err = sp.QueryRow(ctx, "SELECT pg_get_viewdef('pg_temp.idem_wanted_view'::regclass) = pg_get_viewdef(to_regclass($1))",
		view.ident()).Scan(&same)
	return same, err
}

// lockErr says which object's lock a Prepare could not get within
// LockTimeout; the error stays a lock timeout (transient): the setup is
// retried with the dataset's next load.
func (s *AppendDedupe) lockErr(err error, what string) error {
	if !isLockTimeout(err) {
		return err
	}
	return fmt.Errorf("append_dedupe: %s is in use (a long query reads or writes it) and its lock was not granted within %s, so readers are not stalled behind the setup; it is retried with the next load, or end those queries: %w",
		what, LockTimeout, err)
}

func (s *AppendDedupe) plan(dp *Plan) (string, error) {
	t, src, err := s.target(dp)
	if err != nil {
		return "", err
	}
	cols, err := insertColumns(t, src, s.spec.RunIDColumn, s.spec.LoadSeqColumn)
	if err != nil {
		return "", err
	}
	key := s.dedupeKey()
	for _, k := range key {
		if !slices.Contains(cols, k) {
			return "", schemaErr("the source does not return %q, which append_dedupe needs", k)
		}
	}
	all := append(slices.Clone(cols), s.spec.RunIDColumn, s.spec.LoadSeqColumn)
	// The scalar subquery runs once: every row of a load shares one load_seq.
	return "INSERT INTO " + t.ident() + " (" + quoteAll("", all) + ")\n" +
		"SELECT DISTINCT ON (" + quoteAll("s.", key) + ") " + quoteAll("s.", cols) +
		", @run_id::text, (SELECT nextval('idem.load_seq'))\n  FROM (" + s.spec.Source + "\n) AS s\n" +
		" ORDER BY " + quoteAll("s.", key) + ", s::text DESC", nil
}

func (s *AppendDedupe) Execute(ctx context.Context, tx pgx.Tx, dp *Plan, p Params) (Result, error) {
	if err := s.resolve(ctx, tx, dp); err != nil {
		return Result{}, err
	}
	res, err := s.execute(ctx, tx, dp, p)
	return res, dp.stale(err)
}

// resolve makes dp ready; when the load added or widened a column of the
// target, the view is replaced in the same transaction to show it, so
// readers see the column and its rows together.
func (s *AppendDedupe) resolve(ctx context.Context, tx pgx.Tx, dp *Plan) error {
	if err := dp.resolve(ctx, tx); err != nil || !dp.altered {
		return err
	}
	t, _, err := s.target(dp)
	if err != nil {
		return err
	}
	_, _, _, body := s.setup(t)
	b := &pgx.Batch{}
	queueLockTimeout(b)
	if err := send(ctx, tx, b); err != nil {
		return err
	}
	err = replaceView(ctx, tx, s.spec.View, body)
	b = &pgx.Batch{}
	restoreLockTimeout(b)
	if rerr := send(ctx, tx, b); err == nil {
		err = rerr
	}
	return s.lockErr(err, "the view "+s.spec.View.String())
}

func (s *AppendDedupe) execute(ctx context.Context, tx pgx.Tx, dp *Plan, p Params) (Result, error) {
	stmt, err := s.plan(dp)
	if err != nil {
		return Result{}, err
	}
	tag, err := tx.Exec(ctx, stmt, p.args())
	if err != nil {
		return Result{}, err
	}
	res := Result{Route: "append", Inserted: tag.RowsAffected()}
	if res.Inserted == 0 && !s.spec.AllowEmpty {
		return res, ErrEmptySource
	}
	return res, nil
}

func (s *AppendDedupe) Check(ctx context.Context, tx pgx.Tx, p Params) error {
	dp, err := described(ctx, tx, s, p)
	if err != nil {
		return err
	}
	stmt, err := s.plan(dp)
	if err != nil {
		return err
	}
	return explain(ctx, tx, p, stmt)
}

// indexName builds an index name that stays within Postgres's 63 bytes, which
// would otherwise silently truncate it (and could collide).
func indexName(table, suffix string) string {
	name := table + "_" + suffix
	if len(name) <= 63 {
		return name
	}
	h := sha256.Sum256([]byte(name))
	return name[:63-9] + "_" + hex.EncodeToString(h[:4])
}

var _ GroupLoader = (*AppendDedupe)(nil)

// DescribeShared: one fingerprint of the target for a group.
func (s *AppendDedupe) DescribeShared(b *pgx.Batch, p Params, first *Plan) *Plan {
	return s.cat.describe(b, s.spec, p, true, first)
}

// Groupable: each load is one INSERT with a load_seq of its own, and the
// partition is part of the view's key, so loads of several partitions may
// share one transaction.
func (s *AppendDedupe) Groupable() bool { return true }

// QueueLoads queues each partition's INSERT on b, as Execute runs it:
// each load takes a load_seq of its own.
func (s *AppendDedupe) QueueLoads(ctx context.Context, tx pgx.Tx, dps []*Plan, ps []Params, b *pgx.Batch) ([]*Result, func(error) error, error) {
	res := make([]*Result, len(ps))
	for i, dp := range dps {
		if err := s.resolve(ctx, tx, dp); err != nil {
			return nil, nil, err
		}
		stmt, err := s.plan(dp)
		if err != nil {
			return nil, nil, dp.stale(err)
		}
		r := &Result{Route: "append"}
		b.Queue(stmt, ps[i].args()).Exec(func(ct pgconn.CommandTag) error { r.Inserted = ct.RowsAffected(); return nil })
		res[i] = r
	}
	return res, queuedFinish(dps[0], res, s.spec.AllowEmpty), nil
}
