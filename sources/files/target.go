package files

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Column is one column a load writes: its name and its PostgreSQL type as
// information_schema.columns.data_type or format_type() spell it
// ("bigint", "timestamp with time zone", "numeric(12,2)", "int8").
type Column struct {
	Name string
	Type string
}

// Target is the table a file loads into and the columns it writes.
type Target struct {
	// Table is the table COPY writes, quoted here with Sanitize.
	Table pgx.Identifier
	// Columns are the columns the load writes, each from the file or from
	// Fill; a column the load should leave to its default is not listed.
	Columns []Column
	// Fill gives columns the files lack a constant value, in the text form
	// PostgreSQL reads for the column's type: the partition key, the run
	// id. A column the file has is read from the file, not filled.
	Fill map[string]string
	// Where, when set, is a condition COPY checks on each row (COPY …
	// WHERE), written by the caller as SQL: its names quoted, its values
	// literals (COPY takes no bind parameters).
	Where string
}

// Validate checks t on its own.
func (t Target) Validate() error {
	var errs []error
	if len(t.Table) == 0 || slicesContainsEmpty(t.Table) {
		errs = append(errs, errors.New("target.table: missing or empty part"))
	}
	if len(t.Columns) == 0 {
		errs = append(errs, errors.New("target.columns: none; list the columns the load writes"))
	}
	seen := map[string]bool{}
	for _, c := range t.Columns {
		switch {
		case c.Name == "":
			errs = append(errs, errors.New("target.columns: a column has no name"))
		case seen[c.Name]:
			errs = append(errs, fmt.Errorf("target.columns: %q appears twice", c.Name))
		}
		seen[c.Name] = true
	}
	for name := range t.Fill {
		if !seen[name] {
			errs = append(errs, fmt.Errorf("target.fill: %q is not one of target.columns", name))
		}
	}
	return errors.Join(errs...)
}

func slicesContainsEmpty(id pgx.Identifier) bool {
	for _, s := range id {
		if s == "" {
			return true
		}
	}
	return false
}

// index returns the position of each target column by name.
func (t Target) index() map[string]int {
	m := make(map[string]int, len(t.Columns))
	for i, c := range t.Columns {
		m[c.Name] = i
	}
	return m
}

// closest is a target column equal to name but for case, for a hint.
func (t Target) closest(name string) string {
	for _, c := range t.Columns {
		if strings.EqualFold(c.Name, name) {
			return c.Name
		}
	}
	return ""
}

// copySQL is the COPY statement into t for cols, in that order.
func copySQL(t Target, cols []string, format string) string {
	var b strings.Builder
	b.WriteString("COPY ")
	b.WriteString(t.Table.Sanitize())
	b.WriteString(" (")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{c}.Sanitize())
	}
	b.WriteString(") FROM STDIN (FORMAT ")
	b.WriteString(format)
	b.WriteString(", ENCODING 'UTF8')")
	if t.Where != "" {
		b.WriteString(" WHERE ")
		b.WriteString(t.Where)
	}
	return b.String()
}

// family is a PostgreSQL type as the Parquet check sees it.
type family int

const (
	famOther family = iota // enums, domains, arrays, ranges, …: PostgreSQL parses the text
	famInt2
	famInt4
	famInt8
	famNumeric
	famFloat4
	famFloat8
	famText
	famBool
	famDate
	famTimestamp
	famTimestamptz
	famTime
	famUUID
	famJSON
	famBytea
)

var typmod = regexp.MustCompile(`\s*\(\s*\d+\s*(,\s*\d+\s*)?\)`)

// familyOf reads a type name as information_schema or format_type spell it.
func familyOf(typ string) family {
	t := strings.ToLower(strings.TrimSpace(typ))
	t = typmod.ReplaceAllString(t, "")
	t = strings.Join(strings.Fields(t), " ")
	if strings.HasSuffix(t, "[]") {
		return famOther
	}
	switch t {
	case "smallint", "int2":
		return famInt2
	case "integer", "int", "int4":
		return famInt4
	case "bigint", "int8":
		return famInt8
	case "numeric", "decimal":
		return famNumeric
	case "real", "float4":
		return famFloat4
	case "double precision", "float8", "float":
		return famFloat8
	case "text", "character varying", "varchar", "character", "char", "bpchar", "name", "citext":
		return famText
	case "boolean", "bool":
		return famBool
	case "date":
		return famDate
	case "timestamp", "timestamp without time zone":
		return famTimestamp
	case "timestamptz", "timestamp with time zone":
		return famTimestamptz
	case "time", "time without time zone":
		return famTime
	case "uuid":
		return famUUID
	case "json", "jsonb":
		return famJSON
	case "bytea":
		return famBytea
	}
	return famOther
}

func (f family) integer() bool { return f == famInt2 || f == famInt4 || f == famInt8 }
