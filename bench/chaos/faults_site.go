package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idem-data/idem/internal/localpg"
)

// FaultSiteCrash is a crash of the whole site: PostgreSQL (its postmaster
// and every child), every nats-server and every idem replica SIGKILLed at
// once, as a power cut would leave them; then each brought back in an order
// and with delays drawn from the fault's seed. It is drawn only when
// Options.Kinds names it, and needs Options.Cluster: the single-server
// topology runs NATS inside the test process, which no signal can crash
// without taking the harness with it, and the cluster's nats-server child
// processes already run with sync_interval: always, as deploy/nats ships
// them (without it, JetStream can lose acknowledged writes when every
// server crashes at once).
//
// What it proves: no valid event is lost, loaded twice or dead-lettered.
// Above all none is dead-lettered as crashed: idem does not count an
// attempt that a crash of the warehouse cut short (left `started` before
// the warehouse last started) toward the budget that dead-letters a message
// whose loads keep killing their process.
const FaultSiteCrash = "site_crash"

// The restart of a site crash: the first process comes back siteDownMin to
// siteDownMax after the kill, each next one up to siteStepMax after the
// previous; then the schedule leaves siteSettle for the cluster to elect
// its leaders and idem to load again.
const (
	siteDownMin = 500 * time.Millisecond
	siteDownMax = 3 * time.Second
	siteStepMax = 1 * time.Second
	siteSettle  = 10 * time.Second
)

// siteStep is one process of the site brought back, after a delay.
type siteStep struct {
	name  string // "postgres", a server's name, "idem<N>"
	delay time.Duration
}

// siteRestartOrder draws, from seed, the order in which a site of
// replicas idem processes and servers NATS servers comes back and the delay
// before each: a function of the seed alone, so the same fault replays the
// same order.
func siteRestartOrder(seed int64, replicas int, servers []string, store bool) []siteStep {
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	names := []string{"postgres"}
	names = append(names, servers...)
	if store {
		names = append(names, "versitygw")
	}
	for i := range replicas {
		names = append(names, fmt.Sprintf("idem%d", i))
	}
	steps := make([]siteStep, 0, len(names))
	for i, j := range rng.Perm(len(names)) {
		d := time.Duration(rng.Int64N(int64(siteStepMax) + 1))
		if i == 0 {
			d = siteDownMin + time.Duration(rng.Int64N(int64(siteDownMax-siteDownMin)+1))
		}
		steps = append(steps, siteStep{names[j], d})
	}
	return steps
}

// drawSiteCrash sets a site crash's seed (Param) and its planned length.
func drawSiteCrash(o Options, f *fault, rng *rand.Rand) {
	f.Param = rng.IntN(1 << 30)
	var servers []string
	for i := range clusterSize {
		servers = append(servers, fmt.Sprintf("n%d", i))
	}
	f.Hold = siteSettle
	for _, s := range siteRestartOrder(int64(f.Param), o.Replicas, servers, o.Files) {
		f.Hold += s.delay
	}
}

