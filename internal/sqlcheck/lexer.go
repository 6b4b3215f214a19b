package sqlcheck

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// kind is the class of a lexical token. Comments and white space produce no
// token at all, so the checks above the lexer never see them.
type kind uint8

const (
	kindWord       kind = iota // unquoted identifier or keyword
	kindQuoted                 // "quoted identifier" (also U&"...")
	kindString                 // any string constant: '...', E'...', $tag$...$tag$, B'', X'', N'', U&''
	kindNamedArg               // pgx named argument @name
	kindPositional             // $1
	kindNumber                 // numeric constant
	kindPunct                  // any other single byte: operators, parens, dots, commas
)

// token is one lexical token. start and end are byte offsets into the source;
// value is the decoded text for strings and quoted identifiers, the name for a
// named argument, and the raw text otherwise.
type token struct {
	kind       kind
	start, end int
	value      string
}

// lex splits sql into tokens the way the PostgreSQL scanner does (with
// standard_conforming_strings on, the default since 9.1), closely enough to
// tell code from comments and literals. It never fails: unterminated comments,
// strings and quoted identifiers run to the end of the input, which is what
// Postgres would reject anyway.
func lex(sql string) []token {
	l := lexer{src: sql}
	l.run()
	return l.toks
}

type lexer struct {
	src  string
	pos  int
	toks []token
}

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isIdentCont(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9' || c == '$'
}

func isASCIILetter(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func (l *lexer) emit(k kind, start int, value string) {
	l.toks = append(l.toks, token{kind: k, start: start, end: l.pos, value: value})
}

func (l *lexer) peek(off int) byte {
	if l.pos+off < len(l.src) {
		return l.src[l.pos+off]
	}
	return 0
}

func (l *lexer) run() {
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		start := l.pos
		switch {
		case isSpace(c):
			l.pos++
		case c == '-' && l.peek(1) == '-':
			l.skipLineComment()
		case c == '/' && l.peek(1) == '*':
			l.skipBlockComment()
		case c == '\'':
			l.pos++
			l.emit(kindString, start, l.stringBody(false))
		case c == '"':
			l.pos++
			l.emit(kindQuoted, start, l.quotedBody())
		case c == '$':
			l.dollar()
		case c == '@':
			l.at()
		case isDigit(c) || c == '.' && isDigit(l.peek(1)):
			l.number()
		case isIdentStart(c):
			l.word()
		default:
			l.pos++
			l.emit(kindPunct, start, l.src[start:l.pos])
		}
	}
}

func (l *lexer) skipLineComment() {
	for l.pos < len(l.src) && l.src[l.pos] != '\n' && l.src[l.pos] != '\r' {
		l.pos++
	}
}

// skipBlockComment skips a /* */ comment; unlike C, Postgres nests them.
func (l *lexer) skipBlockComment() {
	depth := 0
	for l.pos < len(l.src) {
		switch {
		case l.src[l.pos] == '/' && l.peek(1) == '*':
			depth++
			l.pos += 2
		case l.src[l.pos] == '*' && l.peek(1) == '/':
			depth--
			l.pos += 2
			if depth == 0 {
				return
			}
		default:
			l.pos++
		}
	}
}

// word lexes an identifier or keyword, or a string constant with a prefix:
// E'...' (backslash escapes), B'...' and X'...' (bit strings), N'...'
// (national), U&'...' (Unicode escapes) and U&"..." (quoted identifier with
// Unicode escapes).
func (l *lexer) word() {
	start := l.pos
	for l.pos < len(l.src) && isIdentCont(l.src[l.pos]) {
		l.pos++
	}
	w := l.src[start:l.pos]
	switch {
	case len(w) == 1 && l.peek(0) == '\'' && (w == "e" || w == "E"):
		l.pos++
		l.emit(kindString, start, l.stringBody(true))
	case len(w) == 1 && l.peek(0) == '\'' && strings.Contains("bBxXnN", w):
		l.pos++
		l.emit(kindString, start, l.stringBody(false))
	case (w == "u" || w == "U") && l.peek(0) == '&' && (l.peek(1) == '\'' || l.peek(1) == '"'):
		quote := l.peek(1)
		l.pos += 2
		if quote == '\'' {
			l.emit(kindString, start, decodeUnicodeEscapes(l.stringBody(false)))
		} else {
			l.emit(kindQuoted, start, decodeUnicodeEscapes(l.quotedBody()))
		}
	default:
		l.emit(kindWord, start, w)
	}
}

