package strategies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Merge upserts the source on the natural key.
//
//   - Unchanged rows are not touched: no new version, no row lock, no WAL.
//   - With a version column, a row is only updated by an equal or newer
//     version: a late replay of old data never wins.
//   - Duplicate keys in the source (Postgres raises 21000) are reduced to one
//     row per key: the newest version, then a deterministic tie-break on the
//     row's text, so every rerun picks the same row. That costs a sort of the
//     source, so it only happens after a first attempt, in a savepoint, hit
//     21000.
//
// Two routes write the same rows:
//
//   - merge (the default): one MERGE joining the source to the target by
//     one index probe per source row (hash and merge joins are turned off
//     for that statement only), so a new or changed row is probed once.
//     Taken when the source's columns have exactly the target's types and
//     the planned MERGE is that nested loop (checked once per target
//     definition with EXPLAIN: a source that joins tables of its own, or a
//     key without a usable index, keeps the other route). MERGE raises a
//     unique violation (23505) when a concurrent transaction inserts the
//     same key; the load then rolls back to its savepoint and takes the
//     second route.
//   - on_conflict: INSERT ... ON CONFLICT DO UPDATE, with the rows the
//     target already holds unchanged (or newer) filtered out first by one
//     index probe each, so ON CONFLICT never locks them. New and changed
//     rows are probed twice.
//
// Both need a unique index or primary key on exactly the key columns (the
// arbiter of ON CONFLICT, the probe of MERGE).
type Merge struct {
	spec Spec
	cat  catalogCache

	mu sync.Mutex
	// direct caches whether the merge route fits the target whose OID and
	// definition key it: the check runs again when either changes.
	direct    bool
	directFor string
}

func (*Merge) Name() string                          { return "merge" }
func (*Merge) Prepare(context.Context, pgx.Tx) error { return nil }

func (s *Merge) Describe(b *pgx.Batch, p Params) *Plan {
	return s.cat.describe(b, s.spec, p, false, nil)
}

func (s *Merge) plan(dp *Plan) ([]string, error) {
	t, src, err := dp.checked()
	if err != nil {
		return nil, err
	}
	if err := requireColumns(t, "key column", s.spec.Key...); err != nil {
		return nil, err
	}
	if s.spec.VersionColumn != "" {
		if err := requireColumns(t, "version_column", s.spec.VersionColumn); err != nil {
			return nil, err
		}
	}
	cols, err := insertColumns(t, src)
	if err != nil {
		return nil, err
	}
	for _, k := range append(slices.Clone(s.spec.Key), s.spec.VersionColumn) {
		if k != "" && !slices.Contains(cols, k) {
			return nil, schemaErr("the source does not return %q, which merge needs", k)
		}
	}
	return cols, nil
}

// uniqueKeyErr explains a missing arbiter index; at load time Postgres
// reports it (42P10), `idem validate` says what to create.
func (s *Merge) uniqueKeyErr(ctx context.Context, tx pgx.Tx, dp *Plan) error {
	ok, err := hasUniqueIndex(ctx, tx, dp.target, s.spec.Key)
	if err != nil || ok {
		return err
	}
	t := dp.target
	return schemaErr("merge needs a unique index or primary key on exactly (%s) of %s: CREATE UNIQUE INDEX ON %s (%s)",
		strings.Join(s.spec.Key, ", "), t.Table, t.ident(), quoteAll("", s.spec.Key))
}

