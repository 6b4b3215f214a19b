package deadletter

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Dead-letter headers (docs/SPEC.md, wire contract). The original's headers
// are kept beside them, every value of a repeated key included.
const (
	HeaderError           = "Idem-Error"
	HeaderErrorKind       = "Idem-Error-Kind"   // a Kind
	HeaderErrorReason     = "Idem-Error-Reason" // a fatal error's reason word, when it names one
	HeaderOriginalSubject = "Idem-Original-Subject"
	HeaderOriginalStream  = "Idem-Original-Stream"
	HeaderOriginalSeq     = "Idem-Original-Seq"
	HeaderDeliveries      = "Idem-Deliveries"
	HeaderAttempts        = "Idem-Attempts"  // the loads that ran, when known
	HeaderFailedAt        = "Idem-Failed-At" // RFC 3339, UTC, milliseconds
	HeaderDataset         = "Idem-Dataset"   // when the subject names a valid dataset
	HeaderPartition       = "Idem-Partition" // when the body decoded
	HeaderRunID           = "Idem-Run-Id"    // when the body decoded
	HeaderBodyOmitted     = "Idem-Body-Omitted"
	HeaderHeadersOmitted  = "Idem-Headers-Omitted"
	HeaderOriginalPrefix  = "Idem-Original-" // renames the original's Nats-* and Idem-* headers

	// headerReplayOf and headerReplayCount mark a replayed event. When the
	// replay fails again, the new dead letter keeps them renamed
	// Idem-Original-*, which is how the count survives the round trip.
	headerReplayOf    = "Idem-Replay-Of"
	headerReplayCount = "Idem-Replay-Count"

	// InvalidSubjectToken is the last token of the subject of a dead letter
	// whose subject names no configured dataset: <prefix>._invalid.
	InvalidSubjectToken = "_invalid"
	// MaxHeaderValueBytes bounds every header value idem writes.
	MaxHeaderValueBytes = 1024

	failedAtLayout         = "2006-01-02T15:04:05.000Z07:00"
	maxTermReasonBytes     = 256
	natsHeaderPrefix       = "Nats-"
	idemHeaderPrefix       = "Idem-"
	headerLineOverhead     = len(": \r\n")
	headerPreambleOverhead = len("NATS/1.0\r\n\r\n")
	// maxHeaderBlock is JetStream's limit on a message's header block
	// (64 KiB, error 10097), less room for the headers trimHeaders adds.
	maxHeaderBlock = 65535 - 2048
)

// Kind says why a message was dead-lettered; it is the Idem-Error-Kind header.
type Kind string

const (
	// KindFatal: the error can never go away by retrying (invalid event,
	// schema mismatch, ...), dead-lettered after one delivery.
	KindFatal Kind = "fatal"
	// KindExhausted: a transient error on the last allowed attempt.
	KindExhausted Kind = "exhausted"
	// KindCrashed: the last allowed attempt ended without a verdict, because
	// the handler panicked or the process died; or JetStream's MaxDeliver
	// backstop was reached.
	KindCrashed Kind = "crashed"
)

// Kinds lists every Kind, in the order operators read them.
func Kinds() []Kind { return []Kind{KindFatal, KindExhausted, KindCrashed} }

// MsgID is the Nats-Msg-Id of the dead letter of message seq of stream.
// Every path that dead-letters a message uses it, so JetStream keeps one
// dead letter per message within the dead-letter stream's duplicate window,
// however many replicas or retries publish it.
func MsgID(stream string, seq uint64) string {
	return "dlq:" + stream + ":" + strconv.FormatUint(seq, 10)
}

// Subject routes a dead letter: <prefix>.<dataset> for a configured
// dataset, <prefix>._invalid when dataset is "".
func Subject(prefix, dataset string) string {
	if dataset == "" {
		return prefix + "." + InvalidSubjectToken
	}
	return prefix + "." + dataset
}

// Envelope is what the dead letter of one message says: the original as it
// was delivered, and why it failed.
type Envelope struct {
	Kind       Kind
	Err        error
	Subject    string // the original's
	Stream     string // the original's stream
	Seq        uint64 // the original's stream sequence
	Deliveries uint64
	Attempts   int         // the loads that ran; 0 when unknown
	Header     nats.Header // the original's
	Data       []byte      // the original's body
	Dataset    string      // "" when unknown
	Partition  string      // "" when the body did not decode
	RunID      string      // "" when the body did not decode
	FailedAt   time.Time
}

