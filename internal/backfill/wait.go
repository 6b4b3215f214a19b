package backfill

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/internal/results"
	"github.com/idem-data/idem/internal/resultstream"
)

// poll is how often Wait reads the audit table.
const poll = time.Second

// deadLetter is what the dead-letter stream says about one partition.
type deadLetter struct{ kind, err string }

// DeadLetters collects one run's dead letters for a dataset. They only
// matter for crashes: a fatal or exhausted failure is in the audit table too,
// a delivery that died is only in the dead-letter stream.
type DeadLetters struct {
	mu   sync.Mutex
	seen map[string]deadLetter
	cc   jetstream.ConsumeContext
}

// WatchDeadLetters follows the dead-letter stream from now on, for run
// runID of dataset: start it before publishing, so every dead letter of the
// run is seen. It always returns a watch; with an error the watch sees
// nothing, and a delivery that crashed stays pending until Wait's timeout.
func WatchDeadLetters(ctx context.Context, js jetstream.JetStream, cfg *config.Config, dataset, runID string) (*DeadLetters, error) {
	w := &DeadLetters{seen: map[string]deadLetter{}}
	cons, err := js.OrderedConsumer(ctx, cfg.NATS.DLQStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{cfg.NATS.DLQSubjectPrefix + "." + dataset},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return w, err
	}
	w.cc, err = cons.Consume(func(m jetstream.Msg) {
		h := m.Headers()
		if h.Get(deadletter.HeaderRunID) != runID {
			return
		}
		w.mu.Lock()
		w.seen[h.Get(deadletter.HeaderPartition)] = deadLetter{kind: h.Get(deadletter.HeaderErrorKind), err: h.Get(deadletter.HeaderError)}
		w.mu.Unlock()
	})
	return w, err
}

