package deadletter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxReplays: a dead letter already replayed this often fails for a reason
// replaying does not fix, so another replay must be forced.
const MaxReplays = 3

// replayPublishTimeout bounds the wait for a replay's PubAck.
const replayPublishTimeout = 10 * time.Second

// restorableNats are the original's Nats-* headers a replay may send again.
// The others are JetStream directives for a first publish: Nats-Msg-Id
// would make JetStream drop the replay as a duplicate inside its window,
// Nats-Expected-* would fail against a stream that has moved on, a
// Nats-Rollup would purge the subject. Nats-TTL means the same the second time.
var restorableNats = []string{"Nats-TTL"}

// ReplayAction is what a replay did with one dead letter.
type ReplayAction string

const (
	ActionReplayed    ReplayAction = "replayed"
	ActionWouldReplay ReplayAction = "would_replay" // a dry run
	ActionSkipped     ReplayAction = "skipped"      // refused; Reason says why
	ActionFailed      ReplayAction = "failed"       // tried; Reason says what went wrong
)

// ReplayOptions change what Replay does.
type ReplayOptions struct {
	DryRun bool // decide, publish and delete nothing
	Force  bool // replay even one already replayed MaxReplays times
}

// ReplayResult is the fate of one dead letter in a replay. The JSON names
// are a stable interface for scripts.
type ReplayResult struct {
	Seq         uint64       `json:"seq"`
	Dataset     string       `json:"dataset"`
	Partition   string       `json:"partition"`
	RunID       string       `json:"run_id"`
	Kind        Kind         `json:"kind"`
	Action      ReplayAction `json:"action"`
	Reason      string       `json:"reason"`
	Subject     string       `json:"subject"`
	ReplayCount int          `json:"replay_count"` // the Idem-Replay-Count sent
	// Stream and StreamSeq: where the replay was stored.
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
}

// Replay republishes l (read with its body) to its original subject and,
// once JetStream has stored the replay in the events stream, deletes the
// dead letter; in that order only, so it is never in neither place.
func (s *Store) Replay(ctx context.Context, l Letter, o ReplayOptions) ReplayResult {
	r := ReplayResult{Seq: l.Seq, Dataset: l.Dataset, Partition: l.Partition, RunID: l.RunID, Kind: l.Kind,
		Subject: l.OriginalSubject, ReplayCount: l.Replays + 1}
	skip := func(format string, a ...any) ReplayResult {
		r.Action, r.Reason = ActionSkipped, fmt.Sprintf(format, a...)
		return r
	}
	switch {
	case l.OriginalSubject == "":
		return skip("no %s header: not a dead letter idem wrote", HeaderOriginalSubject)
	case l.BodyOmitted != "":
		return skip("its body was not kept (%s); publish the event again with 'idem publish'", l.BodyOmitted)
	case l.Replays >= MaxReplays && !o.Force:
		return skip("already replayed %d times and failed again each time; read 'idem dlq show %d', fix the cause, then replay with --force (or purge it)", l.Replays, l.Seq)
	}
	if o.DryRun {
		r.Action = ActionWouldReplay
		return r
	}
	fail := func(format string, a ...any) ReplayResult {
		r.Action, r.Reason = ActionFailed, fmt.Sprintf(format, a...)
		return r
	}
	msg := &nats.Msg{Subject: l.OriginalSubject, Header: replayHeader(l), Data: l.Body}
	pctx, cancel := context.WithTimeout(ctx, replayPublishTimeout)
	defer cancel()
	ack, err := s.js.PublishMsg(pctx, msg, jetstream.WithExpectStream(s.cfg.EventsStream))
	if err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			return fail("no stream answers on %s (the events stream is %s); the dead letter is kept", l.OriginalSubject, s.cfg.EventsStream)
		}
		return fail("publish to %s: %v; the dead letter is kept", l.OriginalSubject, err)
	}
	r.Stream, r.StreamSeq = ack.Stream, ack.Sequence
	if ack.Duplicate {
		// Nothing new was stored, so deleting would lose the event.
		return fail("JetStream dropped the replay as a duplicate of seq %d; the dead letter is kept", ack.Sequence)
	}
	// Once the replay is stored, a cancellation must not leave its dead
	// letter behind to be replayed twice.
	if err := s.Delete(context.WithoutCancel(ctx), l.Seq); err != nil {
		return fail("replayed as %s seq %d, but deleting the dead letter failed: %v; purge it with 'idem dlq purge' or leave it (replaying it again is harmless)", ack.Stream, ack.Sequence, err)
	}
	r.Action = ActionReplayed
	return r
}

// replayHeader is the original's headers as the consumer received them,
// less what must not be sent twice, plus the replay's own marks: Envelope.Msg
// undone.
func replayHeader(l Letter) nats.Header {
	h := nats.Header{}
	for k, vs := range l.Header {
		key := k
		renamed := strings.TrimPrefix(k, HeaderOriginalPrefix)
		switch {
		// Only the original's Nats-* and Idem-* were renamed;
		// Idem-Original-Subject and the like are the envelope's own.
		case renamed != k && hasPrefixFold(renamed, natsHeaderPrefix):
			if !slices.ContainsFunc(restorableNats, func(r string) bool { return strings.EqualFold(r, renamed) }) {
				continue
			}
			key = renamed
		case renamed != k && hasPrefixFold(renamed, idemHeaderPrefix):
			if hasPrefixFold(renamed, "Idem-Replay-") {
				continue // replaced below
			}
			key = renamed
		case hasPrefixFold(k, idemHeaderPrefix), hasPrefixFold(k, natsHeaderPrefix):
			continue // the envelope, and the dead letter's own Nats-Msg-Id
		}
		h[key] = append(h[key], vs...)
	}
	h.Set(headerReplayOf, strconv.FormatUint(l.Seq, 10))
	h.Set(headerReplayCount, strconv.Itoa(l.Replays+1))
	return h
}
