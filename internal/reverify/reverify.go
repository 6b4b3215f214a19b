// Package reverify checks, after the warehouse may have lost its last
// commits (a promoted asynchronous standby), the events of the recent past
// against what the warehouse still records, and loads again every one whose
// verdict is gone. The events stream keeps every event it acknowledged; the
// audit says which of them the warehouse still has. It never dead-letters
// and never loads over a newer load of the same partition.
//
// It reads NATS (the events stream, the consumer, the dead-letter stream)
// and hands loads to the handler; it decides no message's fate: the
// consumer still owns every delivery.
package reverify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/schemas"
)

// DefaultWindow is how far back a pass looks.
const DefaultWindow = 15 * time.Minute

// Loader is the part of the handler a pass uses.
type Loader interface {
	Handle(ctx context.Context, ev schemas.Event, m handlers.Meta) (handlers.Outcome, error)
	Lookup(dataset string) (schemas.PartitionType, bool)
}

// Config is what a Reverifier needs.
type Config struct {
	JS               jetstream.JetStream
	Stream, Consumer string // the events stream and the durable consumer
	SubjectPrefix    string // of events: <prefix>.<dataset>
	DLQStream        string
	DLQSubjectPrefix string
	DB               *pgxpool.Pool
	Pipeline         string
	Loader           Loader
	Window           time.Duration // default DefaultWindow
	Log              zerolog.Logger
	Now              func() time.Time
	// Passed, when set, is called after each pass with its result.
	Passed func(Result)
}

// Result is one pass.
type Result struct {
	Reason     string
	Started    time.Time
	Took       time.Duration
	Window     time.Duration
	Checked    int // events of the window delivered to the consumer
	Missing    int // of those, without a verdict in the warehouse
	Reloaded   int // loaded again: acknowledged, and lost by the warehouse
	Ahead      int // loaded before its own delivery ended (it was in flight or waiting for a redelivery)
	Skipped    int // already loaded (a duplicate, or loaded meanwhile)
	Superseded int // not loaded over a later event's load of the partition
	Failed     int // a load that failed: the event's own delivery decides
	Err        error
}

// Reverifier runs passes when asked, one at a time.
type Reverifier struct {
	cfg  Config
	wake chan struct{}
	mu   sync.Mutex
	// pending is the pass asked for and not yet begun.
	pending *request
	last    Result
}

// request is a pass asked for; ifChanged passes run only if the warehouse's
// identity still differs from the stored one when their turn comes (a pass
// that ran meanwhile stored it).
type request struct {
	reason    string
	ifChanged bool
}

