package reverify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/schemas"
)

// The read of a pass's window from the events stream: which events the
// consumer was given, where the window starts, and where it ends.

type event struct {
	seq   uint64
	ev    schemas.Event
	acked bool // at or below the consumer's ack floor
}

// lane is one durable consumer's position in the events stream: the live
// lane's and the backfill lane's each have their own.
type lane struct {
	consumer, prefix string
	delivered, floor uint64
}

// lanes are the durables' positions and the subjects they read; a
// backfill durable not created yet has delivered nothing and is left out.
func (r *Reverifier) lanes(ctx context.Context) ([]*lane, error) {
	all := []*lane{{consumer: r.cfg.Consumer, prefix: r.cfg.SubjectPrefix}}
	if r.cfg.BackfillConsumer != "" {
		all = append(all, &lane{consumer: r.cfg.BackfillConsumer, prefix: schemas.BackfillPrefix(r.cfg.SubjectPrefix)})
	}
	var out []*lane
	for i, l := range all {
		c, err := r.cfg.JS.Consumer(ctx, r.cfg.Stream, l.consumer)
		if i > 0 && errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reverify: consumer %s: %w", l.consumer, err)
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("reverify: consumer %s: %w", l.consumer, err)
		}
		l.delivered, l.floor = ci.Delivered.Stream, ci.AckFloor.Stream
		out = append(out, l)
	}
	return out, nil
}

// laneOf is the lane whose subjects hold subject: the first (live) one
// unless another's prefix matches.
func laneOf(lanes []*lane, subject string) *lane {
	for _, l := range lanes[1:] {
		if strings.HasPrefix(subject, l.prefix+".") {
			return l
		}
	}
	return lanes[0]
}

// deadSince is the stream sequences of the events stream's messages whose
// dead letter was published since since (a minute of slack before it).
func (r *Reverifier) deadSince(ctx context.Context, since time.Time) (map[uint64]bool, error) {
	store, err := deadletter.Open(ctx, r.cfg.JS, deadletter.Config{Stream: r.cfg.DLQStream, SubjectPrefix: r.cfg.DLQSubjectPrefix, EventsStream: r.cfg.Stream})
	if err != nil {
		return nil, fmt.Errorf("reverify: %w", err)
	}
	letters, err := store.List(ctx, deadletter.Filter{Since: since.Add(-time.Minute)}, false)
	if err != nil {
		return nil, fmt.Errorf("reverify: %w", err)
	}
	dead := map[uint64]bool{}
	for _, l := range letters {
		if l.OriginalStream == "" || l.OriginalStream == r.cfg.Stream {
			dead[l.OriginalSeq] = true
		}
	}
	return dead, nil
}

// window reads the events of the window that the consumer has been given
// at least once (later ones are its to load), in stream order, leaving out
// those whose dead letter is in the dead-letter stream (their fate was
// decided) and those that do not decode (they were dead-lettered too).
//
// after, when not 0, is a stream sequence a cut pass on this server settled
// through: the read starts after it.
func (r *Reverifier) window(ctx context.Context, res *Result, after uint64) ([]event, error) {
	since := r.cfg.Now().Add(-r.cfg.Window)
	lanes, err := r.lanes(ctx)
	if err != nil {
		return nil, err
	}
	var delivered uint64
	var filters []string
	for _, l := range lanes {
		delivered = max(delivered, l.delivered)
		filters = append(filters, l.prefix+".>")
	}
	if delivered == 0 {
		return nil, nil
	}
	dead, err := r.deadSince(ctx, since)
	if err != nil {
		return nil, err
	}
	s, err := r.cfg.JS.Stream(ctx, r.cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("reverify: stream %s: %w", r.cfg.Stream, err)
	}
	start := after + 1
	if after == 0 {
		if start, err = firstSince(ctx, s, since); err != nil {
			return nil, err
		}
	}
	res.From = start
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters,
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    start,
	})
	if err != nil {
		return nil, fmt.Errorf("reverify: read %s: %w", r.cfg.Stream, err)
	}
	var out []event
	last := start - 1 // the last sequence read
	stalls := 0       // fetches in a row that brought nothing while the stream had more
	for {
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("reverify: read %s: %w", r.cfg.Stream, err)
		}
		n, done, drained := 0, false, false
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			seq := md.Sequence.Stream
			last, drained, done = max(last, seq), md.NumPending == 0, done || seq >= delivered
			l := laneOf(lanes, m.Subject())
			if md.Timestamp.Before(since) || seq > l.delivered {
				continue // older than the window, or its lane's consumer has not had it yet
			}
			res.Checked++
			if dead[seq] {
				continue
			}
			ev, err := schemas.Decode(m.Subject(), m.Data(), r.cfg.Loader.Lookup)
			if err != nil {
				continue
			}
			out = append(out, event{seq: seq, ev: ev, acked: seq <= l.floor})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("reverify: read %s: %w", r.cfg.Stream, err)
		}
		if done {
			return out, nil
		}
		if n > 0 {
			stalls = 0
			if !drained {
				continue
			}
		}
		// The read says nothing is left before the last delivered event
		// (an empty fetch, or no message pending): a fetch that timed out
		// on a busy server says the same. The stream decides: a pass that
		// took it for the end would release the loads with part of the
		// window unchecked.
		next, err := nextOf(ctx, s, last+1, filters)
		if err != nil {
			return nil, err
		}
		if next == 0 || next > delivered {
			return out, nil
		}
		if stalls++; stalls >= maxStalls {
			return nil, fmt.Errorf("reverify: read %s: the read stopped at stream seq %d, before seq %d of the window, which the consumer delivered", r.cfg.Stream, last, next)
		}
	}
}

// maxStalls is how many fetches in a row may bring nothing while the
// stream holds more of the window (a busy server) before the pass gives
// up and is tried again.
const maxStalls = 5

// firstSince is the sequence from which s holds its messages stored at or
// after since: the first one's, found by bisecting s's messages by their
// stored time (which rises with the sequence), or the sequence after the
// last when none is that recent. It asks the messages themselves, not
// the server's index by time.
func firstSince(ctx context.Context, s jetstream.Stream, since time.Time) (uint64, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("reverify: stream info: %w", err)
	}
	lo, hi := max(info.State.FirstSeq, 1), info.State.LastSeq+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := s.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(">"))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			hi = mid // nothing stored from mid on
		case err != nil:
			return 0, fmt.Errorf("reverify: find the window's start: %w", err)
		case !m.Time.Before(since):
			hi = mid
		default:
			lo = m.Sequence + 1
		}
	}
	return lo, nil
}

// nextOf is the sequence of the first message of s at or after seq on one
// of subjects, 0 when there is none.
func nextOf(ctx context.Context, s jetstream.Stream, seq uint64, subjects []string) (uint64, error) {
	var next uint64
	for _, subj := range subjects {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("reverify: find the next event after seq %d: %w", seq-1, err)
		}
		if next == 0 || m.Sequence < next {
			next = m.Sequence
		}
	}
	return next, nil
}
