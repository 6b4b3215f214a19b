package handlers

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/strategies"
)

// DefaultMaxGroup is how many events of one dataset a group load takes at
// most when Handler.MaxGroup is 0.
const DefaultMaxGroup = 8

// GroupSize is how many events of ev's dataset, ev among them, one load
// may take: 1 when the dataset's loads cannot share a transaction (merge,
// whose loads take savepoints and may need a round trip of their own to
// change route; truncate_partition; checks that run statements; a join
// downstream) or grouping is off.
func (h *Handler) GroupSize(ev schemas.Event) int {
	n := h.MaxGroup
	if n == 0 {
		n = DefaultMaxGroup
	}
	if n < 2 {
		return 1
	}
	ds, ok := h.dataset(ev.Dataset)
	if !ok || !h.groupable(ds) {
		return 1
	}
	return n
}

func (h *Handler) groupable(ds *Dataset) bool {
	gl, ok := ds.Strategy.(strategies.GroupLoader)
	// A source asked before each attempt (ready_when, a fingerprint) is
	// asked per event: such a dataset loads its events one by one.
	if !ok || !gl.Groupable() || !ds.prepared.Load() || ds.Stage != nil || ds.Ready != nil || ds.Fingerprint != nil {
		return false
	}
	// A dataset that keeps versions archives each partition's rows before
	// its load, reading the archive's columns first (and changing them
	// when the target's did): a round trip of its own per event, which a
	// group's pipelined trips have no room for.
	if ds.Archive != nil && ds.Archive.Keep > 0 {
		return false
	}
	if produced, _ := ds.Strategy.Counts(); ds.Checks != nil && (!ds.Checks.CountsOnly() || !produced) {
		return false
	}
	for _, down := range ds.Then {
		if d, ok := h.dataset(down); ok && len(d.Upstreams) > 1 {
			return false // a join asks its other upstreams in a round trip of its own
		}
	}
	return true
}

// member is one event of a group load.
type member struct {
	l   *loading
	b   audit.Begun
	res *strategies.Result
	out Outcome
	err error
	// how it ends in the group: loaded, or its result decided alone (a
	// skip, a spent budget), or left to load alone after the group (its
	// lock was held, or the group fell back).
	state memberState
}

type memberState int

// A member's state, from the group's first round trip on.
const (
	memberLoading       memberState = iota // loads in the group
	memberAlreadyLoaded                    // the ledger under the lock says its run loaded: skipped in the group
	memberDecided                          // its outcome is decided (skipped before the load, budget spent, invalid)
	memberLoadsAlone                       // loads alone, after the group (its lock was held, or the group fell back)
	memberCancelled                        // the begin found its backfill cancelled: recorded after the group
)