// stringBody lexes the rest of a string constant whose opening quote has been
// consumed and returns its decoded value. Two constants separated only by white
// space that includes a newline are one constant in Postgres; so they are here.
func (l *lexer) stringBody(escapes bool) string {
	var b strings.Builder
	for {
		l.stringPart(&b, escapes)
		if !l.continuation() {
			return b.String()
		}
	}
}

func (l *lexer) stringPart(b *strings.Builder, escapes bool) {
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\'' && l.peek(1) == '\'':
			b.WriteByte('\'')
			l.pos += 2
		case c == '\'':
			l.pos++
			return
		case c == '\\' && escapes:
			l.pos++
			l.escape(b)
		default:
			b.WriteByte(c)
			l.pos++
		}
	}
}

// continuation reports whether the string just closed continues after white
// space holding a newline (and possibly -- comments), and if so moves past the
// next opening quote.
func (l *lexer) continuation() bool {
	i, newline := l.pos, false
	for i < len(l.src) {
		c := l.src[i]
		switch {
		case c == '\n' || c == '\r':
			newline = true
			i++
		case isSpace(c):
			i++
		case c == '-' && i+1 < len(l.src) && l.src[i+1] == '-' && newline:
			for i < len(l.src) && l.src[i] != '\n' && l.src[i] != '\r' {
				i++
			}
		case c == '\'' && newline:
			l.pos = i + 1
			return true
		default:
			return false
		}
	}
	return false
}

// escape decodes one backslash escape of an E'...' string; the backslash has been
// consumed.
func (l *lexer) escape(b *strings.Builder) {
	if l.pos >= len(l.src) {
		return
	}
	c := l.src[l.pos]
	l.pos++
	switch c {
	case 'b':
		b.WriteByte('\b')
	case 'f':
		b.WriteByte('\f')
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'x':
		if v, ok := l.hexRun(2); ok {
			b.WriteByte(byte(v))
		} else {
			b.WriteByte('x')
		}
	case 'u':
		l.unicode(b, 4, 'u')
	case 'U':
		l.unicode(b, 8, 'U')
	default:
		if c >= '0' && c <= '7' {
			v := int(c - '0')
			for n := 1; n < 3 && l.pos < len(l.src) && l.src[l.pos] >= '0' && l.src[l.pos] <= '7'; n++ {
				v = v*8 + int(l.src[l.pos]-'0')
				l.pos++
			}
			b.WriteByte(byte(v))
			return
		}
		b.WriteByte(c)
	}
}

func (l *lexer) unicode(b *strings.Builder, n int, letter byte) {
	start := l.pos
	if l.pos+n <= len(l.src) {
		if v, err := strconv.ParseUint(l.src[l.pos:l.pos+n], 16, 32); err == nil {
			l.pos += n
			b.WriteRune(rune(v))
			return
		}
	}
	l.pos = start
	b.WriteByte(letter)
}

// hexRun reads 1 to max hex digits.
func (l *lexer) hexRun(max int) (int, bool) {
	v, n := 0, 0
	for n < max && l.pos < len(l.src) {
		d, ok := hexVal(l.src[l.pos])
		if !ok {
			break
		}
		v = v*16 + d
		n++
		l.pos++
	}
	return v, n > 0
}

func hexVal(c byte) (int, bool) {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0'), true
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10, true
	}
	return 0, false
}

