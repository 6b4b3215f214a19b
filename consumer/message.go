package consumer

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/schemas"
)

// Message is one decoded, validated delivery handed to a Handler.
type Message struct {
	// Subject is the subject the event was published to.
	Subject string
	// Data is the body, as published.
	Data []byte
	// Headers is a copy of the headers, every value of a repeated key kept.
	Headers nats.Header
	// NumDelivered counts JetStream's deliveries of this message, from 1.
	// It is not the attempt: deliveries that ran no load count too.
	NumDelivered int
	// MaxAttempts is the dataset's budget of loads that run (retries+1):
	// the handler counts the attempts and reports each one's number.
	MaxAttempts int
	// Stream and StreamSeq locate the message in the events stream.
	Stream    string
	StreamSeq uint64
	// Published is when the events stream stored the message.
	Published time.Time
	// Dataset is a configured dataset's name, the subject's last token.
	Dataset string
	// Event is the decoded body, validated against the dataset's partition
	// type.
	Event schemas.Event
	// Span is the span of this delivery's processing: the work the
	// handler does for this message (its downstream events) continues its
	// trace, also when the message loads in a group under another's span.
	Span trace.SpanContext
}

// invalidRetry paces the redelivery of a message of no configured dataset
// whose dead letter could not be published.
var invalidRetry = Retry{MaxAttempts: 1, Delay: time.Second, MaxDelay: time.Minute}

// delivery is one fetched message on its way to a fate.
type delivery struct {
	msg  jetstream.Msg
	meta *jetstream.MsgMetadata
	// m is the handler's view; m.Event is zero when decodeErr is set.
	m *Message
	// dataset is a configured dataset or "" when the message has none.
	dataset string
	// token is the subject's last token when it is a valid dataset name,
	// configured or not: the Idem-Dataset header of a dead letter.
	token string
	// set is the generation of the datasets the message was read with.
	set       *datasets
	retry     Retry
	decodeErr error
	log       zerolog.Logger
	// trace holds the span the delivery's process and settle spans are
	// children of: the publisher's, or the receive span's (tracing.go).
	trace context.Context
	// lane is the lane of the message's subject: its loads are counted
	// and granted there.
	lane lane
}

// newDelivery reads a fetched message: metadata, routing and body. It never
// fails on the body (an invalid body is a fatal decodeErr), only on
// metadata, which every message from a pull consumer has.
func (c *Consumer) newDelivery(msg jetstream.Msg) (*delivery, error) {
	meta, err := msg.Metadata()
	if err != nil {
		return nil, err
	}
	d := &delivery{
		msg:  msg,
		meta: meta,
		m: &Message{
			Subject:      msg.Subject(),
			Data:         bytes.Clone(msg.Data()), // the dead letter needs the original intact
			Headers:      cloneHeader(msg.Headers()),
			NumDelivered: int(meta.NumDelivered),
			Stream:       meta.Stream,
			StreamSeq:    meta.Sequence.Stream,
			Published:    meta.Timestamp,
		},
	}
	d.token, d.lane = laneDataset(c.cfg.SubjectPrefix, msg.Subject())
	d.retry = invalidRetry
	d.set = c.sets.Load()
	if ds, ok := d.set.byName[d.token]; ok {
		d.dataset, d.retry = d.token, ds.Retry
		d.m.Dataset = d.token
		d.m.MaxAttempts = ds.Retry.MaxAttempts
	}
	d.m.Event, d.decodeErr = schemas.Decode(msg.Subject(), msg.Data(), d.set.lookup)
	d.log = messageLogger(c.log, d.token, d.m.Event, d.m.NumDelivered, d.m.StreamSeq, d.m.Subject, d.decodeErr == nil)
	return d, nil
}

// label is the dataset for metrics: configured, or InvalidDataset.
func (d *delivery) label() string {
	if d.dataset == "" {
		return InvalidDataset
	}
	return d.dataset
}

// messageLogger carries the keys of every line about a message: dataset,
// partition, run_id (when the body decoded), delivery and stream_seq. The
// attempt is the handler's to log, and the fate's line carries it.
func messageLogger(base zerolog.Logger, dataset string, ev schemas.Event, delivery int, seq uint64, subject string, decoded bool) zerolog.Logger {
	lc := base.With()
	if dataset != "" {
		lc = lc.Str("dataset", dataset)
	}
	if decoded {
		lc = lc.Str("partition", ev.Key.Key).Str("run_id", ev.RunID)
	} else {
		lc = lc.Str("subject", subject)
	}
	return lc.Int("delivery", delivery).Uint64("stream_seq", seq).Logger()
}

// laneDataset is the dataset token of an event subject of either lane
// (subjectDataset), and the lane.
func laneDataset(prefix, subject string) (string, lane) {
	if ds := subjectDataset(schemas.BackfillPrefix(prefix), subject); ds != "" {
		return ds, laneBackfill
	}
	return subjectDataset(prefix, subject), laneLive
}

// subjectDataset is the subject's token after prefix when it is a valid
// dataset name, else "".
func subjectDataset(prefix, subject string) string {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok || !schemas.ValidDataset(rest) {
		return ""
	}
	return rest
}

func cloneHeader(h nats.Header) nats.Header {
	if h == nil {
		return nil
	}
	out := make(nats.Header, len(h))
	for k, vs := range h {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// datasets is one generation of the configured datasets and their turns.
type datasets struct {
	byName map[string]Dataset
	turns  map[string]*turns
}

// turns bounds the handlers of one dataset with a MaxConcurrency running
// at once (running), and counts its messages waiting for a turn (queued).
type turns struct {
	running chan struct{}
	queued  atomic.Int32
}

// newDatasets builds a generation; datasets whose MaxConcurrency did not
// change since prev keep prev's turns.
func newDatasets(byName map[string]Dataset, prev *datasets) *datasets {
	s := &datasets{byName: byName, turns: map[string]*turns{}}
	for name, d := range byName {
		if d.MaxConcurrency <= 0 {
			continue
		}
		if prev != nil {
			if t, ok := prev.turns[name]; ok && cap(t.running) == d.MaxConcurrency {
				s.turns[name] = t
				continue
			}
		}
		s.turns[name] = &turns{running: make(chan struct{}, d.MaxConcurrency)}
	}
	return s
}

// lookup tells schemas.Decode the datasets' partition types.
func (s *datasets) lookup(dataset string) (schemas.PartitionType, bool) {
	d, ok := s.byName[dataset]
	return d.PartitionType, ok
}
