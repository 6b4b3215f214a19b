package pgsource

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/internal/sqlcheck"
)

// COPY (query) TO STDOUT takes no bind parameters, so @partition and @run_id
// become string literals in the query's text. Three things make that safe:
//
//  1. Where: an @name is replaced exactly where pgx's own named-argument
//     lexer would put $1 if the query ran with pgx.NamedArgs, as the SQL
//     source in the target database does; pgx skips strings ('...', E'...',
//     $tag$...$tag$), quoted names and comments (nested ones too).
//     As a cross-check, Validate refuses SQL in which internal/sqlcheck's
//     lexer (the one the wall-clock and one-read checks use) finds a
//     different set of argument names, as in x<@partition, which pgx binds
//     and sqlcheck reads as the <@ operator.
//  2. What: the value becomes one string constant. The source session runs
//     with standard_conforming_strings on (SET LOCAL before the query), so
//     a backslash is an ordinary character and only a quote could end the
//     constant. A value made only of letters, digits, space and - : . _ , + /
//     is written plainly ('2026-11-28'); any other value is written as a
//     Unicode-escape constant (U&'O\0027Brien\003b'), in which every other
//     character, the quote first, is a \XXXX or \+XXXXXX escape. Between
//     its quotes such a literal holds no quote, dollar, star, semicolon or
//     line break: were step 1 ever wrong about a dollar quote or a comment,
//     the value still could not end one.
//  3. Type: the constant is untyped, like a bound parameter: PostgreSQL
//     types it from context (event_date = '2026-11-28' compares dates), and
//     a value that does not fit fails as a data exception, never as SQL.
//
// A value holding NUL (which no PostgreSQL text can hold) or invalid UTF-8 is
// refused.

// bind returns sql with every @partition and @run_id replaced by p's values
// as string literals.
func bind(sql string, p Params) (string, error) {
	out, _, err := substitute(sql, func(name string) (string, error) {
		switch name {
		case "partition":
			return literal("partition", p.Partition)
		case "run_id":
			return literal("run_id", p.RunID)
		}
		return "", &SpecError{Field: "sql", Problem: fmt.Sprintf("uses @%s, which idem does not bind; idem binds only @partition and @run_id", name), reason: ReasonSourceConfig}
	})
	return out, err
}

// pgxParams lists the distinct named arguments pgx finds in sql, in order of
// first use.
func pgxParams(sql string) []string {
	_, names, _ := substitute(sql, func(string) (string, error) { return "", nil })
	return names
}

// substitute replaces each named argument that pgx's lexer finds in sql with
// value(name). pgx's rewrite of sql differs from sql only where it put $n
// for @name, and @ never equals $, so walking both strings side by side finds
// each replaced @name exactly.
func substitute(sql string, value func(name string) (string, error)) (string, []string, error) {
	rewritten, _, err := pgx.NamedArgs{}.RewriteQuery(context.Background(), nil, sql, nil)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	var names []string
	seen := map[string]bool{}
	i, j := 0, 0
	for i < len(sql) {
		if j < len(rewritten) && sql[i] == rewritten[j] {
			b.WriteByte(sql[i])
			i, j = i+1, j+1
			continue
		}
		if sql[i] != '@' || j >= len(rewritten) || rewritten[j] != '$' {
			// pgx stops at invalid UTF-8; Validate refuses such SQL.
			return "", nil, fmt.Errorf("pgsource: cannot place the arguments of the SQL at byte %d", i)
		}
		end := i + 1
		for end < len(sql) && isNameByte(sql[end]) {
			end++
		}
		name := sql[i+1 : end]
		for j++; j < len(rewritten) && rewritten[j] >= '0' && rewritten[j] <= '9'; j++ {
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
		v, err := value(name)
		if err != nil {
			return "", nil, err
		}
		b.WriteString(v)
		i = end
	}
	return b.String(), names, nil
}

// isNameByte is pgx's rule for the characters after @ in a named argument.
func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// PartitionError refuses a partition or run_id value that no PostgreSQL
// text can hold. The event is at fault: retrying cannot help.
type PartitionError struct {
	Field   string // partition or run_id
	Problem string
}

func (e *PartitionError) Error() string {
	return "pgsource: the " + e.Field + " value " + e.Problem
}

// Fatal reports true.
func (e *PartitionError) Fatal() bool { return true }

// FatalReason is ReasonInvalidPartition.
func (e *PartitionError) FatalReason() string { return ReasonInvalidPartition }

// literal quotes v as a SQL string constant for a session with
// standard_conforming_strings on (sqlcheck.Literal, and the comment at the
// top of this file).
func literal(field, v string) (string, error) {
	l, err := sqlcheck.Literal(v)
	if err != nil {
		return "", &PartitionError{Field: field, Problem: err.Error()}
	}
	return l, nil
}
