package strategies

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// What a load produced and what it replaces, for the checks that run on
// them inside the load's transaction. Each is a FROM clause (alias t) that
// binds the same named arguments as the source (Params.NamedArgs).

// ProducedRows: the partition's rows after the load.
func (s *DeleteInsert) ProducedRows() string {
	return "FROM " + s.spec.Target.ident() + " AS t WHERE t." + q(s.spec.PartitionColumn) + " = @partition"
}

// ReplacedRows: the partition's rows before the load.
func (s *DeleteInsert) ReplacedRows() string { return s.ProducedRows() }

// Counts: the INSERT counts the partition's rows after the load (the
// DELETE emptied it; the guard keeps other partitions' rows out), the
// DELETE its rows before, unless a TRUNCATE replaces it.
func (s *DeleteInsert) Counts() (produced, replaced bool) { return true, !s.spec.TruncatePartition }

// ProducedRows: the target's rows of the keys the source holds for the
// partition: the rows the load inserted or updated (a row a newer version
// kept is checked as it stands).
func (s *Merge) ProducedRows() string {
	return "FROM " + s.spec.Target.ident() + " AS t WHERE (" + quoteAll("t.", s.spec.Key) + ") IN (SELECT " +
		quoteAll("src.", s.spec.Key) + " FROM (" + s.spec.Source + "\n) AS src)"
}

// ReplacedRows: the same keys' rows before the load.
func (s *Merge) ReplacedRows() string { return s.ProducedRows() }

// Counts: neither; a key whose newer version the target kept is produced
// but not written, and the MERGE counts no replaced rows.
func (s *Merge) Counts() (produced, replaced bool) { return false, false }

// ProducedRows: the rows this load appended (this run_id, this load's
// sequence value: a forced rerun of the run appends anew).
func (s *AppendDedupe) ProducedRows() string {
	t, rc, lc := s.spec.Target.ident(), q(s.spec.RunIDColumn), q(s.spec.LoadSeqColumn)
	return "FROM " + t + " AS t WHERE t." + rc + " = @run_id::text AND t." + lc + " = (SELECT max(x." + lc + ") FROM " + t +
		" AS x WHERE x." + rc + " = @run_id::text)"
}

// ReplacedRows: the partition's rows in the dedupe view before the load; ""
// without a partition column (the view is not partitioned then).
func (s *AppendDedupe) ReplacedRows() string {
	if s.spec.PartitionColumn == "" || s.spec.View.Name == "" {
		return ""
	}
	return "FROM " + s.spec.View.ident() + " AS t WHERE t." + q(s.spec.PartitionColumn) + " = @partition"
}

// Counts: the INSERT counts the rows this load appended; the view's rows
// before it are counted by a statement.
func (s *AppendDedupe) Counts() (produced, replaced bool) { return true, false }

// NamedArgs are the arguments the source and the scopes bind.
func (p Params) NamedArgs() pgx.NamedArgs { return p.args() }

// Ident quotes a schema-qualified name written schema.table (or a bare
// name) for SQL.
func Ident(name string) string {
	if schema, table, ok := strings.Cut(name, "."); ok {
		return pgx.Identifier{schema, table}.Sanitize()
	}
	return pgx.Identifier{name}.Sanitize()
}
