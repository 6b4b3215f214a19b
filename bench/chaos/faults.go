package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
)

// Fault kinds, as the report names them.
const (
	FaultKill        = "kill"
	FaultCrashCommit = "crash_commit" // from the crash hook, not the schedule
	FaultPause       = "pause"
	FaultPGFast      = "pg_fast"
	FaultPGImmediate = "pg_immediate"
	FaultPGTerminate = "pg_terminate"
	FaultNATSRestart = "nats_restart"
	FaultLatency     = "latency"
	FaultResetPeer   = "reset_peer"
	FaultTimeout     = "timeout"
	// FaultPoolerRestart is drawn only with Options.PoolMode (pooler.go).
	FaultPoolerRestart = "pooler_restart"
	// FaultSourceFailover is drawn only when Options.Kinds names it, with
	// Options.PGSource (faults_source.go).
	FaultSourceFailover = "replica_source_failover"

	// The cluster faults (Options.Cluster): servers of the NATS cluster
	// killed, stopped, partitioned away or restarted one by one, and the
	// links between idem (and the publisher) and NATS disturbed.
	FaultLeaderKill    = "leader_kill"    // SIGKILL of the events stream's leader, restarted 0-3 s later
	FaultFollowerKill  = "follower_kill"  // SIGKILL of a follower of the events stream, restarted 0-3 s later
	FaultNodeDown      = "node_down"      // a server stopped (SIGTERM) for longer than a leader election
	FaultPartition     = "partition"      // one server's routes blackholed both ways: a minority of one
	FaultNATSRolling   = "nats_rolling"   // every server restarted in turn, each healthy before the next
	FaultNATSLatency   = "nats_latency"   // latency on the client links
	FaultNATSReset     = "nats_reset"     // reset_peer on the client links
	FaultNATSBlackhole = "nats_blackhole" // timeout toxic on the client links: data dropped, no clean close

	// The long faults: outages, a deploy and a failover, placed by the
	// schedule rather than drawn, LongRounds times each.
	FaultWarehouseDown  = "warehouse_down"
	FaultNATSDown       = "nats_down"
	FaultRollingRestart = "rolling_restart"
	FaultFailover       = "failover" // failover.go
)

// longKinds are the long faults of one round.
var longKinds = []string{FaultWarehouseDown, FaultNATSDown, FaultRollingRestart, FaultFailover}

// resumeAllowance is the time the schedule leaves after a warehouse outage
// for idem to notice the warehouse is back: its longest delay between two
// probes of an open circuit (consumer.DefaultMaxProbeDelay). The nemesis
// waits until idem loads again, at most twice that (resumeBound), before
// the next fault: a deploy right after the outage would restart the
// processes and hide whether they resume by themselves.
const (
	resumeAllowance = 30 * time.Second
	resumeBound     = 2 * resumeAllowance
)

// planned is the time the schedule gives f before the next fault's gap.
func planned(f *fault) time.Duration {
	switch f.Kind {
	case FaultWarehouseDown:
		return f.Hold + resumeAllowance
	case FaultFailover:
		return f.Hold + failoverPlan
	}
	return f.Hold
}

// rollingRestartPlan is the time the schedule sets aside for a rolling
// restart: per replica, a graceful exit, the supervisor's restart delay and
// a start. The real one takes what it takes; later faults wait for it.
func rollingRestartPlan(replicas int) time.Duration { return time.Duration(replicas) * 3 * time.Second }

// weightedKind is a kind of short fault and how often it is drawn.
type weightedKind struct {
	kind   string
	weight int
}

// faultWeights is how often each scheduled kind is drawn.
var faultWeights = []weightedKind{
	{FaultKill, 22},
	{FaultPause, 12},
	{FaultPGFast, 7},
	{FaultPGImmediate, 7},
	{FaultPGTerminate, 8},
	{FaultNATSRestart, 10},
	{FaultLatency, 10},
	{FaultResetPeer, 12},
	{FaultTimeout, 12},
}

