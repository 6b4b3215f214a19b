package results

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends r's JSON to b: byte for byte what encoding/json
// writes for it (the same field order, omissions and escaping), without
// its reflection. Every load writes one or two result bodies, and
// json.Marshal of them was a twentieth of idem serve's CPU.
func (r *Result) AppendJSON(b []byte) []byte {
	b = append(b, `{"pipeline":`...)
	b = appendString(b, r.Pipeline)
	b = append(b, `,"dataset":`...)
	b = appendString(b, r.Dataset)
	b = append(b, `,"partition":`...)
	b = appendString(b, r.Partition)
	b = append(b, `,"run_id":`...)
	b = appendString(b, r.RunID)
	b = append(b, `,"status":`...)
	b = appendString(b, r.Status)
	if r.Rows != nil {
		b = append(b, `,"rows":{"inserted":`...)
		b = strconv.AppendInt(b, r.Rows.Inserted, 10)
		b = append(b, `,"updated":`...)
		b = strconv.AppendInt(b, r.Rows.Updated, 10)
		b = append(b, `,"deleted":`...)
		b = strconv.AppendInt(b, r.Rows.Deleted, 10)
		b = append(b, '}')
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	if r.ErrorKind != "" {
		b = append(b, `,"error_kind":`...)
		b = appendString(b, r.ErrorKind)
	}
	if r.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, r.Error)
	}
	if len(r.FailedChecks) > 0 {
		b = append(b, `,"failed_checks":[`...)
		for i, c := range r.FailedChecks {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, c)
		}
		b = append(b, ']')
	}
	b = append(b, `,"stream":`...)
	b = appendString(b, r.Stream)
	b = append(b, `,"stream_seq":`...)
	b = strconv.AppendUint(b, r.StreamSeq, 10)
	if r.MsgID != "" {
		b = append(b, `,"msg_id":`...)
		b = appendString(b, r.MsgID)
	}
	if r.AuditID != 0 {
		b = append(b, `,"audit_id":`...)
		b = strconv.AppendInt(b, r.AuditID, 10)
	}
	if r.LoadedBy != 0 {
		b = append(b, `,"loaded_by_audit_id":`...)
		b = strconv.AppendInt(b, r.LoadedBy, 10)
	}
	if r.DeadLetterSeq != 0 {
		b = append(b, `,"dead_letter_seq":`...)
		b = strconv.AppendUint(b, r.DeadLetterSeq, 10)
	}
	if r.PublishedAt != nil {
		b = append(b, `,"published_at":`...)
		b = appendTime(b, *r.PublishedAt)
	}
	b = append(b, `,"finished_at":`...)
	b = appendTime(b, r.FinishedAt)
	b = append(b, `,"seconds":`...)
	b = appendFloat(b, r.Seconds)
	return append(b, '}')
}

// appendTime is time.Time's MarshalJSON.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendFloat is encoding/json's float64: shortest form, 'e' outside
// [1e-6, 1e21), its exponent without a leading zero. (NaN and ±Inf, which
// encoding/json refuses, never reach a result: Seconds is a difference of
// two times.)
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		f = 0
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendString is encoding/json's string: quotes, backslashes and control
// characters escaped, <, > and & as \u00XX (its HTML-safe default), U+2028
// and U+2029 escaped, invalid UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