// decodeUnicodeEscapes decodes the \XXXX and \+XXXXXX escapes of U&'...' and
// U&"..." with the default escape character (a UESCAPE clause is not followed).
func decodeUnicodeEscapes(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case i+1 < len(s) && s[i+1] == '\\':
			b.WriteByte('\\')
			i++
		case i+8 <= len(s) && s[i+1] == '+':
			if v, err := strconv.ParseUint(s[i+2:i+8], 16, 32); err == nil && utf8.ValidRune(rune(v)) {
				b.WriteRune(rune(v))
				i += 7
				continue
			}
			b.WriteByte('\\')
		case i+5 <= len(s):
			if v, err := strconv.ParseUint(s[i+1:i+5], 16, 32); err == nil {
				b.WriteRune(rune(v))
				i += 4
				continue
			}
			b.WriteByte('\\')
		default:
			b.WriteByte('\\')
		}
	}
	return b.String()
}

// quotedBody lexes the rest of a quoted identifier ("" escapes a quote).
func (l *lexer) quotedBody() string {
	var b strings.Builder
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '"' && l.peek(1) == '"':
			b.WriteByte('"')
			l.pos += 2
		case c == '"':
			l.pos++
			return b.String()
		default:
			b.WriteByte(c)
			l.pos++
		}
	}
	return b.String()
}

// dollar lexes what starts with $: a positional parameter $1, a dollar-quoted
// string $tag$...$tag$ (the tag is an identifier without $, possibly empty), or
// a lone $.
func (l *lexer) dollar() {
	start := l.pos
	l.pos++
	if isDigit(l.peek(0)) {
		for l.pos < len(l.src) && isDigit(l.src[l.pos]) {
			l.pos++
		}
		l.emit(kindPositional, start, l.src[start:l.pos])
		return
	}
	i := l.pos
	for i < len(l.src) && l.src[i] != '$' && (isIdentStart(l.src[i]) || i > l.pos && isDigit(l.src[i])) {
		i++
	}
	if i >= len(l.src) || l.src[i] != '$' {
		l.emit(kindPunct, start, "$")
		return
	}
	delim := l.src[start : i+1]
	body := i + 1
	end := strings.Index(l.src[body:], delim)
	if end < 0 {
		l.pos = len(l.src)
		l.emit(kindString, start, l.src[body:])
		return
	}
	l.pos = body + end + len(delim)
	l.emit(kindString, start, l.src[body:body+end])
}

// at lexes @: a pgx named argument when a letter or _ follows and the @ does
// not continue an identifier or the <@ operator; otherwise the @ operator (as
// in @-5, @>, <@, @@).
func (l *lexer) at() {
	start := l.pos
	l.pos++
	next := l.peek(0)
	prevOK := start == 0 || !(isIdentCont(l.src[start-1]) || l.src[start-1] == '<')
	if !prevOK || !(isASCIILetter(next) || next == '_') {
		l.emit(kindPunct, start, "@")
		return
	}
	for l.pos < len(l.src) && (isASCIILetter(l.src[l.pos]) || isDigit(l.src[l.pos]) || l.src[l.pos] == '_') {
		l.pos++
	}
	l.emit(kindNamedArg, start, l.src[start+1:l.pos])
}

// number lexes a numeric constant loosely: digits, one decimal point, an
// exponent, and trailing letters and underscores (0x1F, 1_000, 1e5).
func (l *lexer) number() {
	start := l.pos
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case isDigit(c) || isASCIILetter(c) || c == '_':
			l.pos++
		case c == '.' && l.peek(1) != '.':
			l.pos++
		case (c == '+' || c == '-') && (l.src[l.pos-1] == 'e' || l.src[l.pos-1] == 'E') && isDigit(l.peek(1)):
			l.pos++
		default:
			l.emit(kindNumber, start, l.src[start:l.pos])
			return
		}
	}
	l.emit(kindNumber, start, l.src[start:l.pos])
}
