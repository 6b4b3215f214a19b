// Package sqlcheck inspects the source SQL that users write in the idem
// config, without a database: it finds reads of the wall clock (which would
// make a rerun or backfill load a different partition) and the pgx named
// arguments a query uses.
//
// It is a lexer, not a parser: it knows PostgreSQL's comments (-- and nested
// /* */), string constants ('...' with doubled quotes, E'...' with backslash
// escapes, $tag$...$tag$, B'...', X'...', N'...', U&'...') and "quoted
// identifiers", so a word inside any of them is never mistaken for code. It
// never executes, rewrites or rejects SQL; deciding what a finding means is
// the caller's job.
package sqlcheck

import "strings"

// Finding is one wall-clock read in a piece of SQL.
type Finding struct {
	// Name is the reference as written in the SQL: a keyword such as
	// CURRENT_DATE, a function name followed by "()" such as now() or
	// pg_catalog.now(), or a string constant with its quotes such as 'today'.
	Name string
	// Offset is the byte offset in the SQL where the reference starts.
	Offset int
}

// clockKeywords read the clock without parentheses; SQL gives them an
// optional precision, as in CURRENT_TIMESTAMP(3).
var clockKeywords = map[string]bool{
	"current_date":      true,
	"current_time":      true,
	"current_timestamp": true,
	"localtime":         true,
	"localtimestamp":    true,
}

// clockFunctions are the built-in functions that return the current time.
var clockFunctions = map[string]bool{
	"now":                   true,
	"clock_timestamp":       true,
	"statement_timestamp":   true,
	"transaction_timestamp": true,
	"timeofday":             true,
}

// clockLiterals are the special date/time input strings that Postgres
// resolves against the clock when it reads them as a date or timestamp.
var clockLiterals = map[string]bool{
	"now":       true,
	"today":     true,
	"tomorrow":  true,
	"yesterday": true,
}

// WallClock lists every read of the wall clock in sql, in order of offset:
//
//   - the keywords CURRENT_DATE, CURRENT_TIME, CURRENT_TIMESTAMP, LOCALTIME and
//     LOCALTIMESTAMP, with or without a precision, in any case, unless they
//     follow a dot or AS (then they name a column, not the clock);
//   - calls of now(), clock_timestamp(), statement_timestamp(),
//     transaction_timestamp() and timeofday(), unqualified or qualified by a
//     schema (pg_catalog.now()), and also when the name is quoted ("now"());
//   - string constants whose whole content, ignoring case and surrounding
//     white space, is now, today, tomorrow or yesterday, wherever they stand:
//     Postgres reads such an untyped constant as the clock as soon as the
//     context makes it a date or timestamp, which a lexer cannot see, so
//     'now', timestamp 'now' and 'now'::date are all findings.
//
// A column named now_ts, a quoted column "now", x.now_date, pg_sleep(1), and
// any of these words inside comments or longer strings are not findings.
func WallClock(sql string) []Finding {
	toks := lex(sql)
	var out []Finding
	for i, t := range toks {
		switch t.kind {
		case kindWord:
			lower := strings.ToLower(t.value)
			if clockKeywords[lower] && !isLabel(toks, i) {
				out = append(out, Finding{Name: t.value, Offset: t.start})
			} else if clockFunctions[lower] && isCall(toks, i) {
				out = append(out, qualifiedCall(sql, toks, i))
			}
		case kindQuoted:
			// A quoted name is case-sensitive: only "now"() is the function.
			if clockFunctions[t.value] && isCall(toks, i) {
				out = append(out, qualifiedCall(sql, toks, i))
			}
		case kindString:
			if clockLiterals[strings.ToLower(strings.Trim(t.value, " \t\n\r\f\v"))] {
				out = append(out, Finding{Name: sql[t.start:t.end], Offset: t.start})
			}
		}
	}
	return out
}

// isLabel reports whether the keyword at i is used as a column label (t.current_date,
// AS current_date) rather than read.
func isLabel(toks []token, i int) bool {
	if i == 0 {
		return false
	}
	prev := toks[i-1]
	return prev.kind == kindPunct && prev.value == "." ||
		prev.kind == kindWord && strings.EqualFold(prev.value, "as")
}

// isCall reports whether the name at i is followed by an opening parenthesis.
func isCall(toks []token, i int) bool {
	return i+1 < len(toks) && toks[i+1].kind == kindPunct && toks[i+1].value == "("
}

// qualifiedCall builds the finding for the function name at i, walking back
// over schema (and database) qualifiers.
func qualifiedCall(sql string, toks []token, i int) Finding {
	start := i
	for start >= 2 && start > i-4 &&
		toks[start-1].kind == kindPunct && toks[start-1].value == "." &&
		(toks[start-2].kind == kindWord || toks[start-2].kind == kindQuoted) {
		start -= 2
	}
	parts := make([]string, 0, (i-start)/2+1)
	for j := start; j <= i; j += 2 {
		parts = append(parts, sql[toks[j].start:toks[j].end])
	}
	return Finding{Name: strings.Join(parts, ".") + "()", Offset: toks[start].start}
}

// Params lists the distinct pgx named arguments (@name, where name matches
// [a-zA-Z_][a-zA-Z0-9_]*) used in sql outside strings and comments, in order
// of first use.
//
// @ is also the absolute-value operator and part of the jsonb operators @>
// and <@, so an @ counts only when a letter or _ follows it immediately and it
// does not directly follow an identifier character or <. pgx itself rewrites
// every @name outside strings and comments, so x<@tags would be rewritten by
// pgx but is not listed here; write x <@ tags with a space.
func Params(sql string) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range lex(sql) {
		if t.kind == kindNamedArg && !seen[t.value] {
			seen[t.value] = true
			out = append(out, t.value)
		}
	}
	return out
}

// ReplaceParam returns sql with every use of the named argument @name that
// Params sees (outside strings and comments) replaced by expr, and how many
// it replaced. A caller that must be sure no other @name remains for pgx
// to rewrite compares that count with the occurrences of "@name" in sql.
func ReplaceParam(sql, name, expr string) (string, int) {
	var b strings.Builder
	n, last := 0, 0
	for _, t := range lex(sql) {
		if t.kind != kindNamedArg || t.value != name {
			continue
		}
		b.WriteString(sql[last:t.start])
		b.WriteString(expr)
		last = t.end
		n++
	}
	b.WriteString(sql[last:])
	return b.String(), n
}
