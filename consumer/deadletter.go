package consumer

import (
	"context"
	"errors"
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

// Dead-letter headers (docs/SPEC.md, wire contract). The original's headers are kept
// beside them, every value of a repeated key included.
const (
	HeaderError            = "Idem-Error"
	HeaderErrorKind        = "Idem-Error-Kind" // fatal | exhausted | crashed
	HeaderOriginalSubject  = "Idem-Original-Subject"
	HeaderOriginalStream   = "Idem-Original-Stream"
	HeaderOriginalSeq      = "Idem-Original-Seq"
	HeaderDeliveries       = "Idem-Deliveries"
	HeaderFailedAt         = "Idem-Failed-At" // RFC 3339, UTC, milliseconds
	HeaderDataset          = "Idem-Dataset"   // when the subject names a valid dataset
	HeaderPartition        = "Idem-Partition" // when the body decoded
	HeaderRunID            = "Idem-Run-Id"    // when the body decoded
	HeaderBodyOmitted      = "Idem-Body-Omitted"
	HeaderHeadersOmitted   = "Idem-Headers-Omitted"
	HeaderOriginalPrefix   = "Idem-Original-" // renames the original's Nats-* and Idem-* headers
	InvalidSubjectToken    = "_invalid"       // <DLQSubjectPrefix>._invalid
	MaxHeaderValueBytes    = 1024
	failedAtLayout         = "2006-01-02T15:04:05.000Z07:00"
	maxTermReasonBytes     = 256
	natsHeaderPrefix       = "Nats-"
	idemHeaderPrefix       = "Idem-"
	headerLineOverhead     = len(": \r\n")
	headerPreambleOverhead = len("NATS/1.0\r\n\r\n")
)

// DeadLetterMsgID is the Nats-Msg-Id of the dead letter of message seq of
// stream. Every path that dead-letters a message uses it, so JetStream keeps
// one dead letter per message within the dead-letter stream's duplicate
// window, however many replicas or retries publish it.
func DeadLetterMsgID(stream string, seq uint64) string {
	return "dlq:" + stream + ":" + strconv.FormatUint(seq, 10)
}

// deadLetter is one message on its way to the dead-letter stream.
type deadLetter struct {
	kind       Kind
	err        error
	subject    string // the original's
	stream     string
	seq        uint64
	deliveries uint64
	header     nats.Header
	data       []byte
	dataset    string // "" when unknown
	partition  string
	runID      string
	failedAt   time.Time
}

// msg builds the dead letter: the original body unchanged, the original
// headers with every value, then the Idem-* headers. Original headers that
// JetStream or idem interpret (Nats-*, Idem-*) are kept renamed
// Idem-Original-<key>: a Nats-Expected-* or Nats-TTL meant for the events
// stream must not make the dead-letter stream refuse or expire the copy, and
// a publisher's Idem-Partition must not pass for ours.
func (dl deadLetter) msg(subject string) *nats.Msg {
	h := make(nats.Header, len(dl.header)+12)
	for k, vs := range dl.header {
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
	errText := "unknown error"
	if dl.err != nil {
		errText = dl.err.Error()
	}
	set(HeaderError, errText)
	set(HeaderErrorKind, string(dl.kind))
	set(HeaderOriginalSubject, dl.subject)
	set(HeaderOriginalStream, dl.stream)
	set(HeaderOriginalSeq, strconv.FormatUint(dl.seq, 10))
	set(HeaderDeliveries, strconv.FormatUint(dl.deliveries, 10))
	set(HeaderFailedAt, dl.failedAt.UTC().Format(failedAtLayout))
	set(HeaderDataset, dl.dataset)
	set(HeaderPartition, dl.partition)
	set(HeaderRunID, dl.runID)
	h.Set(jetstream.MsgIDHeader, DeadLetterMsgID(dl.stream, dl.seq))
	return &nats.Msg{Subject: subject, Header: h, Data: dl.data}
}

// termReason is the reason given with TermWithReason: it shows in the
// server's terminated advisory.
func (dl deadLetter) termReason() string {
	text := "unknown error"
	if dl.err != nil {
		text = dl.err.Error()
	}
	return headerValue("idem: dead-lettered as "+string(dl.kind)+": "+text, maxTermReasonBytes)
}

// deadLetterer publishes dead letters and waits for their PubAck.
type deadLetterer struct {
	js      jetstream.JetStream
	stream  string // the dead-letter stream, expected on publish
	prefix  string
	timeout time.Duration
}

// subject routes a dead letter: <prefix>.<dataset> for a configured
// dataset, <prefix>._invalid otherwise.
func (p *deadLetterer) subject(dataset string) string {
	if dataset == "" {
		return p.prefix + "." + InvalidSubjectToken
	}
	return p.prefix + "." + dataset
}

// publish sends dl to the dead-letter stream and returns once JetStream has
// stored it (or had it already: PubAck.Duplicate). Its context is detached
// from ctx's cancellation: a stop must not abandon a dead letter halfway.
//
// A dead letter too big for the connection or the stream is published
// without its body, with Idem-Body-Omitted saying where the original is
// (limits retention keeps it in the events stream). Without that, a message
// near max_payload could never be dead-lettered and would never leave the
// pending set.
func (p *deadLetterer) publish(ctx context.Context, configuredDataset string, dl deadLetter) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	m := dl.msg(p.subject(configuredDataset))
	trimHeaders(m, dl)
	if nc := p.js.Conn(); nc != nil {
		if limit := nc.MaxPayload(); limit > 0 && int64(msgSize(m)) > limit {
			omitBody(m, dl, "the dead letter would exceed the server's max_payload")
		}
	}
	ack, err := p.js.PublishMsg(ctx, m, jetstream.WithExpectStream(p.stream))
	if errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) && len(m.Data) > 0 {
		omitBody(m, dl, "the dead letter would exceed the stream's max_msg_size")
		ack, err = p.js.PublishMsg(ctx, m, jetstream.WithExpectStream(p.stream))
	}
	if err != nil {
		return nil, fmt.Errorf("publish dead letter %s to %s: %w", DeadLetterMsgID(dl.stream, dl.seq), m.Subject, err)
	}
	return ack, nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// maxHeaderBlock is JetStream's limit on a message's header block (64 KiB,
// error 10097), less room for the headers trimHeaders adds.
const maxHeaderBlock = 65535 - 2048

// trimHeaders drops the original's own headers, largest first, when they
// would push the dead letter's header block over JetStream's limit: such a
// dead letter could never be stored, so its original would never leave the
// pending set. Idem-* headers are kept; the omission is said in a header.
func trimHeaders(m *nats.Msg, dl deadLetter) {
	if headerBlock(m) <= maxHeaderBlock {
		return
	}
	type entry struct {
		key  string
		size int
	}
	var own []entry
	for k, vs := range m.Header {
		if hasPrefixFold(k, "Idem-") && !hasPrefixFold(k, HeaderOriginalPrefix) {
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
	for _, e := range own {
		if headerBlock(m) <= maxHeaderBlock {
			break
		}
		delete(m.Header, e.key)
		dropped++
		bytes += e.size
	}
	m.Header.Set(HeaderHeadersOmitted, headerValue(fmt.Sprintf("%d original header(s), %d bytes, omitted: the dead letter would exceed JetStream's 64 KiB header limit; the original is message %d of stream %s",
		dropped, bytes, dl.seq, dl.stream), MaxHeaderValueBytes))
}

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

func omitBody(m *nats.Msg, dl deadLetter, why string) {
	m.Header.Set(HeaderBodyOmitted, headerValue(fmt.Sprintf("%d bytes omitted: %s; the original is message %d of stream %s",
		len(m.Data), why, dl.seq, dl.stream), MaxHeaderValueBytes))
	m.Data = nil
}

// msgSize is what the server counts against max_payload: headers and body.
func msgSize(m *nats.Msg) int { return headerBlock(m) + len(m.Data) }

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
