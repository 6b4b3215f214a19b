package resultstream

import (
	"context"
	"errors"
	"fmt"
	"github.com/idem-data/idem/internal/results"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/internal/deadletter"
)

// checkFailedPrefix starts the error of a load the checks refused
// (internal/checks.Error).
const checkFailedPrefix = "check_failed:"

// FromDeadLetter is the result of the event l dead-lettered: rejected
// when its checks refused it, dead_lettered otherwise.
func FromDeadLetter(pipeline string, l deadletter.Letter) results.Result {
	r := results.Result{
		Pipeline: pipeline, Dataset: l.Dataset, Partition: l.Partition, RunID: l.RunID,
		Status: results.StatusDeadLettered, Attempts: l.Attempts, ErrorKind: string(l.Kind), Error: l.Error,
		Stream: l.OriginalStream, StreamSeq: l.OriginalSeq, DeadLetterSeq: l.Seq,
		MsgID: l.Header.Get(deadletter.HeaderOriginalPrefix + nats.MsgIdHdr),
	}
	if rest, ok := strings.CutPrefix(l.Error, checkFailedPrefix); ok {
		r.Status, r.ErrorKind, r.FailedChecks = results.StatusRejected, "check", failedChecks(rest)
	}
	r.Finish(l.FailedAt)
	return r
}

// failedChecks reads the names out of a checks error: "name: 3 failing
// (...); other: ..." or "check name could not run: ...".
func failedChecks(s string) []string {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "check "); ok {
		if name, _, ok := strings.Cut(rest, " could not run:"); ok {
			return []string{name}
		}
	}
	var names []string
	for _, part := range strings.Split(s, "; ") {
		if name, _, ok := strings.Cut(part, ": "); ok && name != "" {
			names = append(names, name)
		}
	}
	return names
}

// Follower follows events of the events stream to their results, with
// NATS access only: it reads the results stream and, so that a dead letter
// is known even when its result could not be published, the dead-letter
// stream.
type Follower struct {
	JS jetstream.JetStream
	// Pipeline names the results built from dead letters.
	Pipeline string
	// Events is the events stream; Consumer its durable consumer (for
	// Progress only).
	Events, Consumer string
	// Stream and Prefix are the results stream and its subject prefix.
	Stream, Prefix string
	// DLQStream and DLQPrefix are the dead-letter stream and its prefix.
	DLQStream, DLQPrefix string
}

// Unreachable is an error reaching NATS or the streams a waiter reads:
// exit code 4 for a scheduler.
type Unreachable struct{ Err error }

func (e *Unreachable) Error() string { return e.Err.Error() }
func (e *Unreachable) Unwrap() error { return e.Err }

// Check says whether the events, results and dead-letter streams can be
// read: a missing stream, or one this user may not read, is an
// *Unreachable that names it. It runs before anything is published.
func (f *Follower) Check(ctx context.Context) error {
	for _, s := range []struct{ name, what string }{{f.Stream, "results"}, {f.DLQStream, "dead-letter"}, {f.Events, "events"}} {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := f.JS.Stream(ctx, s.name)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return &Unreachable{fmt.Errorf("the %s stream %s does not exist: run `idem streams` (idem serve creates it at start): %w", s.what, s.name, err)}
		case err != nil:
			return &Unreachable{fmt.Errorf("cannot read the %s stream %s (is this NATS user allowed $JS.API.STREAM.INFO.%s? a waiting publisher needs the permissions of docs/SECURITY.md: stream info, reading a message, ordered consumers): %w", s.what, s.name, s.name, err)}
		}
	}
	return nil
}

// Published says when the events stream stored message seq, the earliest
// a result of it can exist; ok false when the stream no longer holds it.
func (f *Follower) Published(ctx context.Context, seq uint64) (at time.Time, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := f.JS.Stream(ctx, f.Events)
	if err != nil {
		return time.Time{}, false, &Unreachable{fmt.Errorf("events stream %s: %w", f.Events, err)}
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, &Unreachable{fmt.Errorf("events stream %s, message %d: %w", f.Events, seq, err)}
	}
	return m.Time, true, nil
}

// Progress describes where event seq is, for a waiter's stderr: queued
// behind others, delivered (loading or waiting to retry), or settled with
// its result on its way. "" when the consumer cannot be read.
func (f *Follower) Progress(ctx context.Context, seq uint64) string {
	if f.Consumer == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := f.JS.Consumer(ctx, f.Events, f.Consumer)
	if err != nil {
		return ""
	}
	ci := c.CachedInfo()
	switch {
	case ci.AckFloor.Stream >= seq:
		return "settled; its result is on its way"
	case ci.Delivered.Stream < seq:
		return fmt.Sprintf("queued: the consumer has delivered up to event %d, %d waiting", ci.Delivered.Stream, ci.NumPending)
	default:
		return "delivered: loading, or waiting for its next attempt"
	}
}

// startMargin reads the streams from a little before the event was stored:
// the results stream's clock is the same server's, the margin covers a
// clustered stream whose leader is another server.
const startMargin = 5 * time.Second