func (w *DeadLetters) get(partition string) (deadLetter, bool) {
	if w == nil {
		return deadLetter{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d, ok := w.seen[partition]
	return d, ok
}

// Stop ends the watch; a nil watch is fine.
func (w *DeadLetters) Stop() {
	if w != nil && w.cc != nil {
		w.cc.Stop()
	}
}

// Results collects the results of a backfill's published events from the
// results stream (package results): the final outcome of each, the same
// mechanism as `idem publish --wait`.
type Results struct {
	mu     sync.Mutex
	bySeq  map[uint64]results.Result
	cancel context.CancelFunc
	err    error
}

// FollowResults follows the results of every event res published (their
// stream sequences; a duplicate's is the original's), from when the first
// was stored. Stop it once the wait is over; a nil follower follows nothing.
func FollowResults(ctx context.Context, f *resultstream.Follower, res *Result) *Results {
	rs := &Results{bySeq: map[uint64]results.Result{}}
	if f == nil {
		return rs
	}
	var seqs []uint64
	first := uint64(0)
	for _, p := range res.Partitions {
		if p.Action == ActionPublish && p.Seq > 0 {
			seqs = append(seqs, p.Seq)
			if first == 0 || p.Seq < first {
				first = p.Seq
			}
		}
	}
	if len(seqs) == 0 {
		return rs
	}
	since, ok, err := f.Published(ctx, first)
	if err != nil || !ok {
		since = time.Time{}
	}
	ctx, rs.cancel = context.WithCancel(ctx)
	go func() {
		err := f.Follow(ctx, res.Dataset, seqs, since, func(r results.Result) {
			rs.mu.Lock()
			rs.bySeq[r.StreamSeq] = r
			rs.mu.Unlock()
		})
		if err != nil && ctx.Err() == nil {
			rs.mu.Lock()
			rs.err = err
			rs.mu.Unlock()
		}
	}()
	return rs
}

func (rs *Results) get(seq uint64) (results.Result, bool) {
	if rs == nil || seq == 0 {
		return results.Result{}, false
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.bySeq[seq]
	return r, ok
}

// Err is why the results could not be followed (nil while they can).
func (rs *Results) Err() error {
	if rs == nil {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.err
}

// Stop ends the follow; a nil one is fine.
func (rs *Results) Stop() {
	if rs != nil && rs.cancel != nil {
		rs.cancel()
	}
}

// fromResult is the final outcome a result says.
func fromResult(r results.Result) Outcome {
	o := Outcome{Attempts: r.Attempts, Final: true}
	if r.Rows != nil {
		n := r.Rows.Inserted + r.Rows.Updated
		o.Rows = &n
	}
	if r.Done() {
		o.Status = audit.StatusSuccess
		return o
	}
	o.Status, o.DLQ, o.Error = audit.StatusFailed, r.ErrorKind, r.Error
	if r.Status == results.StatusRejected {
		o.DLQ = string(consumer.KindFatal)
	}
	return o
}

// Counts are the published partitions' outcomes so far, for a progress line.
type Counts struct{ Loaded, Failed, Retrying, Cancelled int }

// Wait polls the audit table until every published partition of res has a
// final outcome, the timeout passes, or ctx ends; dlq (which may be nil)
// tells the crashes. It records each partition's Outcome and the summary in
// res.Wait; a timeout or an ended ctx is said there, not returned. progress
// is called after each poll, final once nothing is pending.
func Wait(ctx context.Context, db audit.Querier, cfg *config.Config, res *Result, dlq *DeadLetters, rs *Results, timeout time.Duration, progress func(c Counts, final bool)) error {
	maxDeliveries := cfg.Datasets[res.Dataset].MaxAttempts()
	pending := map[string]*Partition{}
	var keys []string
	for _, p := range res.Partitions {
		if p.Action == ActionPublish {
			p.Outcome = &Outcome{Status: "queued"}
			pending[p.Partition] = p
			keys = append(keys, p.Partition)
		}
	}
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	sum := &WaitSummary{}
	res.Wait = sum
	for {
		if len(keys) > 0 {
			attempts, err := audit.RunAttempts(ctx, db, cfg.Pipeline, res.Dataset, res.RunID, keys)
			if err != nil && ctx.Err() == nil {
				return err
			}
			if err != nil {
				// Interrupted during the poll: the outcomes stay as the
				// last poll left them, and the pending are still told.
				c := tally(res, sum, start)
				sum.Interrupted = true
				progress(c, false)
				return nil
			}
			keys = keys[:0]
			for _, a := range attempts {
				p := pending[a.Partition]
				dl, dead := dlq.get(a.Partition)
				o := outcome(a, dl, dead, maxDeliveries)
				if r, ok := rs.get(p.Seq); ok {
					// The results stream says how the event ended; the
					// audit above only tells how far a pending one got.
					o = fromResult(r)
				}
				p.Outcome = &o
				if !o.Final {
					keys = append(keys, a.Partition)
				}
			}
		}
		c := tally(res, sum, start)
		progress(c, len(keys) == 0)
		if len(keys) == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			sum.TimedOut = true
			return nil
		case <-ctx.Done():
			sum.Interrupted = true
			return nil
		}
	}
}

// tally counts the published partitions' outcomes into sum (which it
// resets) and returns them as a progress line's counts.
func tally(res *Result, sum *WaitSummary, start time.Time) Counts {
	*sum = WaitSummary{ElapsedMS: time.Since(start).Milliseconds()}
	var c Counts
	for _, p := range res.Partitions {
		if p.Outcome == nil {
			continue
		}
		switch {
		case p.Outcome.Status == audit.StatusSuccess:
			sum.Loaded++
		case p.Outcome.Status == audit.StatusCancelled:
			sum.Cancelled++
			if sum.Cancellation == "" {
				sum.Cancellation = p.Outcome.Error
			}
		case p.Outcome.Final:
			sum.Failed++
		default:
			sum.Pending++
			if p.Outcome.Status == StatusRetrying {
				c.Retrying++
			}
		}
	}
	c.Loaded, c.Failed, c.Cancelled = sum.Loaded, sum.Failed, sum.Cancelled
	return c
}

// outcome decides where a published partition stands in the run: success;
// failed for good (a fatal error, the last allowed delivery, or a dead letter
// of this run, which is how a crash shows); or still pending.
func outcome(a audit.RunAttempt, dl deadLetter, dead bool, maxDeliveries int) Outcome {
	o := Outcome{Attempts: a.Attempt, Rows: a.RowCount, Error: a.Error}
	switch {
	case a.Succeeded:
		o.Status, o.Final, o.Error = audit.StatusSuccess, true, ""
	case a.Status == audit.StatusCancelled:
		// The run was cancelled before this partition loaded (`idem
		// backfill cancel`); its error names who cancelled it.
		o.Status, o.Final = audit.StatusCancelled, true
	case a.Status == audit.StatusFailed && a.ErrorKind == audit.KindFatal:
		o.Status, o.Final, o.DLQ = audit.StatusFailed, true, string(consumer.KindFatal)
	case a.Status == audit.StatusFailed && a.Attempt >= maxDeliveries:
		o.Status, o.Final, o.DLQ = audit.StatusFailed, true, string(consumer.KindExhausted)
	case dead:
		o.Status, o.Final, o.DLQ = audit.StatusFailed, true, dl.kind
		if o.Error == "" || dl.kind == string(consumer.KindCrashed) {
			o.Error = dl.err
		}
	case a.Status == audit.StatusFailed:
		o.Status = StatusRetrying
	case a.Status == audit.StatusStarted:
		o.Status = audit.StatusStarted
	default:
		o.Status = "queued"
	}
	return o
}