// clusterFaultWeights replace faultWeights in the cluster topology: the
// same faults of idem and PostgreSQL, and the cluster's own instead of the
// single server's restart.
var clusterFaultWeights = []weightedKind{
	{FaultKill, 14},
	{FaultPause, 7},
	{FaultPGFast, 4},
	{FaultPGImmediate, 4},
	{FaultPGTerminate, 4},
	{FaultLatency, 4},
	{FaultResetPeer, 5},
	{FaultTimeout, 5},
	{FaultLeaderKill, 12},
	{FaultFollowerKill, 7},
	{FaultNodeDown, 5},
	{FaultPartition, 8},
	{FaultNATSRolling, 3},
	{FaultNATSLatency, 5},
	{FaultNATSReset, 6},
	{FaultNATSBlackhole, 6},
}

// poolerWeight is how often pooler_restart is drawn when the replicas are
// behind a pooler: as often as pg_terminate, the other fault that drops
// every idem connection at once.
func poolerWeight(weights []weightedKind) int {
	for _, w := range weights {
		if w.kind == FaultPGTerminate {
			return w.weight
		}
	}
	return 1
}

// natsServers is what the nemesis stops and starts for nats_restart and
// nats_down: the one server, or every server of the cluster.
type natsServers interface {
	down()
	up() error
}

