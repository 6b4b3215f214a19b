// Package reverify checks, after the warehouse may have lost its last
// commits (a promoted asynchronous standby), the events of the recent past
// against what the warehouse still records, and loads again every one whose
// verdict is gone. The events stream keeps every event it acknowledged; the
// audit says which of them the warehouse still has. Until a new server is
// verified, no other load runs on it (Verified): the loads it lost
// committed after every load it kept, so loading them again, before
// anything new, restores what was acknowledged. It never dead-letters.
//
// It reads NATS (the events stream, the consumer, the dead-letter stream)
// and hands loads to the handler; it decides no message's fate: the
// consumer still owns every delivery.
package reverify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/internal/deadletter"
	"github.com/idem-data/idem/schemas"
)

// DefaultWindow is how far back a pass looks: postgres.reverify_window's
// default.
const DefaultWindow = config.DefaultReverifyWindow

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
	// BackfillConsumer is the backfill lane's durable, which reads
	// schemas.BackfillPrefix(SubjectPrefix); "" reads the live lane only.
	BackfillConsumer string
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
	Reason   string
	Started  time.Time
	Took     time.Duration
	Window   time.Duration
	Checked  int // events of the window delivered to the consumer
	Missing  int // of those, without a verdict in the warehouse
	Reloaded int // loaded again: acknowledged, and lost by the warehouse
	Ahead    int // loaded before its own delivery ended (it was in flight or waiting for a redelivery)
	Skipped  int // already loaded (a duplicate, or loaded meanwhile)
	Failed   int // a load that failed: the event's own delivery decides
	// Resumed is the stream sequence a cut pass on the same server had
	// settled through; this pass read the window after it (0: all of it).
	Resumed uint64
	// From is the stream sequence the read of the window began at.
	From uint64
	Err  error
}

// Reverifier runs passes when asked, one at a time.
type Reverifier struct {
	cfg  Config
	wake chan struct{}
	mu   sync.Mutex
	// pending is the pass asked for and not yet begun.
	pending *request
	last    Result
	// verified is the identity of the server last verified (known says it
	// was read); held, while not nil, is closed once the server this
	// process talks to is verified: loads wait on it.
	verified audit.Identity
	known    bool
	held     chan struct{}
	// progress is how far this process's last pass got on a server: every
	// event of the window up to its stream sequence is settled there. It
	// is stored in the warehouse too (audit.StoreReverifyProgress), every
	// progressEvery events or progressPeriod, so a pass cut by a fault
	// resumes after it on the same server, in whichever replica takes the
	// lease next; on another server (a new identity) it starts again from
	// the window's beginning.
	progress progress
	// poke asks Watch to read the server's identity now.
	poke chan struct{}
}

type progress struct {
	id      audit.Identity
	through uint64
}

// A pass stores its progress after progressEvery settled events or
// progressPeriod, whichever comes first, and when it is cut: a replica
// killed mid-pass costs the next one at most that much work again.
const (
	progressEvery  = 500
	progressPeriod = 2 * time.Second
)

// request is a pass asked for.
type request struct{ reason string }

// New fills the defaults.
func New(cfg Config) *Reverifier {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Reverifier{cfg: cfg, wake: make(chan struct{}, 1), poke: make(chan struct{}, 1)}
}

