package deadletter

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestEnvelopeMsg(t *testing.T) {
	e := Envelope{
		Kind:       KindFatal,
		Err:        errors.New("undefined_object: ERROR: relation \"x\" does not exist\nDETAIL: line two\r\x00"),
		Subject:    "idem.ready.orders",
		Stream:     "IDEM_EVENTS",
		Seq:        42,
		Deliveries: 3,
		Header: nats.Header{
			"X-Tag":                       {"a", "b", "a"},
			"Nats-Msg-Id":                 {"orders:2026-11-28:r1"},
			"nats-expected-last-sequence": {"7"},
			"Idem-Error":                  {"stale error from an earlier life"},
		},
		Data:      []byte(`{"dataset":"orders"}`),
		Dataset:   "orders",
		Partition: "2026-11-28",
		RunID:     "r1",
		FailedAt:  time.Date(2026, 11, 28, 10, 0, 0, 123e6, time.FixedZone("CET", 3600)),
	}
	m := e.Msg("idem.dlq.orders")
	require.Equal(t, "idem.dlq.orders", m.Subject)
	require.Equal(t, e.Data, m.Data)
	require.Equal(t, []string{"a", "b", "a"}, m.Header["X-Tag"], "every value of a repeated key, in order")
	require.Equal(t, []string{"orders:2026-11-28:r1"}, m.Header["Idem-Original-Nats-Msg-Id"])
	require.Equal(t, []string{"7"}, m.Header["Idem-Original-nats-expected-last-sequence"], "JetStream headers renamed, whatever their case")
	require.NotContains(t, m.Header, "nats-expected-last-sequence")
	require.Equal(t, "dlq:IDEM_EVENTS:42", m.Header.Get("Nats-Msg-Id"))
	require.Equal(t, `undefined_object: ERROR: relation "x" does not exist DETAIL: line two`, m.Header.Get(HeaderError))
	require.Len(t, m.Header[HeaderError], 1, "ours only")
	require.Equal(t, []string{"stale error from an earlier life"}, m.Header["Idem-Original-Idem-Error"], "theirs kept, renamed")
	require.Equal(t, "fatal", m.Header.Get(HeaderErrorKind))
	require.Equal(t, "idem.ready.orders", m.Header.Get(HeaderOriginalSubject))
	require.Equal(t, "IDEM_EVENTS", m.Header.Get(HeaderOriginalStream))
	require.Equal(t, "42", m.Header.Get(HeaderOriginalSeq))
	require.Equal(t, "3", m.Header.Get(HeaderDeliveries))
	require.Equal(t, "2026-11-28T09:00:00.123Z", m.Header.Get(HeaderFailedAt))
	require.Equal(t, "orders", m.Header.Get(HeaderDataset))
	require.Equal(t, "2026-11-28", m.Header.Get(HeaderPartition))
	require.Equal(t, "r1", m.Header.Get(HeaderRunID))
	require.NotContains(t, m.Header, HeaderHeadersOmitted)
	require.Equal(t, `idem: dead-lettered as fatal: undefined_object: ERROR: relation "x" does not exist DETAIL: line two`, e.TermReason())

	unknown := Envelope{Kind: KindCrashed, Stream: "S", Seq: 1, FailedAt: time.Unix(0, 0)}
	um := unknown.Msg("idem.dlq._invalid")
	for _, h := range []string{HeaderDataset, HeaderPartition, HeaderRunID} {
		require.NotContains(t, um.Header, h, "absent when unknown")
	}
	require.Equal(t, "unknown error", um.Header.Get(HeaderError))
	require.Equal(t, "idem: dead-lettered as crashed: unknown error", unknown.TermReason())
}

func TestEnvelopeTooBig(t *testing.T) {
	e := Envelope{Kind: KindFatal, Stream: "IDEM_EVENTS", Seq: 9, Data: []byte("body"), FailedAt: time.Unix(0, 0),
		Header: nats.Header{"Big": {strings.Repeat("x", 70000)}, "Small": {"kept"}, "Idem-Note": {"kept too"}}}
	m := e.Msg("idem.dlq.orders")
	require.NotContains(t, m.Header, "Big", "the largest header goes first")
	require.Equal(t, "kept", m.Header.Get("Small"))
	require.Equal(t, "kept too", m.Header.Get("Idem-Original-Idem-Note"))
	require.Equal(t, "fatal", m.Header.Get(HeaderErrorKind), "the envelope is never dropped")
	require.Contains(t, m.Header.Get(HeaderHeadersOmitted), "1 original header(s)")
	require.Contains(t, m.Header.Get(HeaderHeadersOmitted), "message 9 of stream IDEM_EVENTS")
	require.LessOrEqual(t, headerBlock(m), maxHeaderBlock)

	e.OmitBody(m, "too big for the test")
	require.Nil(t, m.Data)
	require.Equal(t, "4 bytes omitted: too big for the test; the original is message 9 of stream IDEM_EVENTS", m.Header.Get(HeaderBodyOmitted))
}

func TestMsgIDAndSubject(t *testing.T) {
	require.Equal(t, "dlq:IDEM_EVENTS:42", MsgID("IDEM_EVENTS", 42))
	require.Equal(t, "idem.dlq.orders", Subject("idem.dlq", "orders"))
	require.Equal(t, "idem.dlq._invalid", Subject("idem.dlq", ""))
}

func TestHeaderValue(t *testing.T) {
	require.Equal(t, "a b   c", headerValue("a\nb\r\n c\t", 100))
	require.Equal(t, "bad \uFFFD byte", headerValue("bad \xff byte", 100))
	long := strings.Repeat("é", 2000) // 4000 bytes
	v := headerValue(long, MaxHeaderValueBytes)
	require.LessOrEqual(t, len(v), MaxHeaderValueBytes)
	require.True(t, utf8.ValidString(v), "cut on a rune boundary")
	require.True(t, strings.HasSuffix(v, "…"))
}

func TestSizeCountsHeaders(t *testing.T) {
	m := &nats.Msg{Data: make([]byte, 10), Header: nats.Header{"K": {"v1", "v2"}}}
	require.Equal(t, 10+len("NATS/1.0\r\n\r\n")+2*len("K: v1\r\n"), Size(m))
}