// statement builds the upsert. With dedupe the source is reduced to one row
// per key first (a sort of the whole source); without it a duplicate key
// makes Postgres raise 21000, and Execute retries with dedupe.
func (s *Merge) statement(cols []string, dedupe bool) string {
	key := quoteAll("", s.spec.Key)
	src := "SELECT " + quoteAll("s.", cols) + "\n  FROM (" + s.spec.Source + "\n) AS s"
	if dedupe {
		order := quoteAll("s.", s.spec.Key)
		if v := s.spec.VersionColumn; v != "" {
			order += ", s." + q(v) + " DESC NULLS LAST"
		}
		order += ", s::text DESC"
		src = "SELECT DISTINCT ON (" + quoteAll("s.", s.spec.Key) + ") " + quoteAll("s.", cols) +
			"\n  FROM (" + s.spec.Source + "\n) AS s\n ORDER BY " + order
	}

	var upd []string
	for _, c := range cols {
		if !slices.Contains(s.spec.Key, c) {
			upd = append(upd, c)
		}
	}
	keyMatch := make([]string, len(s.spec.Key))
	for i, k := range s.spec.Key {
		keyMatch[i] = "u." + q(k) + " = s." + q(k)
	}
	// A row the target already holds unchanged (or holds in a newer version)
	// is left out before the INSERT, so ON CONFLICT never locks it: an
	// unchanged rerun writes no WAL for it and leaves no dead tuple. The
	// scalar subquery runs as one index probe per row, whatever the plan of
	// the user's source.
	same := "true"
	conflict := "DO NOTHING"
	if len(upd) > 0 {
		same = "(" + quoteAll("u.", upd) + ") IS NOT DISTINCT FROM (" + quoteAll("s.", upd) + ")"
		set := make([]string, len(upd))
		for i, c := range upd {
			set[i] = q(c) + " = EXCLUDED." + q(c)
		}
		where := "(" + quoteAll("t.", upd) + ") IS DISTINCT FROM (" + quoteAll("EXCLUDED.", upd) + ")"
		if v := s.spec.VersionColumn; v != "" {
			same = fmt.Sprintf("%s OR u.%[2]s > s.%[2]s", same, q(v))
			where = fmt.Sprintf("(t.%[1]s IS NULL OR EXCLUDED.%[1]s >= t.%[1]s) AND %s", q(v), where)
		}
		conflict = "DO UPDATE SET " + strings.Join(set, ", ") + "\n WHERE " + where
	}
	filtered := "SELECT s.* FROM (" + src + "\n) AS s\n WHERE NOT coalesce((SELECT " + same + " FROM " + s.spec.Target.ident() +
		" AS u WHERE " + strings.Join(keyMatch, " AND ") + " LIMIT 1), false)"
	// xmax = 0 tells a freshly inserted row from an updated one; the counts
	// come back as one row, the data never leaves the server.
	return "WITH w AS (\nINSERT INTO " + s.spec.Target.ident() + " AS t (" + quoteAll("", cols) + ")\n" + filtered +
		"\nON CONFLICT (" + key + ") " + conflict + "\nRETURNING (t.xmax = 0) AS inserted)\n" +
		"SELECT count(*) FILTER (WHERE inserted), count(*) FILTER (WHERE NOT inserted) FROM w"
}

// The routes of a merge load, as Result.Route names them.
const (
	routeMerge             = "merge"
	routeOnConflict        = "on_conflict"
	routeOnConflictDeduped = "on_conflict_deduped"
)

// mergeAlias names the target in the MERGE statement, so the plan check
// finds its scans whatever the source calls its own tables.
const mergeAlias = "idem_t"

