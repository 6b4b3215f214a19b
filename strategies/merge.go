package strategies

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Merge upserts the source on the natural key with INSERT ... ON CONFLICT.
//
//   - Unchanged rows are not touched: rows the target already holds with
//     the same values (or in a newer version) are filtered out before the
//     INSERT by one index probe each, so ON CONFLICT never even locks them;
//     the update's WHERE repeats the comparison for rows changed concurrently.
//   - With a version column, a row is only updated by an equal or newer
//     version: a late replay of old data never wins.
//   - Duplicate keys in the source (Postgres raises 21000) are reduced to one
//     row per key: the newest version, then a deterministic tie-break on the
//     row's text, so every rerun picks the same row. That costs a sort of the
//     source, so it only happens after a first attempt, in a savepoint, hit
//     21000.
//
// ON CONFLICT rather than MERGE: PostgreSQL's MERGE raises a unique violation
// when a concurrent transaction inserts the same key, and its default plan
// hash-joins the whole target (see docs/BENCHMARKS.md). It needs a unique
// index or primary key on exactly the key columns.
type Merge struct{ spec Spec }

var _ Strategy = (*Merge)(nil)

func (*Merge) Name() string                          { return "merge" }
func (*Merge) Prepare(context.Context, pgx.Tx) error { return nil }

func (s *Merge) Describe(b *pgx.Batch, p Params) *Plan { return describe(b, s.spec, p, false) }

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

func (s *Merge) Execute(ctx context.Context, tx pgx.Tx, dp *Plan, p Params) (Result, error) {
	cols, err := s.plan(dp)
	if err != nil {
		return Result{}, err
	}
	res := Result{Route: "on_conflict"}
	// Most sources have one row per key: try without the dedupe sort, in a
	// savepoint, and fall back to deduping only when Postgres says a key
	// came twice (21000). One round trip either way for the common case.
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT idem_merge")
	b.Queue(s.statement(cols, false), p.args()).QueryRow(func(r pgx.Row) error { return r.Scan(&res.Inserted, &res.Updated) })
	b.Queue("RELEASE SAVEPOINT idem_merge")
	err = send(ctx, tx, b)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "21000" {
		res.Route = "on_conflict_deduped"
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT idem_merge"); err != nil {
			return res, err
		}
		err = tx.QueryRow(ctx, s.statement(cols, true), p.args()).Scan(&res.Inserted, &res.Updated)
	}
	if err != nil {
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
	return explain(ctx, tx, p, s.statement(cols, false), s.statement(cols, true))
}
