package deadletter

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// replayHeader undoes what Envelope.Msg did to the original's headers, and
// keeps none of the JetStream directives meant for a first publish.
func TestReplayHeader(t *testing.T) {
	l := Letter{Seq: 12, Replays: 2, Header: nats.Header{
		"Traceparent":                        {"00-abc-01"},
		"X-Tag":                              {"a", "b"},
		"Idem-Original-Nats-Msg-Id":          {"orders:2026-11-27:r1"},
		"Idem-Original-Nats-Expected-Stream": {"IDEM_EVENTS"},
		"Idem-Original-Nats-Rollup":          {"sub"},
		"Idem-Original-Nats-TTL":             {"1h"},
		"Idem-Original-Idem-Note":            {"from the scheduler"},
		"Idem-Original-Idem-Replay-Of":       {"3"},
		"Idem-Original-Idem-Replay-Count":    {"2"},
		HeaderOriginalSubject:                {"idem.ready.orders"},
		HeaderOriginalSeq:                    {"7"},
		HeaderError:                          {"boom"},
		HeaderErrorKind:                      {"fatal"},
		HeaderErrorReason:                    {"schema_mismatch"},
		"Nats-Msg-Id":                        {"dlq:IDEM_EVENTS:7"},
		"nats-expected-last-sequence":        {"1"},
		"idem-partition":                     {"2026-11-27"},
	}}
	require.Equal(t, nats.Header{
		"Traceparent":     {"00-abc-01"},
		"X-Tag":           {"a", "b"},
		"Nats-TTL":        {"1h"},
		"Idem-Note":       {"from the scheduler"},
		headerReplayOf:    {"12"},
		headerReplayCount: {"3"},
	}, replayHeader(l))
}

func TestReplayCount(t *testing.T) {
	require.Equal(t, 0, replayCount(nats.Header{}))
	require.Equal(t, 2, replayCount(nats.Header{"Idem-Original-Idem-Replay-Count": {"2"}}))
	require.Equal(t, 1, replayCount(nats.Header{"Idem-Replay-Count": {"1"}}), "written by hand")
	require.Equal(t, 0, replayCount(nats.Header{"Idem-Replay-Count": {"-1"}}))
	require.Equal(t, 0, replayCount(nats.Header{"Idem-Replay-Count": {"x"}}))
}