// fault is one entry of the schedule and, once run, of the history.
type fault struct {
	Kind    string        `json:"kind"`
	At      time.Duration `json:"-"` // planned offset in the fault phase
	Replica int           `json:"replica,omitempty"`
	Hold    time.Duration `json:"-"` // how long the fault lasts
	Param   int           `json:"param,omitempty"`
	// Node is the NATS server a cluster fault targets (-1: all of them);
	// Server names the one it hit, as the cluster knows it.
	Node   int       `json:"node,omitempty"`
	Server string    `json:"server,omitempty"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	// Outage is how long the server was down, measured from the stop
	// returning to the start returning (PostgreSQL and NATS stops only); for
	// a failover, from the kill to the proxy re-pointed to the promoted
	// standby.
	Outage time.Duration `json:"outage_ns,omitempty"`
	// Resumed is how long after a warehouse_down's start returned (a
	// failover's promotion) idem finished a load again; 0 if it did not
	// within resumeBound.
	Resumed time.Duration `json:"resumed_ns,omitempty"`
	// A failover's moments: the primary killed, the standby promoted and
	// the proxy re-pointed to it.
	Killed   time.Time `json:"killed,omitzero"`
	Promoted time.Time `json:"promoted,omitzero"`
	// LostLoads counts the runs the old primary's ledger had right before
	// the kill and the promoted standby's did not: acknowledged loads the
	// failover took back (at least: a commit after that read is lost too,
	// uncounted); lost names them.
	LostLoads int `json:"lost_loads,omitempty"`
	lost      []runKey
	Skipped   string `json:"skipped,omitempty"` // why it did not happen
	Err       string `json:"error,omitempty"`

	// Variant is which form of its kind the fault took, when the kind has
	// several (replica_source_failover: faults_source.go).
	Variant string `json:"variant,omitempty"`
	// Lag is how long the fault held a standby's replay back after it.
	Lag time.Duration `json:"lag_ns,omitempty"`
}

// schedule draws the faults of a phase of length o.Duration from rng. The
// long faults come first: their lengths and order are drawn, then they are
// spread evenly, with as much free time before, between and after them.
// Short faults, drawn by weight, fill the free time. Faults never overlap:
// the nemesis runs one at a time, and the schedule plans each to start after
// the previous one ends, with a gap in [FaultGapMin, FaultGapMax].
func schedule(o Options, rng *rand.Rand) []*fault {
	long := longFaults(o, rng)
	var busy time.Duration
	for _, f := range long {
		busy += planned(f)
	}
	slot := max(o.Duration-busy, 0) / time.Duration(len(long)+1)
	var out []*fault
	at := o.FaultGapMin
	var done time.Duration // holds of the long faults placed
	for li := 0; li < len(long) || at < o.Duration; {
		gap := o.FaultGapMin + time.Duration(rng.Int64N(int64(o.FaultGapMax-o.FaultGapMin)+1))
		f := shortFault(o, rng, at)
		if li < len(long) {
			target := slot*time.Duration(li+1) + done
			if at+f.Hold+o.FaultGapMin > target {
				// No room for f before the next long fault: the long one now.
				f = long[li]
				f.At = max(at, target)
				done += planned(f)
				li++
			}
		}
		out = append(out, f)
		at = f.At + planned(f) + gap
	}
	return out
}

// longFaults draws LongRounds rounds of long faults, each kind once per
// round in an order the seed draws, with their lengths.
func longFaults(o Options, rng *rand.Rand) []*fault {
	var out []*fault
	for range max(o.LongRounds, 0) {
		for _, i := range rng.Perm(len(longKinds)) {
			f := &fault{Kind: longKinds[i]}
			switch f.Kind {
			case FaultWarehouseDown:
				f.Hold = o.WarehouseDownMin + time.Duration(rng.Int64N(int64(o.WarehouseDownMax-o.WarehouseDownMin)+1))
			case FaultNATSDown:
				f.Hold = o.NATSDown
			case FaultRollingRestart:
				f.Hold = rollingRestartPlan(o.Replicas)
			case FaultFailover:
				// Hold: how long the standby misses the primary's commits.
				f.Hold = failoverLagMin + time.Duration(rng.Int64N(int64(failoverLagMax-failoverLagMin)+1))
			}
			out = append(out, f)
		}
	}
	return out
}

// extraFaultWeights are the kinds drawn only when Options.Kinds names
// them: faults that need more than the default campaign sets up. Each is
// drawn as often as the others.
var extraFaultWeights = []weightedKind{
	{FaultClockStep, 1},
	{FaultJSStorageFull, 1},
	{FaultSourceFailover, 1},
	{FaultSiteCrash, 1},
	{FaultPGDiskFull, 1},
	{FaultObjectStoreDown, 1},
	{FaultObjectStoreSlow, 1},
	{FaultObjectStore5xx, 1},
}

// allWeights is every drawable kind once, with its weight.
func allWeights() []weightedKind {
	var out []weightedKind
	for _, w := range slices.Concat(faultWeights, clusterFaultWeights, extraFaultWeights,
		[]weightedKind{{FaultPoolerRestart, poolerWeight(faultWeights)}}) {
		if !slices.ContainsFunc(out, func(o weightedKind) bool { return o.kind == w.kind }) {
			out = append(out, w)
		}
	}
	return out
}

// knownKind says whether the schedule can draw kind.
func knownKind(kind string) bool {
	return slices.ContainsFunc(allWeights(), func(w weightedKind) bool { return w.kind == kind })
}

// drawnWeights are the kinds o's schedule draws from.
func drawnWeights(o Options) []weightedKind {
	if len(o.Kinds) > 0 {
		var out []weightedKind
		for _, w := range allWeights() {
			if slices.Contains(o.Kinds, w.kind) {
				if o.ExtraWeight > 0 && slices.ContainsFunc(extraFaultWeights, func(e weightedKind) bool { return e.kind == w.kind }) {
					w.weight = o.ExtraWeight
				}
				out = append(out, w)
			}
		}
		return out
	}
	weights := faultWeights
	if o.Cluster {
		weights = clusterFaultWeights
	}
	if o.pooled() {
		weights = append(slices.Clone(weights), weightedKind{FaultPoolerRestart, poolerWeight(weights)})
	}
	return weights
}

// shortFault draws one short fault by weight, planned at at.
func shortFault(o Options, rng *rand.Rand, at time.Duration) *fault {
	weights := drawnWeights(o)
	total := 0
	for _, w := range weights {
		total += w.weight
	}
	pick := rng.IntN(total)
	kind := weights[0].kind
	for _, w := range weights {
		if pick < w.weight {
			kind = w.kind
			break
		}
		pick -= w.weight
	}
	f := &fault{Kind: kind, At: at, Replica: rng.IntN(o.Replicas)}
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	switch kind {
	case FaultPause:
		f.Hold = o.AckWait + ms(500, 3000)
	case FaultPGFast, FaultPGImmediate:
		f.Hold = ms(0, 3000)
	case FaultNATSRestart:
		f.Hold = ms(0, 2000)
	case FaultPoolerRestart:
		f.Hold = ms(0, int(poolerRestartMaxDown/time.Millisecond))
	case FaultLatency:
		f.Hold, f.Param = ms(2000, 8000), 50+rng.IntN(350)
	case FaultResetPeer:
		f.Hold, f.Param = ms(500, 3000), rng.IntN(300)
	case FaultTimeout:
		f.Hold, f.Param = ms(1000, 5000), 200+rng.IntN(2800)
	case FaultSourceFailover:
		sourceFaultParams(f, rng)
	case FaultLeaderKill, FaultFollowerKill:
		// Replica picks the follower among the two.
		f.Hold = ms(0, 3000)
	case FaultNodeDown:
		// JetStream's elections take up to about 10 s after a leader is lost.
		f.Node, f.Hold = rng.IntN(clusterSize), ms(12000, 20000)
	case FaultPartition:
		f.Node, f.Hold = rng.IntN(clusterSize), ms(5000, 20000)
	case FaultNATSRolling:
		f.Hold = time.Duration(clusterSize) * 6 * time.Second
	case FaultNATSLatency:
		f.Node, f.Hold, f.Param = natsLinkTarget(rng), ms(2000, 8000), 20+rng.IntN(280)
	case FaultNATSReset:
		f.Node, f.Hold, f.Param = natsLinkTarget(rng), ms(500, 3000), rng.IntN(300)
	case FaultClockStep:
		f.Hold, f.Param = ms(5000, 20000), 60
		if rng.IntN(2) == 0 {
			f.Param = -60
		}
	case FaultObjectStoreDown, FaultObjectStoreSlow, FaultObjectStore5xx:
		drawObjstore(f, rng)
	case FaultNATSBlackhole:
		// Param 0: data dropped until the toxic goes; otherwise the
		// connection is also closed after Param ms.
		f.Node, f.Hold = natsLinkTarget(rng), ms(1000, 6000)
		if rng.IntN(2) == 0 {
			f.Param = 500 + rng.IntN(4500)
		}
	case FaultJSStorageFull:
		storageFullFault(f, rng)
	case FaultSiteCrash:
		drawSiteCrash(o, f, rng)
	case FaultPGDiskFull:
		drawDiskFull(f, rng)
	}
	return f
}

// natsLinkTarget draws which client links a NATS link fault disturbs: one
// server's (0 to clusterSize-1), or every server's (-1), so that idem cannot
// escape to another server.
func natsLinkTarget(rng *rand.Rand) int {
	if rng.IntN(2) == 0 {
		return -1
	}
	return rng.IntN(clusterSize)
}

// nemesis runs the schedule, one fault at a time, against the processes,
// the database and the NATS server of the campaign.
type nemesis struct {
	// everyKind and extend: Options.EveryKind, extend the latest start
	// of a fault of a kind not yet injected.
	everyKind bool
	extend    time.Time
	replicas  []*replica
	wh        *warehouse    // the primary to stop, and the standby to promote
	db        *pgxpool.Pool // not through the proxy, to the primary: for pg_terminate_backend
	dbName    string
	nats      natsServers
	cluster   *natsCluster        // nil with one server
	js        jetstream.JetStream // direct to the servers, to find the stream's leader
	link      *proxyLink
	pooler    Pooler // nil without Options.PoolMode
	logf      func(string, ...any)

	src   *sourceDB // nil without Options.PGSource
	store *objStore // nil without Options.Files

	mu      sync.Mutex
	history []*fault
	// site is held by each fault while it runs, alone by those that stop
	// every process (Options.Second: two schedules at once).
	site sync.RWMutex
}

// exclusive takes the site for a fault of kind: alone for a site crash or
// a rolling restart, shared for the others. It returns the release.
func (n *nemesis) exclusive(kind string) (unlock func()) {
	if kind == FaultSiteCrash || kind == FaultRollingRestart {
		n.site.Lock()
		return n.site.Unlock
	}
	n.site.RLock()
	return n.site.RUnlock
}

// What the nemesis does with the next fault.
const (
	nemesisInject = iota
	nemesisPass   // passed over: a kind not yet injected comes first
	nemesisStop   // the phase is over
)

// next decides the fault faults[i] at now: injected, passed over, or the
// phase over. Without everyKind, every fault before end is injected. With
// it, a nemesis behind its schedule passes over a kind already injected
// while one not yet injected is still to come, and past end injects only
// those, until extend.
func (n *nemesis) next(now, start, end time.Time, faults []*fault, i int, injected map[string]bool) int {
	f := faults[i]
	unseen := func(faults []*fault) bool {
		for _, f := range faults {
			if !injected[f.Kind] {
				return true
			}
		}
		return false
	}
	switch {
	case now.Before(end):
		if n.everyKind && injected[f.Kind] && now.Sub(start.Add(f.At)) > time.Second && unseen(faults[i+1:]) {
			return nemesisPass
		}
		return nemesisInject
	case !n.everyKind || !now.Before(n.extend) || !unseen(faults[i:]):
		return nemesisStop
	case injected[f.Kind]:
		return nemesisPass
	}
	return nemesisInject
}

// run executes the faults in order, starting none after end. Every fault
// runs its full length and heals before run moves on; only ctx cancels a
// hold, and healing happens even then.
func (n *nemesis) run(ctx context.Context, start, end time.Time, faults []*fault) error {
	injected := map[string]bool{}
	for i, f := range faults {
		if d := time.Until(start.Add(f.At)); d > 0 {
			sleepCtx(ctx, min(d, time.Until(end)))
		}
		if ctx.Err() != nil {
			return nil
		}
		switch n.next(time.Now(), start, end, faults, i, injected) {
		case nemesisStop:
			return nil
		case nemesisPass:
			continue
		}
		injected[f.Kind] = true
		unlock := n.exclusive(f.Kind)
		f.Start = time.Now()
		err := n.inject(ctx, f)
		f.End = time.Now()
		unlock()
		n.mu.Lock()
		n.history = append(n.history, f)
		n.mu.Unlock()
		if err != nil {
			f.Err = err.Error()
		}
		// Logged first: a fault that ends the campaign is named at once,
		// not when the publisher has finished.
		n.logf("fault %-15s replica=%d server=%s hold=%s took=%s param=%d outage=%s %s%s", f.Kind, f.Replica, f.Server, f.Hold.Round(time.Millisecond),
			f.End.Sub(f.Start).Round(time.Millisecond), f.Param, f.Outage.Round(time.Millisecond), f.Skipped, f.Err)
		if err != nil {
			// A fault the harness cannot heal (PostgreSQL that will not start)
			// ends the campaign: what follows would measure the harness.
			switch f.Kind {
			case FaultPGFast, FaultPGImmediate, FaultWarehouseDown, FaultFailover, FaultNATSRestart, FaultNATSDown, FaultPoolerRestart,
				FaultLeaderKill, FaultFollowerKill, FaultNodeDown, FaultNATSRolling, FaultJSStorageFull, FaultSourceFailover,
				FaultSiteCrash, FaultPGDiskFull, FaultObjectStoreDown:
				n.logf("chaos: %s could not be healed: the fault phase ends", f.Kind)
				return fmt.Errorf("chaos: %s: %w", f.Kind, err)
			}
		}
	}
	return nil
}

func (n *nemesis) inject(ctx context.Context, f *fault) error {
	// Healing must happen whatever ctx says.
	heal := context.WithoutCancel(ctx)
	switch f.Kind {
	case FaultKill:
		if !n.replicas[f.Replica].kill() {
			f.Skipped = "replica not running"
		}
	case FaultPause:
		resume, ok := n.replicas[f.Replica].pause()
		if !ok {
			f.Skipped = "replica not running"
			return nil
		}
		sleepCtx(ctx, f.Hold)
		resume()
	case FaultPGFast:
		// fast: every session gets 57P01 (admin shutdown), then connections
		// are refused until the start.
		return n.pgDown(ctx, heal, f, "fast")
	case FaultWarehouseDown:
		if err := n.pgDown(ctx, heal, f, "fast"); err != nil {
			return err
		}
		f.Resumed = n.waitResumed(ctx, time.Now())
		return nil
	case FaultPGImmediate:
		return n.pgDown(ctx, heal, f, "immediate")
	case FaultFailover:
		return n.failover(ctx, heal, f)
	case FaultPGTerminate:
		tctx, cancel := context.WithTimeout(heal, 10*time.Second)
		defer cancel()
		var k int
		err := n.db.QueryRow(tctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = $1 AND application_name = 'idem'`, n.dbName).Scan(&k)
		f.Param = k
		return err
	case FaultNATSRestart, FaultNATSDown:
		n.nats.down()
		down := time.Now()
		sleepCtx(ctx, f.Hold)
		err := n.nats.up()
		f.Outage = time.Since(down)
		return err
	case FaultPoolerRestart:
		return n.poolerRestart(ctx, heal, f)
	case FaultJSStorageFull:
		return n.storageFull(ctx, heal, f)
	case FaultSourceFailover:
		return n.sourceFailover(ctx, heal, f)
	case FaultSiteCrash:
		return n.siteCrash(ctx, heal, f)
	case FaultPGDiskFull:
		return n.diskFull(ctx, heal, f)
	case FaultObjectStoreDown, FaultObjectStoreSlow, FaultObjectStore5xx:
		return n.injectObjstore(ctx, heal, f)
	case FaultRollingRestart:
		// A deploy: one replica at a time, the next only once its
		// predecessor's successor has started.
		var errs []error
		for _, r := range n.replicas {
			if err := r.restart(time.Minute, false); err != nil {
				errs = append(errs, err)
				continue
			}
			f.Param++
		}
		return errors.Join(errs...)
	case FaultLatency:
		attrs := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, f.Param, f.Param/2)
		return n.withToxic(ctx, f, "latency", attrs, "upstream", "downstream")
	case FaultResetPeer:
		return n.withToxic(ctx, f, "reset_peer", fmt.Sprintf(`{"timeout":%d}`, f.Param), "upstream")
	case FaultTimeout:
		return n.withToxic(ctx, f, "timeout", fmt.Sprintf(`{"timeout":%d}`, f.Param), "upstream")
	case FaultClockStep:
		return n.clockStep(ctx, f)
	default:
		return n.injectCluster(ctx, heal, f)
	}
	return nil
}