// mergeStatement is the single-probe upsert: rows not in the target are
// inserted, rows whose values (or older version) differ are updated, the
// others are left alone without a lock.
func (s *Merge) mergeStatement(cols []string) string {
	t := mergeAlias
	on := make([]string, len(s.spec.Key))
	for i, k := range s.spec.Key {
		on[i] = t + "." + q(k) + " = s." + q(k)
	}
	var upd []string
	for _, c := range cols {
		if !slices.Contains(s.spec.Key, c) {
			upd = append(upd, c)
		}
	}
	stmt := "MERGE INTO " + s.spec.Target.ident() + " AS " + t + "\nUSING (SELECT " + quoteAll("s.", cols) + "\n  FROM (" + s.spec.Source +
		"\n) AS s) AS s\n   ON " + strings.Join(on, " AND ")
	if len(upd) > 0 {
		guard := "(" + quoteAll(t+".", upd) + ") IS DISTINCT FROM (" + quoteAll("s.", upd) + ")"
		if v := s.spec.VersionColumn; v != "" {
			guard = fmt.Sprintf("(%[2]s.%[1]s IS NULL OR s.%[1]s >= %[2]s.%[1]s) AND %[3]s", q(v), t, guard)
		}
		set := make([]string, len(upd))
		for i, c := range upd {
			set[i] = q(c) + " = s." + q(c)
		}
		stmt += "\n WHEN MATCHED AND " + guard + " THEN\n  UPDATE SET " + strings.Join(set, ", ")
	}
	return stmt + "\n WHEN NOT MATCHED THEN\n  INSERT (" + quoteAll("", cols) + ") VALUES (" + quoteAll("s.", cols) + ")"
}

// The merge route plans its statement with these join methods off: the
// join to the target is then a nested loop of index probes. They are put
// back for the rest of the transaction with SET LOCAL ... TO DEFAULT, never
// RESET: RESET is a session-level SET, which outlives the transaction and,
// behind a transaction pooler, stays on a server connection other clients
// get next.
var (
	mergeJoinsOff = []string{"SET LOCAL enable_hashjoin = off", "SET LOCAL enable_mergejoin = off"}
	mergeJoinsOn  = []string{"SET LOCAL enable_hashjoin TO DEFAULT", "SET LOCAL enable_mergejoin TO DEFAULT"}
)

// countsSQL reads how many rows this transaction inserted into and updated
// in the target (its leaves, when partitioned) so far: read before and
// after the MERGE, whose command tag only counts both together.
const countsSQL = `SELECT coalesce(sum(pg_stat_get_xact_tuples_inserted(relid)), 0)::bigint,
       coalesce(sum(pg_stat_get_xact_tuples_updated(relid)), 0)::bigint
  FROM pg_partition_tree($1::oid::regclass)`

// sameTypes reports whether every source column has exactly the type of the
// target column it is written to: MERGE compares the source's values as
// they come, where ON CONFLICT compares them after the assignment cast.
func sameTypes(t *table, dp *Plan, cols []string) bool {
	if len(dp.sourceTypes) != len(dp.source) {
		return false
	}
	for i, c := range dp.source {
		col, ok := t.column(c)
		if !ok || !slices.Contains(cols, c) {
			return false
		}
		st := dp.sourceTypes[i]
		if col.TypeOID == 0 || st.oid != col.TypeOID || st.typmod != col.TypMod {
			return false
		}
	}
	return true
}

// definition keys the cached route check: the target's OID, columns and types.
func definition(t *table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%s", t.OID, t.Kind)
	for _, c := range t.Columns {
		fmt.Fprintf(&b, "/%s:%d:%d", c.Name, c.TypeOID, c.TypMod)
	}
	return b.String()
}