// New fills the defaults.
func New(cfg Config) *Reverifier {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Reverifier{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Trigger asks for a pass; a pass already asked for and not begun covers
// this one too.
func (r *Reverifier) Trigger(reason string) { r.ask(request{reason: reason}) }

func (r *Reverifier) ask(req request) {
	r.mu.Lock()
	if r.pending == nil || r.pending.ifChanged && !req.ifChanged {
		r.pending = &req
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Reverifier) take() *request {
	r.mu.Lock()
	defer r.mu.Unlock()
	req := r.pending
	r.pending = nil
	return req
}

// Last is the last pass's result (zero before the first).
func (r *Reverifier) Last() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// retryDelay: a pass that could not finish (the warehouse went away again,
// NATS unreachable) is tried again after it.
const retryDelay = 5 * time.Second

// Run runs a pass for each trigger until ctx ends.
func (r *Reverifier) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		req := r.take()
		if req == nil || req.ifChanged && !r.changed(ctx) {
			continue
		}
		res := r.Pass(ctx, req.reason)
		if res.Err != nil && ctx.Err() == nil {
			r.cfg.Log.Warn().Err(res.Err).Str("reason", req.reason).Dur("retry_in", retryDelay).Msg("re-verification did not finish: trying again")
			t := time.NewTimer(retryDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			r.ask(*req)
		}
	}
}

// Pass checks the window once, holding the pipeline's re-verification lock
// (a replica whose turn comes after another's finds nothing left to do).
func (r *Reverifier) Pass(ctx context.Context, reason string) Result {
	res := Result{Reason: reason, Started: r.cfg.Now(), Window: r.cfg.Window}
	res.Err = r.pass(ctx, &res)
	res.Took = r.cfg.Now().Sub(res.Started)
	ev := r.cfg.Log.Info()
	if res.Err != nil {
		ev = r.cfg.Log.Warn().Err(res.Err)
	}
	ev.Str("reason", reason).Dur("window", res.Window).Int("checked", res.Checked).Int("missing", res.Missing).
		Int("reloaded", res.Reloaded).Int("loaded_ahead", res.Ahead).Int("skipped", res.Skipped).Int("superseded", res.Superseded).Int("failed", res.Failed).
		Dur("took", res.Took).Msg("warehouse re-verified: events of the window checked against the ledger")
	r.mu.Lock()
	r.last = res
	r.mu.Unlock()
	if r.cfg.Passed != nil {
		r.cfg.Passed(res)
	}
	return res
}

func (r *Reverifier) pass(ctx context.Context, res *Result) error {
	conn, err := r.cfg.DB.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("reverify: %w", err)
	}
	defer conn.Release()
	key := audit.ReverifyLockKey(r.cfg.Pipeline)
	if _, err := conn.Exec(ctx, audit.SessionLockSQL, key); err != nil {
		return fmt.Errorf("reverify: lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, audit.SessionUnlockSQL, key); err != nil {
			// A session that lost its lock state must not go back to the pool.
			_ = conn.Conn().Close(uctx)
		}
	}()
	id, err := audit.CurrentIdentity(ctx, conn)
	if err != nil {
		return err
	}

	events, err := r.window(ctx, res)
	if err != nil {
		return err
	}
	keys := make([]audit.Delivered, len(events))
	for i, e := range events {
		keys[i] = audit.Delivered{Dataset: e.ev.Dataset, Partition: e.ev.Key.Key, StreamSeq: e.seq}
	}
	settled, err := audit.Settled(ctx, conn, r.cfg.Pipeline, keys)
	if err != nil {
		return err
	}
	for _, e := range events {
		if settled[e.seq] {
			continue
		}
		res.Missing++
		out, err := r.cfg.Loader.Handle(ctx, e.ev, handlers.Meta{StreamSeq: e.seq, Reverify: true})
		switch {
		case err != nil && (handlers.IsUnavailable(err) || ctx.Err() != nil):
			return fmt.Errorf("reverify: stream seq %d: %w", e.seq, err)
		case err != nil:
			res.Failed++
			r.cfg.Log.Warn().Err(err).Str("dataset", e.ev.Dataset).Str("partition", e.ev.Key.Key).Str("run_id", e.ev.RunID).
				Uint64("stream_seq", e.seq).Msg("re-verification: the load again failed; the event's delivery decides its fate")
		case out.Superseded:
			res.Superseded++
		case out.Status == audit.StatusSkipped:
			res.Skipped++
		case !e.acked:
			res.Ahead++
		default:
			res.Reloaded++
			r.cfg.Log.Warn().Str("dataset", e.ev.Dataset).Str("partition", e.ev.Key.Key).Str("run_id", e.ev.RunID).
				Uint64("stream_seq", e.seq).Msg("re-verification: the warehouse had lost this load: loaded again")
		}
	}
	return audit.StoreIdentity(ctx, r.cfg.DB, r.cfg.Pipeline, id)
}

type event struct {
	seq   uint64
	ev    schemas.Event
	acked bool // at or below the consumer's ack floor
}

// window reads the events of the window that the consumer has been given
// at least once (later ones are its to load), in stream order, leaving out
// those whose dead letter is in the dead-letter stream (their fate was
// decided) and those that do not decode (they were dead-lettered too).
func (r *Reverifier) window(ctx context.Context, res *Result) ([]event, error) {
	since := r.cfg.Now().Add(-r.cfg.Window)
	c, err := r.cfg.JS.Consumer(ctx, r.cfg.Stream, r.cfg.Consumer)
	if err != nil {
		return nil, fmt.Errorf("reverify: consumer %s: %w", r.cfg.Consumer, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reverify: consumer %s: %w", r.cfg.Consumer, err)
	}
	delivered, floor := ci.Delivered.Stream, ci.AckFloor.Stream
	if delivered == 0 {
		return nil, nil
	}
	dead := map[uint64]bool{}
	store, err := deadletter.Open(ctx, r.cfg.JS, deadletter.Config{Stream: r.cfg.DLQStream, SubjectPrefix: r.cfg.DLQSubjectPrefix, EventsStream: r.cfg.Stream})
	if err != nil {
		return nil, fmt.Errorf("reverify: %w", err)
	}
	letters, err := store.List(ctx, deadletter.Filter{Since: since.Add(-time.Minute)}, false)
	if err != nil {
		return nil, fmt.Errorf("reverify: %w", err)
	}
	for _, l := range letters {
		if l.OriginalStream == "" || l.OriginalStream == r.cfg.Stream {
			dead[l.OriginalSeq] = true
		}
	}

	s, err := r.cfg.JS.Stream(ctx, r.cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("reverify: stream %s: %w", r.cfg.Stream, err)
	}
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.cfg.SubjectPrefix + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &since,
	})
	if err != nil {
		return nil, fmt.Errorf("reverify: read %s: %w", r.cfg.Stream, err)
	}
	var out []event
	for {
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("reverify: read %s: %w", r.cfg.Stream, err)
		}
		n, done := 0, false
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			seq := md.Sequence.Stream
			if seq > delivered {
				done = true
				continue
			}
			if md.NumPending == 0 {
				done = true
			}
			res.Checked++
			if dead[seq] {
				continue
			}
			ev, err := schemas.Decode(m.Subject(), m.Data(), r.cfg.Loader.Lookup)
			if err != nil {
				continue
			}
			out = append(out, event{seq: seq, ev: ev, acked: seq <= floor})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("reverify: read %s: %w", r.cfg.Stream, err)
		}
		if done || n == 0 {
			return out, nil
		}
	}
}