// Msg builds the dead letter to publish on subject: the original body
// unchanged, the original headers with every value, then the Idem-* headers.
// Original headers that JetStream or idem interpret (Nats-*, Idem-*) are
// kept renamed Idem-Original-<key>. If the original's headers would push the
// header block over JetStream's limit, the largest are dropped and
// Idem-Headers-Omitted says so: such a dead letter could never be stored.
func (e Envelope) Msg(subject string) *nats.Msg {
	h := make(nats.Header, len(e.Header)+13)
	for k, vs := range e.Header {
		key := k
		if hasPrefixFold(k, natsHeaderPrefix) || hasPrefixFold(k, idemHeaderPrefix) {
			key = HeaderOriginalPrefix + k
		}
		h[key] = append(h[key], vs...)
	}
	set := func(k, v string) {
		if v != "" {
			h.Set(k, headerValue(v, MaxHeaderValueBytes))
		}
	}
	set(HeaderError, e.errText())
	set(HeaderErrorKind, string(e.Kind))
	set(HeaderErrorReason, errReason(e.Err))
	set(HeaderOriginalSubject, e.Subject)
	set(HeaderOriginalStream, e.Stream)
	set(HeaderOriginalSeq, strconv.FormatUint(e.Seq, 10))
	set(HeaderDeliveries, strconv.FormatUint(e.Deliveries, 10))
	if e.Attempts > 0 {
		set(HeaderAttempts, strconv.Itoa(e.Attempts))
	}
	set(HeaderFailedAt, e.FailedAt.UTC().Format(failedAtLayout))
	set(HeaderDataset, e.Dataset)
	set(HeaderPartition, e.Partition)
	set(HeaderRunID, e.RunID)
	h.Set(jetstream.MsgIDHeader, MsgID(e.Stream, e.Seq))
	m := &nats.Msg{Subject: subject, Header: h, Data: e.Data}
	e.trimHeaders(m)
	return m
}

// OmitBody leaves m's body out, with Idem-Body-Omitted saying why and where
// the original is (limits retention keeps it in the events stream): a dead
// letter too big to store would never let its original leave the pending set.
func (e Envelope) OmitBody(m *nats.Msg, why string) {
	m.Header.Set(HeaderBodyOmitted, headerValue(fmt.Sprintf("%d bytes omitted: %s; the original is message %d of stream %s",
		len(m.Data), why, e.Seq, e.Stream), MaxHeaderValueBytes))
	m.Data = nil
}

// TermReason is the reason to terminate the original with, once its dead
// letter is stored: it shows in the server's terminated advisory.
func (e Envelope) TermReason() string {
	return headerValue("idem: dead-lettered as "+string(e.Kind)+": "+e.errText(), maxTermReasonBytes)
}

func (e Envelope) errText() string {
	if e.Err == nil {
		return "unknown error"
	}
	return e.Err.Error()
}

// trimHeaders drops the original's own headers, largest first, when they
// would push the dead letter's header block over JetStream's limit. Idem-*
// headers are kept; the omission is said in a header.
func (e Envelope) trimHeaders(m *nats.Msg) {
	if headerBlock(m) <= maxHeaderBlock {
		return
	}
	type entry struct {
		key  string
		size int
	}
	var own []entry
	for k, vs := range m.Header {
		if hasPrefixFold(k, idemHeaderPrefix) && !hasPrefixFold(k, HeaderOriginalPrefix) {
			continue
		}
		size := 0
		for _, v := range vs {
			size += len(k) + len(v) + headerLineOverhead
		}
		own = append(own, entry{k, size})
	}
	sort.Slice(own, func(i, j int) bool { return own[i].size > own[j].size })
	dropped, bytes := 0, 0
	for _, o := range own {
		if headerBlock(m) <= maxHeaderBlock {
			break
		}
		delete(m.Header, o.key)
		dropped++
		bytes += o.size
	}
	m.Header.Set(HeaderHeadersOmitted, headerValue(fmt.Sprintf("%d original header(s), %d bytes, omitted: the dead letter would exceed JetStream's 64 KiB header limit; the original is message %d of stream %s",
		dropped, bytes, e.Seq, e.Stream), MaxHeaderValueBytes))
}

// Size is what the server counts of m against max_payload: headers and body.
func Size(m *nats.Msg) int { return headerBlock(m) + len(m.Data) }

// headerBlock is the size of m's header block as sent.
func headerBlock(m *nats.Msg) int {
	n := headerPreambleOverhead
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + headerLineOverhead
		}
	}
	return n
}

// hasPrefixFold reports whether header name s starts with prefix; header
// names compare without regard to case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// headerValue makes s a safe header value: one line (control characters,
// CR and LF become spaces, invalid UTF-8 becomes U+FFFD), trimmed, and at
// most limit bytes, cut on a rune boundary and marked with an ellipsis.
func headerValue(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) <= limit {
		return s
	}
	const ellipsis = "…"
	cut := limit - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