// Follow waits for the result of each event of dataset in seqs (sequences
// of the events stream), calling found once for each as it arrives (from
// whichever goroutine), until every one has its result or ctx ends (then
// ctx's error). since is the earliest any of them was stored (zero: read
// both streams from their start). A redelivered or retried event is
// followed to its final outcome: only terminal outcomes are published.
func (f *Follower) Follow(ctx context.Context, dataset string, seqs []uint64, since time.Time, found func(results.Result)) error {
	want := make(map[uint64]bool, len(seqs))
	for _, s := range seqs {
		want[s] = true
	}
	if len(want) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	closed := false // Follow returned: found is not called again
	deliver := func(seq uint64, r func() (results.Result, bool)) {
		mu.Lock()
		defer mu.Unlock()
		if closed || !want[seq] {
			return
		}
		res, ok := r()
		if !ok {
			return
		}
		delete(want, seq)
		found(res)
		if len(want) == 0 {
			cancel()
		}
	}
	events := f.Events
	onResult := func(m jetstream.Msg) {
		h := m.Headers()
		seq, _ := strconv.ParseUint(h.Get(results.HeaderEventSeq), 10, 64)
		if h.Get(results.HeaderEventStream) != events {
			return
		}
		deliver(seq, func() (results.Result, bool) {
			r, err := results.Parse(m.Data())
			return r, err == nil
		})
	}
	onDeadLetter := func(m jetstream.Msg) {
		h := m.Headers()
		seq, _ := strconv.ParseUint(h.Get(deadletter.HeaderOriginalSeq), 10, 64)
		if h.Get(deadletter.HeaderOriginalStream) != events {
			return
		}
		deliver(seq, func() (results.Result, bool) {
			meta, err := m.Metadata()
			if err != nil {
				return results.Result{}, false
			}
			return FromDeadLetter(f.Pipeline, deadletter.FromMsg(meta.Sequence.Stream, m.Subject(), meta.Timestamp, h, nil)), true
		})
	}
	errs := make(chan error, 2)
	for _, src := range []struct {
		stream, subject string
		on              func(jetstream.Msg)
	}{
		{f.Stream, results.Subject(f.Prefix, dataset), onResult},
		{f.DLQStream, deadletter.Subject(f.DLQPrefix, dataset), onDeadLetter},
	} {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{src.subject}, DeliverPolicy: jetstream.DeliverAllPolicy}
		if !since.IsZero() {
			start := since.Add(-startMargin)
			cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
		}
		c, err := f.JS.OrderedConsumer(ctx, src.stream, cfg)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return &Unreachable{fmt.Errorf("follow stream %s: %w", src.stream, err)}
		}
		it, err := c.Messages()
		if err != nil {
			return &Unreachable{fmt.Errorf("follow stream %s: %w", src.stream, err)}
		}
		go func() {
			for {
				m, err := it.Next()
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
						select {
						case errs <- err:
						default:
						}
					}
					return
				}
				src.on(m)
			}
		}()
		defer it.Stop()
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		mu.Lock()
		closed = true
		mu.Unlock()
		return &Unreachable{fmt.Errorf("follow results: %w", err)}
	}
	mu.Lock()
	closed = true
	done := len(want) == 0
	mu.Unlock()
	if done {
		return nil
	}
	return ctx.Err()
}

// ErrTimeout is a wait that ran out of time: the event is still queued or
// loading; nothing was cancelled.
var ErrTimeout = errors.New("not finished within the timeout")

// progressEvery is how often Wait reports where the event is.
const progressEvery = 10 * time.Second

// Wait follows event seq of dataset to its result, for at most timeout,
// saying where it is on progress every few seconds (nil: silent). It
// returns ErrTimeout when time ran out, an *Unreachable when NATS or the
// streams could not be read.
func (f *Follower) Wait(ctx context.Context, dataset string, seq uint64, timeout time.Duration, progress func(string)) (results.Result, error) {
	since, ok, err := f.Published(ctx, seq)
	if err != nil {
		return results.Result{}, err
	}
	if !ok {
		since = time.Time{} // gone from the events stream: read the results from their start
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if progress != nil {
		go func() {
			start := time.Now()
			t := time.NewTicker(progressEvery)
			defer t.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-t.C:
					where := f.Progress(wctx, seq)
					if where == "" {
						where = "waiting"
					}
					progress(fmt.Sprintf("%s: %s", time.Since(start).Round(time.Second), where))
				}
			}
		}()
	}
	var got results.Result
	err = f.Follow(wctx, dataset, []uint64{seq}, since, func(r results.Result) { got = r })
	switch {
	case err == nil:
		return got, nil
	case ctx.Err() != nil:
		return results.Result{}, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		if nc := f.JS.Conn(); nc != nil && !nc.IsConnected() {
			return results.Result{}, &Unreachable{fmt.Errorf("NATS unreachable (%s) when the wait ran out: %w", nc.Status(), ErrTimeout)}
		}
		return results.Result{}, ErrTimeout
	}
	return results.Result{}, err
}
