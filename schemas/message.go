package schemas

import (
	"strconv"
	"time"
)

// Message is one event as a publisher sends it: the subject, the body and
// the Nats-Msg-Id. Every publisher (idem publish, idem backfill, the outbox
// relay) takes them from here, so they agree on each byte.
type Message struct {
	Subject string
	Body    []byte
	MsgID   string
	// Event is the event the body holds, its partition canonical.
	Event PartitionReady
}

// NewMessage validates ev exactly as Decode will validate it with lookup (so
// a bad event is refused before it is sent, not dead-lettered later), sets
// its partition to the canonical key (so 2026-11-28T13 and
// 2026-11-28T13:00:00Z are one run), and derives the subject
// "<prefix>.<dataset>", the body and the message id MsgID. A forced event
// gets a message id of its own, ":force:" and forcedAt in base 36 after
// MsgID, so JetStream's duplicate window never swallows a deliberate rerun;
// forcedAt is the caller's clock (this package reads none) and is unused
// when ev is not forced.
func NewMessage(prefix string, ev PartitionReady, lookup Lookup, forcedAt time.Time) (Message, error) {
	subject := Subject(prefix, ev.Dataset)
	body, err := ev.Marshal()
	if err != nil {
		return Message{}, err
	}
	dec, err := Decode(subject, body, lookup)
	if err != nil {
		return Message{}, err
	}
	if ev.Partition != dec.Key.Key {
		ev.Partition = dec.Key.Key
		if body, err = ev.Marshal(); err != nil {
			return Message{}, err
		}
	}
	id := ev.MsgID()
	if ev.Force {
		id += ":force:" + strconv.FormatInt(forcedAt.UnixNano(), 36)
	}
	return Message{Subject: subject, Body: body, MsgID: id, Event: ev}, nil
}

// NewTriggeredMessage is the message of a downstream event that upstream
// attempt auditID triggered (the outbox of `then:`, token its row's): its
// message id is TriggeredMsgID. The event was validated when its upstream
// loaded, so only its shape is checked again.
func NewTriggeredMessage(prefix string, ev PartitionReady, auditID int64, token string) (Message, error) {
	body, err := ev.Marshal()
	if err != nil {
		return Message{}, err
	}
	return Message{Subject: Subject(prefix, ev.Dataset), Body: body, MsgID: ev.TriggeredMsgID(auditID, token), Event: ev}, nil
}

// WatchRunIDPrefix starts the run_id of every event a dataset's watch:
// publishes (internal/watch), by which a handler knows a watch's run.
const WatchRunIDPrefix = "watch-"
