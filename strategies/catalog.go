package strategies

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// column of a target table, as the catalog describes it.
type column struct {
	Name      string
	Type      string // format_type, e.g. "numeric(12,2)"
	NotNull   bool
	Generated bool
}

type table struct {
	Table
	OID     uint32
	Kind    string // pg_class.relkind: r plain, p partitioned
	Columns []column
}

func (t *table) column(name string) (column, bool) {
	for _, c := range t.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return column{}, false
}

// describeTable reads the target's columns. A missing table is a fatal error
// that names it.
func describeTable(ctx context.Context, tx pgx.Tx, t Table) (*table, error) {
	out := &table{Table: t}
	var oid *uint32
	var kind *string
	err := tx.QueryRow(ctx, "SELECT to_regclass($1)::oid, (SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1))", t.ident()).
		Scan(&oid, &kind)
	if err != nil {
		return nil, err
	}
	if oid == nil {
		return nil, &Error{Reason: "undefined_object", Msg: fmt.Sprintf("table %s does not exist; create it or fix target in the config", t)}
	}
	out.OID, out.Kind = *oid, *kind
	if out.Kind != "r" && out.Kind != "p" {
		return nil, schemaErr("%s is not a table (relkind %s)", t, out.Kind)
	}
	rows, err := tx.Query(ctx, `
		SELECT attname, format_type(atttypid, atttypmod), attnotnull, attgenerated <> ''
		  FROM pg_attribute
		 WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped
		 ORDER BY attnum`, out.OID)
	if err != nil {
		return nil, err
	}
	out.Columns, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.Name, &c.Type, &c.NotNull, &c.Generated)
		return c, err
	})
	return out, err
}

// sourceColumns runs the source with LIMIT 0 to learn the names of the columns
// it returns, without reading any row.
func sourceColumns(ctx context.Context, tx pgx.Tx, source string, p Params) ([]string, error) {
	rows, err := tx.Query(ctx, "SELECT * FROM ("+source+"\n) AS s LIMIT 0", p.args())
	if err != nil {
		return nil, err
	}
	fields := rows.FieldDescriptions()
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	cols := make([]string, 0, len(fields))
	for _, f := range fields {
		if slices.Contains(cols, f.Name) {
			return nil, schemaErr("the source returns column %q twice; name each column once", f.Name)
		}
		cols = append(cols, f.Name)
	}
	return cols, nil
}

// insertColumns checks that every source column can be written to the target
// and returns them in source order. reserved columns (append_dedupe's
// bookkeeping) may not come from the source.
func insertColumns(t *table, src []string, reserved ...string) ([]string, error) {
	var unknown, generated, clash []string
	for _, c := range src {
		col, ok := t.column(c)
		switch {
		case slices.Contains(reserved, c):
			clash = append(clash, c)
		case !ok:
			unknown = append(unknown, c)
		case col.Generated:
			generated = append(generated, c)
		}
	}
	switch {
	case len(unknown) > 0:
		return nil, schemaErr("the source returns column(s) %s that %s does not have; add them to the table or leave them out of the source", strings.Join(unknown, ", "), t.Table)
	case len(generated) > 0:
		return nil, schemaErr("column(s) %s of %s are generated and cannot be loaded; leave them out of the source", strings.Join(generated, ", "), t.Table)
	case len(clash) > 0:
		return nil, schemaErr("the source returns %s, which idem fills itself; leave it out of the source", strings.Join(clash, ", "))
	}
	var missing []string
	for _, c := range t.Columns {
		if c.NotNull && !c.Generated && !slices.Contains(src, c.Name) && !slices.Contains(reserved, c.Name) {
			missing = append(missing, c.Name)
		}
	}
	_ = missing // NOT NULL columns with defaults are fine; Postgres reports the others precisely (23502).
	return src, nil
}

func requireColumns(t *table, what string, names ...string) error {
	for _, n := range names {
		if _, ok := t.column(n); !ok {
			return schemaErr("%s %q is not a column of %s", what, n, t.Table)
		}
	}
	return nil
}

// hasUniqueIndex reports whether a unique, non-partial, non-deferrable index
// or constraint covers exactly cols: ON CONFLICT needs one as its arbiter, and
// without it a concurrent insert could double a key.
func hasUniqueIndex(ctx context.Context, tx pgx.Tx, t *table, cols []string) (bool, error) {
	rows, err := tx.Query(ctx, `
		SELECT array_agg(a.attname::text ORDER BY a.attname)
		  FROM pg_index i
		  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		 WHERE i.indrelid = $1 AND i.indisunique AND i.indimmediate AND i.indpred IS NULL
		   AND i.indexprs IS NULL
		 GROUP BY i.indexrelid`, t.OID)
	if err != nil {
		return false, err
	}
	sets, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return false, err
	}
	want := slices.Clone(cols)
	sort.Strings(want)
	for _, s := range sets {
		if slices.Equal(s, want) {
			return true, nil
		}
	}
	return false, nil
}
