package deadletter

import (
	"errors"
	"strings"
)

// A fatal error's reason is a short machine word (schema_mismatch,
// check_failed, invalid_event, ...) that its text starts with: "<reason>: ...".
// New dead letters also carry it in Idem-Error-Reason, so reading it back
// does not depend on how an error words its text; dead letters stored before
// that header existed are read by their text.

// IsReason reports whether s has the shape of a reason word: lower-case
// letters and underscores.
func IsReason(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if c := s[i]; c != '_' && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}

// errReason is the reason the outermost fatal error of err's chain names,
// or "" when it names none. The outermost decides, as it decided the fate:
// a refusal that wraps a fatal error of another reason is the refusal.
// Fatal errors that expose no reason (internal/checks' refusals) leave the
// reader to their text.
func errReason(err error) string {
	var fatal interface{ Fatal() bool }
	if !errors.As(err, &fatal) || !fatal.Fatal() {
		return ""
	}
	named, ok := fatal.(interface{ FatalReason() string })
	if !ok || !IsReason(named.FatalReason()) {
		return ""
	}
	return named.FatalReason()
}

// letterReason is a stored dead letter's reason: its Idem-Error-Reason, or
// else, for a fatal one, the leading word of its error text. The text of an
// exhausted or crashed dead letter is a transient error's, whose leading
// word names no reason.
func letterReason(kind Kind, header, errText string) string {
	if IsReason(header) {
		return header
	}
	if kind != KindFatal {
		return ""
	}
	word, _, ok := strings.Cut(errText, ":")
	if !ok || !IsReason(word) {
		return ""
	}
	return word
}
