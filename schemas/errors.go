package schemas

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// InvalidEventError is every rejection by [Decode], [ParsePartition] and
// [PartitionReady.Marshal]. An invalid event never becomes valid by retrying,
// hence Fatal.
type InvalidEventError struct {
	// Field is "body", "subject", "dataset", "partition", "run_id", "force",
	// "attributes", "attributes.<key>", or the name of an unknown field.
	Field string
	// Reason is a sentence saying what is wrong and, where there is one, the fix.
	Reason string

	unknownDataset bool
}

// UnknownDataset reports the rejection of an event that is well formed but
// names a dataset the caller's lookup does not know: a replica whose config
// lacks a dataset another replica has may leave it to that one.
func (e *InvalidEventError) UnknownDataset() bool { return e.unknownDataset }

// Error renders the rejection on one printable line, because it ends up in
// logs and in the Idem-Error header of a dead letter.
func (e *InvalidEventError) Error() string {
	return "invalid event: " + displayField(e.Field) + ": " + e.Reason
}

// Fatal reports that redelivering the same bytes can never succeed.
func (e *InvalidEventError) Fatal() bool { return true }

// FatalReason is the dead letter's Idem-Error-Reason: unknown_dataset for a
// well-formed event naming a dataset nobody runs, invalid_event otherwise.
func (e *InvalidEventError) FatalReason() string {
	if e.unknownDataset {
		return ReasonUnknownDataset
	}
	return ReasonInvalidEvent
}

func invalid(field, reason string) *InvalidEventError {
	return &InvalidEventError{Field: field, Reason: reason}
}

// displayField quotes a field name that came from the input (an unknown field)
// when it is not plain printable text, so Error stays one safe line.
func displayField(f string) string {
	if f != "" && printable(f) {
		return f
	}
	return strconv.QuoteToGraphic(f)
}

// maxQuoted bounds how much of an input value an error message repeats: enough
// to recognise it, not enough to turn a 64 KiB body into a 64 KiB header.
const maxQuoted = 64

// quote renders an input value for an error message: escaped, on one line,
// truncated to maxQuoted runes.
func quote(s string) string {
	return strconv.QuoteToGraphic(truncate(s))
}

// truncate keeps at most maxQuoted runes of s, for field names taken from input.
func truncate(s string) string {
	if utf8.RuneCountInString(s) <= maxQuoted {
		return s
	}
	return string([]rune(s)[:maxQuoted]) + "…"
}

// printable reports whether s is valid UTF-8 made only of printable runes
// (unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the
// ASCII space). Invalid bytes decode as U+FFFD, which is printable, so UTF-8
// validity is checked separately.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}

// firstUnprintable describes the first rune that printable rejects, for a
// Reason that lets a publisher find it.
func firstUnprintable(s string) string {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return "an invalid UTF-8 byte at byte " + strconv.Itoa(i)
			}
		}
		if !unicode.IsPrint(r) {
			return "the non-printable character " + strconv.QuoteRuneToASCII(r) + " at byte " + strconv.Itoa(i)
		}
	}
	return "no non-printable character"
}