// useMerge decides the route, checking the planned MERGE once per target
// definition: a nested loop whose only join is the one to the target, and
// index scans for every scan of the target. At run time seq scans stay
// allowed: the planner reads a target of a few pages whole, and sizes it
// from its current number of pages, not from the last ANALYZE.
func (s *Merge) useMerge(ctx context.Context, tx pgx.Tx, dp *Plan, cols []string, p Params) (bool, error) {
	if !sameTypes(dp.target, dp, cols) {
		return false, nil
	}
	def := dp.version + "/" + definition(dp.target)
	s.mu.Lock()
	ok, known := s.direct, s.directFor == def
	s.mu.Unlock()
	if known {
		return ok, nil
	}
	var plan []byte
	// In a savepoint, taken in a round trip of its own (a batch's statements
	// are parsed before any of them runs): a target MERGE cannot run on
	// keeps the other route.
	if _, err := tx.Exec(ctx, "SAVEPOINT idem_merge_check"); err != nil {
		return false, err
	}
	b := &pgx.Batch{}
	// Seq scans are off for the check only: a small target is rightly read
	// whole while it is small; what matters is that an index can probe it.
	for _, q := range append(mergeJoinsOff, "SET LOCAL enable_seqscan = off") {
		b.Queue(q)
	}
	b.Queue("EXPLAIN (FORMAT JSON) "+s.mergeStatement(cols), p.args()).QueryRow(func(r pgx.Row) error { return r.Scan(&plan) })
	for _, q := range append(mergeJoinsOn, "SET LOCAL enable_seqscan TO DEFAULT") {
		b.Queue(q)
	}
	b.Queue("RELEASE SAVEPOINT idem_merge_check")
	if err := send(ctx, tx, b); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			return false, err
		}
		// One at a time: in an aborted transaction only the rollback parses.
		for _, q := range []string{"ROLLBACK TO SAVEPOINT idem_merge_check", "RELEASE SAVEPOINT idem_merge_check"} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return false, err
			}
		}
		plan = nil
	}
	ok = probesTarget(plan)
	s.mu.Lock()
	s.direct, s.directFor = ok, def
	s.mu.Unlock()
	return ok, nil
}

// forget drops the cached route check.
func (s *Merge) forget() {
	s.mu.Lock()
	s.directFor = ""
	s.mu.Unlock()
}

type planNode struct {
	NodeType string     `json:"Node Type"`
	Alias    string     `json:"Alias"`
	Plans    []planNode `json:"Plans"`
}

// probesTarget reads an EXPLAIN (FORMAT JSON) of the MERGE: exactly one
// join, a nested loop, and the target read by index scans only.
func probesTarget(js []byte) bool {
	var doc []struct{ Plan planNode }
	if err := json.Unmarshal(js, &doc); err != nil || len(doc) != 1 {
		return false
	}
	joins, nestLoops, ok := 0, 0, true
	var walk func(n planNode)
	walk = func(n planNode) {
		switch n.NodeType {
		case "Nested Loop":
			joins++
			nestLoops++
		case "Hash Join", "Merge Join":
			joins++
		}
		switch {
		case !strings.HasPrefix(n.Alias, mergeAlias), n.NodeType == "ModifyTable":
		case n.NodeType != "Index Scan" && n.NodeType != "Index Only Scan":
			ok = false
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(doc[0].Plan)
	return ok && joins == 1 && nestLoops == 1
}

func (s *Merge) Execute(ctx context.Context, tx pgx.Tx, dp *Plan, p Params) (Result, error) {
	if err := dp.resolve(ctx, tx); err != nil {
		return Result{}, err
	}
	res, err := s.execute(ctx, tx, dp, p)
	return res, dp.stale(err)
}

func (s *Merge) execute(ctx context.Context, tx pgx.Tx, dp *Plan, p Params) (Result, error) {
	cols, err := s.plan(dp)
	if err != nil {
		return Result{}, err
	}
	res, err := s.load(ctx, tx, dp, cols, p)
	if err != nil {
		s.forget()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P10" {
			// No arbiter index: say which one to create.
			return res, schemaErr("merge needs a unique index or primary key on exactly (%s) of %s: CREATE UNIQUE INDEX ON %s (%s)",
				strings.Join(s.spec.Key, ", "), dp.target.Table, dp.target.ident(), quoteAll("", s.spec.Key))
		}
		return res, err
	}
	if res.Inserted+res.Updated == 0 && !s.spec.AllowEmpty {
		// Nothing written: either every row was unchanged, or the source is empty.
		var any bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM ("+s.spec.Source+"\n) AS s)", p.args()).Scan(&any); err != nil {
			return res, err
		}
		if !any {
			return res, ErrEmptySource
		}
	}
	return res, nil
}

