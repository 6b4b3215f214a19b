package why

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/internal/deadletter"
)

// JetStream reads a story's events from the events stream and its dead
// letters from the dead-letter stream, with stream gets only: reading a
// story creates no consumer and changes nothing.
type JetStream struct {
	Events jetstream.Stream
	DLQ    *deadletter.Store
	// NewestLetters bounds the dead-letter stream read: only its last
	// NewestLetters sequences (0: DefaultNewestLetters).
	NewestLetters uint64
}

// DefaultNewestLetters is how far back a story looks in the dead-letter
// stream.
const DefaultNewestLetters = 20000

// Event reads one event by its stream sequence.
func (j JetStream) Event(ctx context.Context, seq uint64) (Event, error) {
	m, err := j.Events.GetMsg(ctx, seq)
	if err != nil {
		return Event{Seq: seq}, err
	}
	ev := Event{Seq: seq, MsgID: m.Header.Get(nats.MsgIdHdr), Published: m.Time.UTC(), TraceID: traceID(m.Header)}
	var body struct {
		RunID      string            `json:"run_id"`
		Force      bool              `json:"force"`
		Attributes map[string]string `json:"attributes"`
	}
	if json.Unmarshal(m.Data, &body) == nil {
		ev.RunID, ev.Force = body.RunID, body.Force
	}
	ev.Publisher = publisher(m.Header, body.RunID, body.Attributes)
	return ev, nil
}

// DeadLetters lists the dataset's dead letters, oldest first.
func (j JetStream) DeadLetters(ctx context.Context, dataset string) ([]deadletter.Letter, error) {
	if j.DLQ == nil {
		return nil, nil
	}
	n := j.NewestLetters
	if n == 0 {
		n = DefaultNewestLetters
	}
	return j.DLQ.List(ctx, deadletter.Filter{Dataset: dataset, Newest: n}, false)
}

// traceID is the trace id of a W3C traceparent header
// (version-traceid-spanid-flags), as idem and OpenTelemetry publishers
// send it.
func traceID(h nats.Header) string {
	tp := h.Get("traceparent")
	if tp == "" {
		tp = h.Get("Traceparent")
	}
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

// publisher says who published an event, from what the event itself
// carries; "" when it does not say.
func publisher(h nats.Header, runID string, attrs map[string]string) string {
	switch {
	case h.Get("Idem-Replay-Of") != "":
		return "idem dlq replay of dead letter " + h.Get("Idem-Replay-Of")
	case attrs["triggered_by"] != "":
		return "idem, after " + attrs["triggered_by"]
	case strings.HasPrefix(runID, "manual__"):
		return "idem publish (manual)"
	case strings.HasPrefix(runID, "backfill__"):
		return "idem backfill"
	case strings.HasPrefix(runID, "scheduled__"), strings.HasPrefix(runID, "dataset_triggered__"):
		return "Airflow"
	}
	return ""
}