// pgDown stops PostgreSQL with mode, keeps it down for f.Hold and starts it
// again. Each pg_ctl gets its own two minutes: a three-minute outage must
// not eat the start's time.
func (n *nemesis) pgDown(ctx, heal context.Context, f *fault, mode string) error {
	sctx, cancel := context.WithTimeout(heal, 2*time.Minute)
	err := n.wh.primary().Stop(sctx, mode)
	cancel()
	if err != nil {
		return err
	}
	down := time.Now()
	sleepCtx(ctx, f.Hold)
	rctx, cancel := context.WithTimeout(heal, 2*time.Minute)
	defer cancel()
	err = n.wh.primary().Restart(rctx, "")
	f.Outage = time.Since(down)
	return err
}

// waitResumed waits until idem finishes a load (a success, or a skip of a
// run already done) after up, the moment PostgreSQL was started again, and
// returns how long after up that was; 0 if not within resumeBound.
func (n *nemesis) waitResumed(ctx context.Context, up time.Time) time.Duration {
	for time.Since(up) < resumeBound && ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var at *time.Time
		err := n.db.QueryRow(qctx, `SELECT min(finished_at) FROM idem.pipeline_audit
			WHERE dag_id = $1 AND status IN ('success', 'skipped') AND finished_at > $2`, pipeline, up).Scan(&at)
		cancel()
		if err == nil && at != nil {
			return max(at.Sub(up), time.Millisecond)
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	return 0
}

func (n *nemesis) withToxic(ctx context.Context, f *fault, kind, attrs string, streams ...string) error {
	remove, err := n.link.toxic(kind, attrs, streams...)
	if err != nil {
		return err
	}
	sleepCtx(ctx, f.Hold)
	remove()
	return nil
}

func (n *nemesis) faults() []*fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*fault(nil), n.history...)
}
