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
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/handlers"
	"github.com/idem-data/idem/internal/config"
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
	// progress is how far this process's last pass got (progress.go).
	progress audit.Progress
	// poke asks Watch to read the server's identity now.
	poke chan struct{}
}

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
func (r *Reverifier) verify(ctx context.Context, res *Result) (err error) {
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
	pt := r.track(id, after)
	defer func() {
		if err != nil {
			pt.flushCut(ctx)
		}
	}()
	for _, e := range events {
		if settled[e.seq] {
			pt.settled(ctx, e.seq)
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
		pt.settled(ctx, e.seq)
	}
	if err := audit.StoreIdentity(ctx, r.cfg.DB, r.cfg.Pipeline, id); err != nil {
		return err
	}
	r.release(id)
	return nil
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
