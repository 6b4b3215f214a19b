package deadletter

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Letter is one message of the dead-letter stream, read back. The JSON names
// are a stable interface for scripts.
type Letter struct {
	Seq             uint64    `json:"seq"`
	Subject         string    `json:"subject"`
	StoredAt        time.Time `json:"stored_at"`
	FailedAt        time.Time `json:"failed_at"`
	Kind            Kind      `json:"kind"`
	Dataset         string    `json:"dataset"`
	Partition       string    `json:"partition"`
	RunID           string    `json:"run_id"`
	Deliveries      uint64    `json:"deliveries"`
	Attempts        int       `json:"attempts,omitempty"`
	Replays         int       `json:"replays"`
	Error           string    `json:"error"`
	Reason          string    `json:"reason,omitempty"` // a fatal error's reason word (schema_mismatch, ...); "" when it names none
	OriginalSubject string    `json:"original_subject"`
	OriginalStream  string    `json:"original_stream"`
	OriginalSeq     uint64    `json:"original_seq"`
	BodyOmitted     string    `json:"body_omitted"`

	// Header is every header stored with the dead letter.
	Header nats.Header `json:"-"`
	// Body is the original's body; nil when not asked for.
	Body []byte `json:"-"`
}

// directGetHeaders describe a direct-get response, not the stored message:
// a stream with allow_direct returns them beside the message's own headers.
var directGetHeaders = []string{jetstream.StreamHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer,
	jetstream.SubjectHeader, "Nats-Num-Pending", "Nats-Last-Sequence", "Nats-UpTo-Sequence"}

// read reads the envelope of a stored dead letter. Missing or unreadable
// headers leave their fields zero: a dead letter written by hand is still
// listed.
func read(m *jetstream.RawStreamMsg) Letter {
	h := nats.Header{}
	for k, vs := range m.Header {
		if !slices.ContainsFunc(directGetHeaders, func(d string) bool { return strings.EqualFold(d, k) }) {
			h[k] = vs
		}
	}
	l := Letter{
		Seq: m.Sequence, Subject: m.Subject, StoredAt: m.Time.UTC(), FailedAt: m.Time.UTC(),
		Kind:            Kind(h.Get(HeaderErrorKind)),
		Dataset:         h.Get(HeaderDataset),
		Partition:       h.Get(HeaderPartition),
		RunID:           h.Get(HeaderRunID),
		Error:           h.Get(HeaderError),
		OriginalSubject: h.Get(HeaderOriginalSubject),
		OriginalStream:  h.Get(HeaderOriginalStream),
		BodyOmitted:     h.Get(HeaderBodyOmitted),
		Replays:         replayCount(h),
		Header:          h,
		Body:            m.Data,
	}
	if t, err := time.Parse(time.RFC3339, h.Get(HeaderFailedAt)); err == nil {
		l.FailedAt = t.UTC()
	}
	l.Deliveries, _ = strconv.ParseUint(h.Get(HeaderDeliveries), 10, 64)
	l.OriginalSeq, _ = strconv.ParseUint(h.Get(HeaderOriginalSeq), 10, 64)
	l.Attempts, _ = strconv.Atoi(h.Get(HeaderAttempts))
	l.Reason = letterReason(l.Kind, h.Get(HeaderErrorReason), l.Error)
	if l.Dataset == "" {
		// The subject's token is what a dataset filter selects, _invalid included.
		l.Dataset = m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	}
	return l
}

// replayCount reads the count a replay set. It comes back in the new dead
// letter renamed Idem-Original-Idem-Replay-Count; the plain name is read
// too, for dead letters written by hand.
func replayCount(h nats.Header) int {
	for _, k := range []string{HeaderOriginalPrefix + headerReplayCount, headerReplayCount} {
		if n, err := strconv.Atoi(h.Get(k)); err == nil && n > 0 {
			return n
		}
	}
	return 0
}

// FromMsg reads the envelope of a dead letter delivered by a consumer (seq
// and stored from its metadata), as List reads a stored one.
func FromMsg(seq uint64, subject string, stored time.Time, h nats.Header, data []byte) Letter {
	return read(&jetstream.RawStreamMsg{Subject: subject, Sequence: seq, Header: h, Data: data, Time: stored})
}