// Watch reads the warehouse's identity at once and every interval, and asks
// for a pass when it is not the one the pipeline last verified against (a
// promoted standby has a new timeline; a restored cluster may have another
// system). The first identity a pipeline sees is recorded without a pass.
func (r *Reverifier) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		r.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Reverifier) check(ctx context.Context) {
	cur, stored, ok, err := r.identities(ctx)
	switch {
	case err != nil:
		r.cfg.Log.Debug().Err(err).Msg("warehouse identity not read")
	case !ok:
		if err := audit.StoreIdentity(ctx, r.cfg.DB, r.cfg.Pipeline, cur); err != nil {
			r.cfg.Log.Debug().Err(err).Msg("warehouse identity not stored")
		}
	case stored != cur:
		r.ask(request{reason: fmt.Sprintf("the warehouse is not the one last verified (%s, now %s)", stored, cur), ifChanged: true})
	}
}

// changed says whether the warehouse's identity differs from the stored
// one; true when it cannot tell.
func (r *Reverifier) changed(ctx context.Context) bool {
	cur, stored, ok, err := r.identities(ctx)
	return err != nil || !ok || cur != stored
}

func (r *Reverifier) identities(ctx context.Context) (cur, stored audit.Identity, ok bool, err error) {
	if cur, err = audit.CurrentIdentity(ctx, r.cfg.DB); err != nil {
		return cur, stored, false, err
	}
	stored, ok, err = audit.StoredIdentity(ctx, r.cfg.DB, r.cfg.Pipeline)
	return cur, stored, ok, err
}
