package sqlcheck

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Literal quotes v as a SQL string constant, for a statement that takes no
// bind parameters (COPY): in a session with standard_conforming_strings on,
// a backslash is an ordinary character and only a quote could end the
// constant. A value made only of letters, digits, space and - : . _ , + /
// is written plainly ('2026-11-28'); any other value is written as a
// Unicode-escape constant (U&'O\0027Brien\003b'), in which every other
// character, the quote first, is a \XXXX or \+XXXXXX escape. Between its
// quotes such a literal holds no quote, dollar, star, semicolon or line
// break, so it cannot end a string, a quoted name, a dollar quote, a
// comment or a statement. The constant is untyped, like a bound parameter.
// A value holding NUL (which no PostgreSQL text can hold) or invalid UTF-8
// is refused.
func Literal(v string) (string, error) {
	if strings.IndexByte(v, 0) >= 0 {
		return "", ErrLiteralNUL
	}
	if !utf8.ValidString(v) {
		return "", ErrLiteralUTF8
	}
	plain := true
	for i := 0; i < len(v); i++ {
		if !plainByte(v[i]) {
			plain = false
			break
		}
	}
	if plain {
		return "'" + v + "'", nil
	}
	var b strings.Builder
	b.WriteString("U&'")
	for _, r := range v {
		switch {
		case r < utf8.RuneSelf && plainByte(byte(r)):
			b.WriteRune(r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\%04x`, r)
		default:
			fmt.Fprintf(&b, `\+%06x`, r)
		}
	}
	b.WriteByte('\'')
	return b.String(), nil
}

// Why Literal refuses a value.
var (
	ErrLiteralNUL  = errors.New("holds a NUL character, which PostgreSQL text cannot hold")
	ErrLiteralUTF8 = errors.New("is not valid UTF-8")
)

// plainByte reports the characters a literal holds as themselves: none of
// them starts or ends a string, a quoted name, a dollar quote, a comment or
// a statement, nor is the escape character of U&'...'.
func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte(" -:._,+/", c) >= 0
}
