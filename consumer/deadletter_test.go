package consumer

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestDeadLetterMsg(t *testing.T) {
	dl := deadLetter{
		kind:       KindFatal,
		err:        errors.New("undefined_object: ERROR: relation \"x\" does not exist\nDETAIL: line two\r\x00"),
		subject:    "idem.ready.orders",
		stream:     "IDEM_EVENTS",
		seq:        42,
		deliveries: 3,
		header: nats.Header{
			"X-Tag":                       {"a", "b", "a"},
			"Nats-Msg-Id":                 {"orders:2026-11-28:r1"},
			"nats-expected-last-sequence": {"7"},
			"Idem-Error":                  {"stale error from an earlier life"},
		},
		data:      []byte(`{"dataset":"orders"}`),
		dataset:   "orders",
		partition: "2026-11-28",
		runID:     "r1",
		failedAt:  time.Date(2026, 11, 28, 10, 0, 0, 123e6, time.FixedZone("CET", 3600)),
	}
	m := dl.msg("idem.dlq.orders")
	require.Equal(t, "idem.dlq.orders", m.Subject)
	require.Equal(t, dl.data, m.Data)
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
	require.Equal(t, "42", m.Header.Get(HeaderOriginalSeq))
	require.Equal(t, "3", m.Header.Get(HeaderDeliveries))
	require.Equal(t, "2026-11-28T09:00:00.123Z", m.Header.Get(HeaderFailedAt))
	require.Equal(t, "orders", m.Header.Get(HeaderDataset))
	require.Equal(t, "2026-11-28", m.Header.Get(HeaderPartition))
	require.Equal(t, "r1", m.Header.Get(HeaderRunID))

	unknown := deadLetter{kind: KindCrashed, stream: "S", seq: 1, failedAt: time.Unix(0, 0)}.msg("idem.dlq._invalid")
	for _, h := range []string{HeaderDataset, HeaderPartition, HeaderRunID} {
		require.NotContains(t, unknown.Header, h, "absent when unknown")
	}
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

func TestMsgSizeCountsHeaders(t *testing.T) {
	m := &nats.Msg{Data: make([]byte, 10), Header: nats.Header{"K": {"v1", "v2"}}}
	require.Equal(t, 10+len("NATS/1.0\r\n\r\n")+2*len("K: v1\r\n"), msgSize(m))
}