func (r *Reverifier) ask(req request) {
	r.mu.Lock()
	if r.pending == nil {
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
		if req == nil {
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

// Pass checks the window once, holding the pipeline's re-verification
// lease (a replica whose turn comes after another's finds nothing left to
// do).
func (r *Reverifier) Pass(ctx context.Context, reason string) Result {
	res := Result{Reason: reason, Started: r.cfg.Now(), Window: r.cfg.Window}
	res.Err = r.pass(ctx, &res)
	res.Took = r.cfg.Now().Sub(res.Started)
	ev := r.cfg.Log.Info()
	if res.Err != nil {
		ev = r.cfg.Log.Warn().Err(res.Err)
	}
	ev.Str("reason", reason).Dur("window", res.Window).Int("checked", res.Checked).Int("missing", res.Missing).
		Int("reloaded", res.Reloaded).Int("loaded_ahead", res.Ahead).Int("skipped", res.Skipped).Int("failed", res.Failed).
		Uint64("resumed_after", res.Resumed).Uint64("from_seq", res.From).Dur("took", res.Took).Msg("warehouse re-verified: events of the window checked against the ledger")
	r.mu.Lock()
	r.last = res
	r.mu.Unlock()
	if r.cfg.Passed != nil {
		r.cfg.Passed(res)
	}
	return res
}

// The re-verification passes of a pipeline take turns through a lease
// (audit.ReverifyLease), never a session lock: a pass runs many
// transactions, which behind a transaction pooler run on any server
// connection. A replica whose pass finds the lease taken tries again every
// leasePoll. leaseTTL is how long a replica killed mid-pass keeps the
// others' passes (and so their loads) waiting; the lease is renewed every
// 5s, so a pass survives two renewals the database did not answer. A pass
// that loses it stops and the next resumes it: two passes at once would
// only load nothing twice (the ledger), so the lease is kept short.
const (
	leaseTTL  = 15 * time.Second
	leasePoll = 500 * time.Millisecond
)

func (r *Reverifier) pass(ctx context.Context, res *Result) error {
	lease, err := r.lease(ctx)
	if err != nil {
		return err
	}
	return lease.Hold(ctx, func(ctx context.Context) error { return r.verify(ctx, res) })
}

// lease waits for the pipeline's re-verification lease.
func (r *Reverifier) lease(ctx context.Context) (*audit.Lease, error) {
	name := audit.ReverifyLease(r.cfg.Pipeline)
	for {
		l, ok, err := audit.TryLease(ctx, r.cfg.DB, name, leaseTTL)
		if err != nil {
			return nil, fmt.Errorf("reverify: %w", err)
		}
		if ok {
			return l, nil
		}
		t := time.NewTimer(leasePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("reverify: waiting for another replica's pass: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
}

// verify is one pass, holding the lease. On the server a cut pass left,
// whichever replica ran it, it reads the window from where that pass
// stopped: what it settled there stays (an acknowledged commit survives a
// restart of the same server).
func (r *Reverifier) verify(ctx context.Context, res *Result) error {
	id, err := audit.CurrentIdentity(ctx, r.cfg.DB)
	if err != nil {
		return err
	}
	after, err := r.resumeAfter(ctx, id)
	if err != nil {
		return err
	}
	res.Resumed = after

	events, err := r.window(ctx, res, after)
	if err != nil {
		return err
	}
	keys := make([]audit.Delivered, len(events))
	for i, e := range events {
		keys[i] = audit.Delivered{Dataset: e.ev.Dataset, Partition: e.ev.Key.Key, StreamSeq: e.seq}
	}
	settled, err := audit.Settled(ctx, r.cfg.DB, r.cfg.Pipeline, keys)
	if err != nil {
		return err
	}
	st := &store{r: r, id: id, stored: after, at: time.Now()}
	defer st.flushCut(ctx)
	for _, e := range events {
		if settled[e.seq] {
			st.done(ctx, e.seq)
			continue
		}
		res.Missing++
		out, err := r.cfg.Loader.Handle(ctx, e.ev, handlers.Meta{StreamSeq: e.seq, Stream: r.cfg.Stream, Reverify: true})
		switch {
		case err != nil && (handlers.IsUnavailable(err) || ctx.Err() != nil):
			return fmt.Errorf("reverify: stream seq %d: %w", e.seq, err)
		case err != nil:
			res.Failed++
			r.cfg.Log.Warn().Err(err).Str("dataset", e.ev.Dataset).Str("partition", e.ev.Key.Key).Str("run_id", e.ev.RunID).
				Uint64("stream_seq", e.seq).Msg("re-verification: the load again failed; the event's delivery decides its fate")
		case out.Status == audit.StatusSkipped:
			res.Skipped++
		case !e.acked:
			res.Ahead++
		default:
			res.Reloaded++
			r.cfg.Log.Warn().Str("dataset", e.ev.Dataset).Str("partition", e.ev.Key.Key).Str("run_id", e.ev.RunID).
				Uint64("stream_seq", e.seq).Msg("re-verification: the warehouse had lost this load: loaded again")
		}
		st.done(ctx, e.seq)
	}
	st.complete = true
	if err := audit.StoreIdentity(ctx, r.cfg.DB, r.cfg.Pipeline, id); err != nil {
		return err
	}
	r.release(id)
	return nil
}

// resumeAfter is the stream sequence a cut pass on server id settled
// through: the furthest of this process's and the one stored in the
// warehouse (by any replica), 0 when neither is of id.
func (r *Reverifier) resumeAfter(ctx context.Context, id audit.Identity) (uint64, error) {
	var after uint64
	r.mu.Lock()
	if r.progress.id == id {
		after = r.progress.through
	}
	r.mu.Unlock()
	p, ok, err := audit.ReverifyProgress(ctx, r.cfg.DB, r.cfg.Pipeline)
	if err != nil {
		return 0, err
	}
	if ok && p.ID == id && p.Stream == r.cfg.Stream {
		after = max(after, p.Through)
	}
	return after, nil
}

// store keeps one pass's progress: in memory at every settled event, in
// the warehouse every progressEvery events or progressPeriod, and once
// more when the pass is cut.
type store struct {
	r        *Reverifier
	id       audit.Identity
	through  uint64 // settled through
	stored   uint64 // in the warehouse through
	at       time.Time
	complete bool
}

func (s *store) done(ctx context.Context, seq uint64) {
	s.through = seq
	s.r.mu.Lock()
	s.r.progress = progress{id: s.id, through: seq}
	s.r.mu.Unlock()
	if seq-s.stored >= progressEvery || time.Since(s.at) >= progressPeriod {
		s.flush(ctx)
	}
}

// flush stores the progress; a failure is left to the next flush (the
// progress in memory still holds for this process).
func (s *store) flush(ctx context.Context) {
	s.at = time.Now()
	if s.through <= s.stored {
		return
	}
	err := audit.StoreReverifyProgress(ctx, s.r.cfg.DB, s.r.cfg.Pipeline, audit.Progress{ID: s.id, Stream: s.r.cfg.Stream, Through: s.through})
	if err != nil {
		s.r.cfg.Log.Debug().Err(err).Uint64("through", s.through).Msg("re-verification progress not stored")
		return
	}
	s.stored = s.through
}

// flushCut stores what a cut pass settled, for the next replica, even when
// the pass's context ended (the lease lost, the process stopping); a
// warehouse that is gone refuses it in a second.
func (s *store) flushCut(ctx context.Context) {
	if s.complete {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	s.flush(fctx)
}

// Init reads the identity the pipeline last verified against and the
// server's, before the first load: a server that is not the verified one
// holds the loads and asks for a pass at once. The first identity a
// pipeline sees is recorded without one.
func (r *Reverifier) Init(ctx context.Context) error {
	cur, stored, ok, err := r.identities(ctx)
	if err != nil {
		return err
	}
	if !ok {
		if err := audit.StoreIdentity(ctx, r.cfg.DB, r.cfg.Pipeline, cur); err != nil {
			return err
		}
		stored = cur
	}
	r.mu.Lock()
	r.verified, r.known = stored, true
	r.mu.Unlock()
	if stored != cur {
		r.hold(fmt.Sprintf("the warehouse is not the one last verified (%s, now %s)", stored, cur))
	}
	return nil
}

// Connected is the pool's AfterConnect: a new session on a server that is
// not the verified one holds the loads before any of them can use it, and
// asks for a pass. It never refuses the session (the pass needs it).
func (r *Reverifier) Connected(ctx context.Context, conn *pgx.Conn) error {
	r.mu.Lock()
	known, verified := r.known, r.verified
	r.mu.Unlock()
	if !known {
		return nil
	}
	cur, err := audit.CurrentIdentity(ctx, conn)
	if err != nil || cur == verified {
		return nil // a standby or an unreadable identity: the loads' own errors tell
	}
	r.hold(fmt.Sprintf("the warehouse is not the one last verified (%s, now %s)", verified, cur))
	return nil
}

// hold stops the loads until a pass verifies the server, and asks for one.
func (r *Reverifier) hold(reason string) {
	r.mu.Lock()
	first := r.held == nil
	if first {
		r.held = make(chan struct{})
	}
	r.mu.Unlock()
	if first {
		r.cfg.Log.Warn().Str("reason", reason).Msg("loads wait for the re-verification of the warehouse")
	}
	r.ask(request{reason: reason})
}

func (r *Reverifier) release(id audit.Identity) {
	r.mu.Lock()
	r.verified, r.known = id, true
	held := r.held
	r.held = nil
	r.mu.Unlock()
	if held != nil {
		close(held)
		r.cfg.Log.Info().Msg("warehouse verified: loads resume")
	}
}

// Verified returns once no pass is holding the loads, or with ctx's error
// (the handler's Verified).
func (r *Reverifier) Verified(ctx context.Context) error {
	r.mu.Lock()
	held := r.held
	r.mu.Unlock()
	if held == nil {
		return nil
	}
	select {
	case <-held:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
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
//
// after, when not 0, is a stream sequence a cut pass on this server settled
// through: the read starts after it.
func (r *Reverifier) window(ctx context.Context, res *Result, after uint64) ([]event, error) {
	since := r.cfg.Now().Add(-r.cfg.Window)
	// Each lane's durable has its own position in the one stream.
	type lane struct {
		consumer, prefix string
		delivered, floor uint64
	}
	lanes := []*lane{{consumer: r.cfg.Consumer, prefix: r.cfg.SubjectPrefix}}
	if r.cfg.BackfillConsumer != "" {
		lanes = append(lanes, &lane{consumer: r.cfg.BackfillConsumer, prefix: schemas.BackfillPrefix(r.cfg.SubjectPrefix)})
	}
	var delivered uint64
	var filters []string
	for i, l := range lanes {
		c, err := r.cfg.JS.Consumer(ctx, r.cfg.Stream, l.consumer)
		if i > 0 && errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue // not created yet: nothing delivered on that lane
		}
		if err != nil {
			return nil, fmt.Errorf("reverify: consumer %s: %w", l.consumer, err)
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("reverify: consumer %s: %w", l.consumer, err)
		}
		l.delivered, l.floor = ci.Delivered.Stream, ci.AckFloor.Stream
		delivered = max(delivered, l.delivered)
		filters = append(filters, l.prefix+".>")
	}
	if delivered == 0 {
		return nil, nil
	}
	laneOf := func(subject string) *lane {
		for _, l := range lanes[1:] {
			if strings.HasPrefix(subject, l.prefix+".") {
				return l
			}
		}
		return lanes[0]
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
			last = max(last, seq)
			drained = md.NumPending == 0
			if seq >= delivered {
				done = true
			}
			if md.Timestamp.Before(since) {
				continue // resumed after a sequence older than the window
			}
			if seq > delivered {
				continue
			}
			l := laneOf(m.Subject())
			if seq > l.delivered {
				continue // its lane's consumer has not had it yet
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
		if n > 0 && !drained {
			stalls = 0
			continue
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
		if n > 0 {
			stalls = 0
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
		case <-r.poke:
		}
	}
}

// Recheck asks Watch to read the server's identity now (the warehouse is
// back after an outage). A server that is the verified one asks for no
// pass and holds nothing: a restart or a reconnect loses no commit that
// was acknowledged; only a new identity (a promoted standby, a restored
// cluster) holds the loads for a pass.
func (r *Reverifier) Recheck() {
	select {
	case r.poke <- struct{}{}:
	default:
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
		r.hold(fmt.Sprintf("the warehouse is not the one last verified (%s, now %s)", stored, cur))
	}
}

func (r *Reverifier) identities(ctx context.Context) (cur, stored audit.Identity, ok bool, err error) {
	if cur, err = audit.CurrentIdentity(ctx, r.cfg.DB); err != nil {
		return cur, stored, false, err
	}
	stored, ok, err = audit.StoredIdentity(ctx, r.cfg.DB, r.cfg.Pipeline)
	return cur, stored, ok, err
}