func (s *Merge) load(ctx context.Context, tx pgx.Tx, dp *Plan, cols []string, p Params) (Result, error) {
	direct, err := s.useMerge(ctx, tx, dp, cols, p)
	if err != nil {
		return Result{}, err
	}
	if direct {
		res, err := s.merge(ctx, tx, dp, cols, p)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != "23505" && pgErr.Code != "21000") {
			return res, err
		}
		// A key inserted meanwhile by another load (23505), or twice in the
		// source (21000 or 23505): ON CONFLICT handles both.
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT idem_merge"); err != nil {
			return res, err
		}
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT idem_merge"); err != nil {
			return res, err
		}
	}
	res, err := s.onConflict(ctx, tx, cols, p)
	if err == nil && direct && res.Route == routeOnConflictDeduped {
		// The source repeats keys: every load would fail MERGE first.
		s.mu.Lock()
		s.direct = false
		s.mu.Unlock()
	}
	return res, err
}

// merge runs the merge route in a savepoint (left open on error, for the
// caller to roll back to).
func (s *Merge) merge(ctx context.Context, tx pgx.Tx, dp *Plan, cols []string, p Params) (Result, error) {
	res := Result{Route: routeMerge}
	var ins0, upd0, ins1, upd1, total int64
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT idem_merge")
	for _, q := range mergeJoinsOff {
		b.Queue(q)
	}
	b.Queue(countsSQL, dp.target.OID).QueryRow(func(r pgx.Row) error { return r.Scan(&ins0, &upd0) })
	b.Queue(s.mergeStatement(cols), p.args()).Exec(func(ct pgconn.CommandTag) error { total = ct.RowsAffected(); return nil })
	b.Queue(countsSQL, dp.target.OID).QueryRow(func(r pgx.Row) error { return r.Scan(&ins1, &upd1) })
	for _, q := range mergeJoinsOn {
		b.Queue(q)
	}
	b.Queue("RELEASE SAVEPOINT idem_merge")
	if err := send(ctx, tx, b); err != nil {
		return res, err
	}
	res.Inserted, res.Updated = ins1-ins0, upd1-upd0
	if res.Inserted+res.Updated != total {
		// The statistics do not add up (track_counts off, a trigger writing
		// the target): the total is exact, the rest is counted as updated.
		res.Inserted = min(max(res.Inserted, 0), total)
		res.Updated = total - res.Inserted
	}
	return res, nil
}

// onConflict runs the on_conflict route.
func (s *Merge) onConflict(ctx context.Context, tx pgx.Tx, cols []string, p Params) (Result, error) {
	res := Result{Route: routeOnConflict}
	// Most sources have one row per key: try without the dedupe sort, in a
	// savepoint, and fall back to deduping only when Postgres says a key
	// came twice (21000). One round trip either way for the common case.
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT idem_merge")
	b.Queue(s.statement(cols, false), p.args()).QueryRow(func(r pgx.Row) error { return r.Scan(&res.Inserted, &res.Updated) })
	b.Queue("RELEASE SAVEPOINT idem_merge")
	err := send(ctx, tx, b)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "21000" {
		res.Route = routeOnConflictDeduped
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT idem_merge"); err != nil {
			return res, err
		}
		err = tx.QueryRow(ctx, s.statement(cols, true), p.args()).Scan(&res.Inserted, &res.Updated)
	}
	return res, err
}

func (s *Merge) Check(ctx context.Context, tx pgx.Tx, p Params) error {
	dp, err := described(ctx, tx, s, p)
	if err != nil {
		return err
	}
	cols, err := s.plan(dp)
	if err != nil {
		return err
	}
	if err := s.uniqueKeyErr(ctx, tx, dp); err != nil {
		return err
	}
	return explain(ctx, tx, p, s.mergeStatement(cols), s.statement(cols, false), s.statement(cols, true))
}