// HandleGroup loads evs, events of one dataset for distinct partitions
// (the caller's promise), in one transaction: one round trip for their
// audit statements, their locks (tried, never waited for) and ledger
// checks, one for their loads, one for their successes, results and
// downstream events with the COMMIT. Each event keeps its own fate: a
// skip or a spent budget is its own outcome, an event whose lock another
// load holds loads alone afterwards, and if anything fails in the group
// (an empty partition, a constraint, a refused check, a lost connection)
// the transaction rolls back and every event that was loading loads alone,
// reusing the `started` row the group committed, so a bad partition fails
// by itself and its attempt is counted once. outs and errs are evs'.
func (h *Handler) HandleGroup(ctx context.Context, evs []schemas.Event, ms []Meta) (outs []Outcome, errs []error) {
	outs, errs = make([]Outcome, len(evs)), make([]error, len(evs))
	if len(evs) == 1 {
		outs[0], errs[0] = h.Handle(ctx, evs[0], ms[0])
		return outs, errs
	}
	mems := make([]*member, len(evs))
	var (
		ds      *Dataset
		asked   []int
		as      []audit.Attempt
		askedMs []Meta
	)
	for i, ev := range evs {
		d, a, log, err := h.attempt(ctx, ev, ms[i])
		if err != nil {
			errs[i] = err
			continue
		}
		mems[i] = &member{l: &loading{h: h, ds: d, a: a, key: ev.Key, m: ms[i], log: log, started: time.Now()}}
		asked, as, askedMs = append(asked, i), append(as, a), append(askedMs, ms[i])
	}
	// Whether an operator cancelled any of them: one statement for all.
	if len(as) > 0 {
		couts, cdone, cerrs := h.cancelledEach(ctx, as, askedMs)
		for j, i := range asked {
			if cdone[j] || cerrs[j] != nil {
				outs[i], errs[i], mems[i] = couts[j], cerrs[j], nil
				continue
			}
			ds = mems[i].l.ds
		}
	}
	if ds == nil {
		return outs, errs
	}
	same := true
	for _, m := range mems {
		same = same && (m == nil || m.l.ds == ds)
	}
	if !same || !h.groupable(ds) {
		// Not yet prepared, or changed by a reload while the group formed.
		for i, m := range mems {
			if m != nil {
				outs[i], errs[i] = h.Handle(ctx, evs[i], ms[i])
			}
		}
		return outs, errs
	}
	h.unrecorded.flush(ctx, h.DB, h.Log)
	c, err := h.DB.Acquire(ctx)
	if err != nil {
		for i, m := range mems {
			if m != nil {
				errs[i] = classifyBeforeLoad(fmt.Errorf("audit: begin: %w", err))
			}
		}
		return outs, errs
	}
	g := &group{h: h, ds: ds, c: c.Conn(), mems: mems}
	loaded := g.load(ctx)
	if f := g.first(); f != nil {
		f.l.close(ctx) // a transaction left open by a failure
	}
	c.Release()
	for _, m := range mems {
		if m != nil {
			m.l.c = nil // back in the pool
		}
	}
	if loaded && h.Enqueued != nil {
		h.Enqueued()
	}
	// What the group left: each alone, on a connection of its own, with
	// the `started` row the group committed.
	for i, m := range mems {
		if m == nil {
			continue
		}
		switch m.state {
		case memberLoadsAlone:
			m.out, m.err = h.loadAlone(ctx, m)
		case memberCancelled:
			m.out, m.err = h.cancelledMeanwhile(ctx, m.l.a, m.l.m)
		}
		outs[i], errs[i] = m.out, m.err
	}
	return outs, errs
}

// loadAlone loads m by itself, its audit statement already committed.
func (h *Handler) loadAlone(ctx context.Context, m *member) (Outcome, error) {
	c, err := h.DB.Acquire(ctx)
	if err != nil {
		// The `started` row is committed: this attempt ran, and failed.
		l := m.l
		return h.failed(ctx, l, m.b, fmt.Errorf("audit: begin: %w", err))
	}
	defer c.Release()
	l := &loading{h: h, ds: m.l.ds, a: m.l.a, key: m.l.key, m: m.l.m, c: c.Conn(), log: m.l.log, started: m.l.started}
	defer l.close(ctx)
	return h.run(ctx, l, m.b, l.open(ctx))
}

// group is one group load on one connection.
type group struct {
	h    *Handler
	ds   *Dataset
	c    *pgx.Conn
	mems []*member
}

// each calls fn for every member in state s.
func (g *group) each(s memberState, fn func(m *member)) {
	for _, m := range g.mems {
		if m != nil && m.state == s {
			fn(m)
		}
	}
}

// fallBack rolls the group's transaction back and leaves every member
// that was loading or skipping in it to load alone.
func (g *group) fallBack(ctx context.Context, why error) {
	first := g.first()
	if first != nil {
		first.l.close(ctx)
		first.l.log.Info().Err(why).Msg("group load rolled back: its events load one at a time")
	}
	for _, m := range g.mems {
		if m != nil && (m.state == memberLoading || m.state == memberAlreadyLoaded) {
			m.state = memberLoadsAlone
			m.l.checked, m.l.recorded = nil, false
		}
	}
}