// siteCrash kills every process of the site at once (versitygw too, with
// Options.Files), brings each back in the drawn order, and waits until
// every NATS server is current and idem has finished a load again or has
// nothing left to load (f.Resumed; 0 if neither within resumeBound).
// f.Server records the order; f.Outage is the kill to the last start.
func (n *nemesis) siteCrash(ctx, heal context.Context, f *fault) error {
	c := n.cluster
	if c == nil {
		f.Skipped = "one in-process NATS server: site_crash needs the cluster topology"
		return nil
	}
	var servers []string
	for _, node := range c.nodes {
		servers = append(servers, node.name)
	}
	steps := siteRestartOrder(int64(f.Param), len(n.replicas), servers, n.store != nil)
	var order []string
	for _, s := range steps {
		order = append(order, s.name)
	}
	f.Server = strings.Join(order, ">")

	// The supervisors start no replica until its turn.
	for _, r := range n.replicas {
		r.setHeld(true)
	}
	defer func() {
		for _, r := range n.replicas {
			r.setHeld(false)
		}
	}()
	var wg sync.WaitGroup
	var pgErr error
	wg.Go(func() { pgErr = n.wh.primary().Kill() })
	for _, node := range c.nodes {
		wg.Go(func() { node.stop(syscall.SIGKILL, 10*time.Second) })
	}
	for _, r := range n.replicas {
		wg.Go(func() { r.kill() })
	}
	if n.store != nil {
		wg.Go(n.store.kill)
	}
	wg.Wait()
	killed := time.Now()
	if pgErr != nil {
		return fmt.Errorf("kill PostgreSQL: %w", pgErr)
	}

	var errs []error
	for _, s := range steps {
		sleepCtx(ctx, s.delay)
		switch {
		case s.name == "postgres":
			errs = append(errs, n.startPG(heal))
		case s.name == "versitygw":
			errs = append(errs, n.store.restart(heal))
		case strings.HasPrefix(s.name, "idem"):
			var i int
			if _, err := fmt.Sscanf(s.name, "idem%d", &i); err == nil && i < len(n.replicas) {
				n.replicas[i].setHeld(false)
			}
		default:
			errs = append(errs, n.startServer(heal, c.node(s.name)))
		}
	}
	f.Outage = time.Since(killed)
	up := time.Now()
	for _, node := range c.nodes {
		errs = append(errs, node.waitHealthy(heal, 2*time.Minute))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	f.Resumed = n.waitBusyResumed(ctx, up)
	return nil
}

// waitBusyResumed is waitResumed for a fault that may come when the
// workload is over: it also returns, with the time waited, once the
// consumer has nothing to deliver and nothing awaiting an ack, since then
// there is no load for idem to finish. 0 if neither within resumeBound.
func (n *nemesis) waitBusyResumed(ctx context.Context, up time.Time) time.Duration {
	for time.Since(up) < resumeBound && ctx.Err() == nil {
		if d := n.resumedOnce(ctx, up); d > 0 {
			return d
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		idle := false
		if cons, err := n.js.Consumer(qctx, eventsStream, durableConsumer); err == nil {
			if ci, err := cons.Info(qctx); err == nil {
				idle = ci.NumPending == 0 && ci.NumAckPending == 0
			}
		}
		cancel()
		if idle {
			return max(time.Since(up), time.Millisecond)
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	return 0
}

// resumedOnce is how long after up idem finished a load (a success or a
// skip), if it has; 0 otherwise.
func (n *nemesis) resumedOnce(ctx context.Context, up time.Time) time.Duration {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var at *time.Time
	err := n.db.QueryRow(qctx, `SELECT min(finished_at) FROM idem.pipeline_audit
		WHERE dag_id = $1 AND status IN ('success', 'skipped') AND finished_at > $2`, pipeline, up).Scan(&at)
	if err == nil && at != nil {
		return max(at.Sub(up), time.Millisecond)
	}
	return 0
}

// startPG starts the primary after a crash.
func (n *nemesis) startPG(ctx context.Context) error { return startAfterCrash(ctx, n.wh.primary()) }

// startAfterCrash starts pg after its postmaster was SIGKILLed.
func startAfterCrash(ctx context.Context, pg *localpg.Server) error {
	if err := pg.StartAfterKill(ctx); err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	return nil
}

// startServer starts the cluster's server i without waiting for it to be
// healthy: alone, it cannot be until a majority is back.
func (n *nemesis) startServer(ctx context.Context, i int) error {
	if i < 0 {
		return errors.New("no such server")
	}
	var err error
	for range 20 {
		if err = n.cluster.nodes[i].start(n.cluster.bin); err == nil {
			return nil
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	return err
}

// setHeld keeps the replica's supervisor from starting a new process
// (true) until it is called with false.
func (r *replica) setHeld(held bool) {
	r.mu.Lock()
	r.held = held
	r.mu.Unlock()
}

// waitReleased returns once the replica is not held, or is stopping.
func (r *replica) waitReleased() {
	for {
		r.mu.Lock()
		held := r.held && !r.stopping
		r.mu.Unlock()
		if !held {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// siteFaultFigures adds what a site crash or a full disk measured to the
// report: how long the warehouse was unusable, and a violation when idem
// did not load again within resumeBound of the site (or the disk) coming
// back, with no command to help it.
func siteFaultFigures(r *Report, f *fault) {
	switch f.Kind {
	case FaultSiteCrash, FaultPGDiskFull:
	default:
		return
	}
	r.Faults.LongestWarehouseOutageSeconds = max(r.Faults.LongestWarehouseOutageSeconds, f.Outage.Seconds())
	r.Faults.SlowestResumeSeconds = max(r.Faults.SlowestResumeSeconds, f.Resumed.Seconds())
	if f.Resumed == 0 && f.Err == "" {
		r.violate("%s at %s: idem finished no load within %s of the site coming back, by itself",
			f.Kind, f.Start.Format(time.RFC3339), resumeBound)
	}
}

// siteCrashedDeadLetter names site_crash when dl is a crashed dead letter
// and a site crash overlapped the life of its message (from sentAt to the
// dead letter): a site crash's attempts must not count toward the crash
// budget, so such a dead letter is a violation, whatever else happened.
func siteCrashedDeadLetter(ws []window, sentAt time.Time, dl deadLetter) string {
	if dl.kind != "crashed" {
		return ""
	}
	return overlapping(ws, sentAt, dl.failedAt, FaultSiteCrash)
}

// validateSiteKinds names what site_crash and pg_disk_full need and o
// lacks.
func (o Options) validateSiteKinds() []error {
	var errs []error
	for _, k := range o.Kinds {
		switch k {
		case FaultSiteCrash:
			if !o.Cluster {
				errs = append(errs, errors.New("chaos: Kinds: site_crash needs Cluster: the in-process NATS server cannot be SIGKILLed"))
			}
		case FaultPGDiskFull:
			if o.PG != nil {
				if err := sizeLimited(o.PG.DataDir); err != nil {
					errs = append(errs, fmt.Errorf("chaos: Kinds: pg_disk_full: %w", err))
				}
			}
		}
	}
	return errs
}