// failUnstarted ends every loading member with err when no audit row of
// the group was written: each message is retried as if it had never been
// handled.
func (g *group) failUnstarted(err error) bool {
	g.each(memberLoading, func(m *member) { m.state, m.err = memberDecided, classifyBeforeLoad(err) })
	return false
}

func (g *group) first() *member {
	for _, m := range g.mems {
		if m != nil {
			return m
		}
	}
	return nil
}

// load runs the group's three round trips and reports whether it
// committed loads.
func (g *group) load(ctx context.Context) bool {
	h := g.h
	for _, m := range g.mems {
		if m != nil {
			m.l.c = g.c
		}
	}
	// Round trip 1: every audit statement, one COMMIT, then the load's
	// transaction with every lock tried and ledger checked.
	// The audit statements are one, set-based, for the whole group.
	committed, began := false, false
	b := &pgx.Batch{}
	var gbs []audit.GroupBegin
	for _, m := range g.mems {
		if m != nil {
			gbs = append(gbs, audit.GroupBegin{Attempt: m.l.a, Budget: m.l.m.MaxAttempts, SkipResult: m.l.skipResult(), Into: &m.b})
		}
	}
	if err := audit.QueueBeginGroup(b, gbs, &began); err != nil {
		return g.failUnstarted(err)
	}
	if h.beforeBegin != nil {
		h.beforeBegin()
	}
	b.Queue("COMMIT").Exec(func(pgconn.CommandTag) error { committed = true; return nil })
	first := g.first()
	first.l.queueSettings(b)
	// Every lock tried in one statement, every ledger checked in the next
	// (a snapshot taken once the locks are held), one fingerprint of the
	// target for the group: the first member's.
	var (
		keys   []string
		locked []*bool
		ls     []audit.RunLookup
	)
	for _, m := range g.mems {
		if m != nil {
			l := m.l
			keys = append(keys, audit.PartitionLockKey(l.a.Pipeline, l.a.Dataset, l.a.Partition))
			locked = append(locked, &l.locked)
			ls = append(ls, audit.RunLookup{RunKey: l.a.RunKey, Force: l.a.Force, Seq: l.a.StreamSeq, Done: &l.alreadyLoaded})
		}
	}
	audit.QueueTryLocks(b, keys, locked)
	if err := audit.QueueLookupRuns(b, ls); err != nil {
		return g.failUnstarted(err)
	}
	// Each retraction by a statement of its own, a probe of the
	// partition's index (audit's plan tests hold it there).
	for _, m := range g.mems {
		if m != nil && !m.l.a.Force {
			audit.QueueRetracted(b, m.l.a.RunKey, &m.l.retracted)
		}
	}
	for _, m := range g.mems {
		if m == nil {
			continue
		}
		if m == first {
			m.l.queueDescribe(b, nil)
		} else {
			m.l.queueDescribe(b, first.l.plan)
		}
	}
	b.Queue(customPlans)
	err := g.c.SendBatch(ctx, b).Close()
	if !committed {
		// Nothing of the batch committed: no attempt ran.
		first.l.close(ctx)
		return g.failUnstarted(err)
	}
	for _, m := range g.mems {
		if m == nil {
			continue
		}
		m.l.begun = began
		m.l.log = m.l.log.With().Int("attempt", m.b.Attempt).Logger()
		switch {
		case m.b.Paused && m.b.ID == 0:
			m.state, m.err = memberDecided, &PausedError{Dataset: m.l.a.Dataset}
			m.l.log.Info().Msg("dataset paused: no attempt began, the message goes back for later")
		case m.b.Cancelled && m.b.ID == 0:
			m.state = memberCancelled
		case m.b.Spent:
			m.state, m.err = memberDecided, &BudgetSpentError{Attempts: m.b.Prior, LastDied: m.b.LastDied}
			m.l.log.Warn().Err(m.err).Msg("retry budget spent: not loading again")
		case m.b.Skipped:
			m.state = memberDecided
			m.l.log.Info().Msg("run already succeeded: skipped")
			if err := m.l.skipped(ctx, m.b.ID, m.b.ResultWritten); err != nil {
				m.err = classifyBeforeLoad(err)
			} else {
				m.out = Outcome{Status: audit.StatusSkipped, AuditID: m.b.ID}
			}
		default:
			m.l.a.Attempt = m.b.Attempt
			if h.Started != nil {
				h.Started(m.l.a.Dataset, m.l.a.RunID, m.b.Attempt)
			}
			switch {
			case err != nil:
				m.state = memberLoadsAlone
			case !m.l.locked:
				// Another load holds its partition: never wait inside a group.
				m.state = memberLoadsAlone
			case m.l.alreadyLoaded || m.l.retracted != "":
				m.state = memberAlreadyLoaded
			default:
				m.state = memberLoading
			}
		}
	}
	if err != nil {
		g.fallBack(ctx, err)
		return false
	}
	n := 0
	g.each(memberLoading, func(*member) { n++ })
	if n == 0 && !g.any(memberAlreadyLoaded) {
		first.l.close(ctx)
		return false
	}
	// Round trip 2: every load, in as few statements as the strategy can
	// (delete_insert: one DELETE and one INSERT for the group).
	tx := &connTx{c: g.c}
	gl := g.ds.Strategy.(strategies.GroupLoader)
	b = &pgx.Batch{}
	var (
		loading []*member
		plans   []*strategies.Plan
		params  []strategies.Params
	)
	g.each(memberLoading, func(m *member) {
		loading, plans, params = append(loading, m), append(plans, m.l.plan), append(params, m.l.params())
	})
	var refused error
	if len(loading) > 0 {
		res, endLoads, err := gl.QueueLoads(ctx, tx, plans, params, b)
		if err != nil {
			g.fallBack(ctx, err)
			return false
		}
		for i, m := range loading {
			m.res = res[i]
		}
		err = g.c.SendBatch(ctx, b).Close()
		if ferr := endLoads(err); ferr != nil {
			g.fallBack(ctx, ferr)
			return false
		}
	}
	g.each(memberLoading, func(m *member) {
		if refused != nil || g.ds.Checks == nil {
			return
		}
		baseline := int64(0)
		if _, replaced := g.ds.Strategy.Counts(); replaced && m.res.Deleted >= 0 {
			baseline = m.res.Deleted
		}
		m.l.checked = g.ds.Checks.FromCounts(m.res.Inserted, baseline)
		refused = checks.Refused(m.l.checked)
	})
	if refused != nil {
		g.fallBack(ctx, refused)
		return false
	}
	// Round trip 3: the skips the ledger found under the locks, the
	// successes and all they leave for others, one COMMIT (finish).
	var es []ending
	for _, m := range g.mems {
		switch {
		case m == nil:
		case m.state == memberAlreadyLoaded:
			es = append(es, ending{l: m.l, id: m.b.ID})
		case m.state == memberLoading:
			es = append(es, ending{l: m.l, id: m.b.ID, res: m.res})
		}
	}
	if err := h.finish(ctx, g.c, es); err != nil {
		g.fallBack(ctx, err)
		return false
	}
	// Committed: the results and downstream events wait in the outbox.
	for _, m := range g.mems {
		if m == nil {
			continue
		}
		switch m.state {
		case memberAlreadyLoaded:
			m.state, m.out = memberDecided, Outcome{Status: audit.StatusSkipped, AuditID: m.b.ID}
			m.l.log.Info().Msg("a concurrent delivery of this run succeeded first: skipped")
		case memberLoading:
			r := *m.res
			m.state, m.out = memberDecided, Outcome{Status: audit.StatusSuccess, AuditID: m.b.ID, Rows: r, Checks: m.l.checked,
				SchemaChanges: m.l.plan.SchemaChanges()}
			m.l.log.Info().Int64("rows_inserted", r.Inserted).Int64("rows_updated", r.Updated).Int64("rows_deleted", r.Deleted).
				Str("route", r.Route).Int("group", n).Msg("loaded")
		}
	}
	return true
}

func (g *group) any(s memberState) bool {
	for _, m := range g.mems {
		if m != nil && m.state == s {
			return true
		}
	}
	return false
}
