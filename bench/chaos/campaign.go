package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// dbName is the campaign's database in the cluster it was handed.
const dbName = "chaos"

// campaign is one run's moving parts.
type campaign struct {
	o        Options
	db       *pgxpool.Pool // the primary's, whichever place holds it (warehouse.url)
	wh       *warehouse
	nats     natsServers
	cluster  *natsCluster // the cluster topology; nil with one server
	link     *proxyLink
	pooler   Pooler     // between the replicas and the link; nil without Options.PoolMode
	src      *sourceDB  // the PostgreSQL source; nil without Options.PGSource
	nc       *nats.Conn // the checker's: the servers' own ports, never a proxy
	js       jetstream.JetStream
	pubNC    *nats.Conn // the publisher's: through the proxies in a cluster
	pubJS    jetstream.JetStream
	cfg      string
	logs     string
	replicas []*replica
	files    *fileWorkload // nil without Options.Files
	timely   *timely       // nil without Options.Timely
	adminCfg string        // the config as the administrator, for operator commands
}

// Run runs one campaign and returns its report. An error means the harness
// could not do its part (a server that would not start, a context that
// ended); a broken invariant is a Violation in the report instead.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	began := time.Now()
	r := &Report{
		Seed: o.Seed, Replicas: o.Replicas, Partitions: o.Partitions, AckWait: o.AckWait.String(),
		CrashProb: o.CrashProb, NoFaults: o.NoFaults, DrainBoundSeconds: o.DrainBound.Seconds(),
		Faults: FaultFigures{ByKind: map[string]int{}}, Topology: "one in-process NATS server",
	}
	if o.Cluster {
		r.Topology = fmt.Sprintf("%d nats-server processes, R%d streams, Toxiproxy on client ports and routes", clusterSize, clusterSize)
	}
	if o.pooled() {
		r.Pooler = o.PoolMode
		r.Topology += fmt.Sprintf("; replicas behind a pooler in %s mode, in front of the PostgreSQL link", o.PoolMode)
	}
	if o.NoFaults {
		r.CrashProb = 0
	}
	r.LeastPrivilege = o.LeastPrivilege
	for _, d := range datasets {
		r.Datasets = append(r.Datasets, d.name+"("+d.strategy+")")
	}
	r.Retries, r.RetryDelay, r.MaxRetryDelay = Retries, RetryDelay.String(), MaxRetryDelay.String()
	r.RetryScheduleSeconds = retrySchedule(Retries, RetryDelay, MaxRetryDelay).Seconds()
	// Separate generators, so that a change to the workload does not move
	// the fault schedule of a seed, and the other way round. The schedule
	// comes first: a failover in it needs a standby from the setup on.
	pl := makePlan(o, rand.New(rand.NewPCG(uint64(o.Seed), 1)))
	var sched, second []*fault
	if !o.NoFaults {
		first, other := o.split()
		sched = schedule(first, rand.New(rand.NewPCG(uint64(o.Seed), 2)))
		if len(o.Second) > 0 {
			second = schedule(other, rand.New(rand.NewPCG(uint64(o.Seed), 3)))
		}
	}
	c := &campaign{o: o}
	defer c.close()
	if err := c.setup(ctx, slices.ContainsFunc(sched, func(f *fault) bool { return f.Kind == FaultFailover })); err != nil {
		return nil, err
	}
	o.Logf("chaos: seed %d, %d events over %s, %d replicas, logs in %s", o.Seed, o.Events, o.Duration, o.Replicas, c.logs)

	pub := &publisher{js: c.pubJS, db: c.db, logf: o.Logf}
	nem := &nemesis{everyKind: o.EveryKind, replicas: c.replicas, wh: c.wh, db: c.db, dbName: dbName, nats: c.nats, cluster: c.cluster, js: c.js,
		link: c.link, pooler: c.pooler, src: c.src, store: c.files.objStore(), logf: o.Logf}

	// A reader samples the targets from now until the replicas stop.
	rd := &reader{}
	readCtx, stopReader := context.WithCancel(ctx)
	readerDone := make(chan struct{})
	go func() { defer close(readerDone); rd.run(readCtx, c.db, time.Second) }()
	defer func() { stopReader(); <-readerDone }()

	// Fault phase: the publisher may lag behind a fault; it gets a minute
	// past the phase to catch up before that counts as a failure.
	start := time.Now()
	pubCtx, stopPub := context.WithDeadline(ctx, start.Add(publishFor(o)))
	defer stopPub()
	pubDone := make(chan struct{})
	go func() { defer close(pubDone); pub.run(pubCtx, start, pl.items) }()
	srcDone := c.src.publish(pubCtx, start, pub)
	c.files.run(pubCtx, start)
	faultsOver := make(chan struct{})
	timelyDone := c.timely.run(pubCtx, start, c.pubJS, c.adminCfg, faultsOver)
	// The nemesis starts no fault after the phase, but lets the last one run
	// its length: a warehouse outage is never cut short.
	end := start.Add(o.Duration)
	if o.EveryKind {
		nem.extend = start.Add(2 * o.Duration)
	}
	secondDone := make(chan error, 1)
	nemCtx, stopSecond := context.WithCancel(ctx)
	defer stopSecond()
	go func() { secondDone <- nem.run(nemCtx, start, end, second) }()
	nemErr := nem.run(ctx, start, end, sched)
	if nemErr != nil {
		stopSecond() // its fault heals, and it starts no other
	}
	nemErr = errors.Join(nemErr, <-secondDone)
	if nemErr == nil {
		sleepCtx(ctx, time.Until(start.Add(o.Duration)))
	}
	close(faultsOver)
	<-pubDone
	<-srcDone
	<-timelyDone
	if nemErr != nil {
		return nil, nemErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.FaultPhaseSeconds = time.Since(start).Seconds()
	o.Logf("chaos: fault phase over after %s; healing", time.Since(start).Round(time.Second))

	// Settle: every fault is healed (nem.run heals before it returns); the
	// crash hook is turned off by a rolling restart, as a deploy would do;
	// then one final event per (dataset, partition).
	lastFault := time.Now()
	for _, rep := range c.replicas {
		rep.disableCrash()
	}
	settle := settleEvents(o, o.Events)
	settle = append(settle, c.src.settle(ctx, r, o.Events+len(settle), settle[0].runID)...)
	for _, ev := range settle {
		pub.publish(ctx, ev.copies[0])
	}
	drainErr := c.waitDrained(ctx, lastFault.Add(o.DrainBound), settle)
	r.DrainSeconds = time.Since(lastFault).Seconds()
	r.Check.Drained = drainErr == nil
	if drainErr != nil {
		r.violate("backlog not drained within %s of the last fault: %v", o.DrainBound, drainErr)
	}
	o.Logf("chaos: drained in %.1fs", r.DrainSeconds)
	c.files.waitCaughtUp(ctx, c.db, lastFault, lastFault.Add(o.DrainBound), r)
	c.timely.settle(ctx, r)
	// The outbox too, before the relays stop: a row whose publish failed
	// during a fault waits for its own backoff (up to 1 min and jitter).
	if left, waited := c.waitOutbox(ctx, 150*time.Second); left > 0 {
		r.violate("%d outbox rows (results, downstream events) still unpublished %s after the drain", left, waited.Round(time.Second))
	} else {
		o.Logf("chaos: outbox published %.1fs after the drain", waited.Seconds())
	}
	if err := c.waitDownstream(ctx, 2*time.Minute); err != nil {
		r.violate("downstream events not all published and loaded within 2m after the drain: %v", err)
	}
	o.Logf("chaos: stopping replicas")
	for _, rep := range c.replicas {
		rep.stop(40 * time.Second)
	}
	if c.pooler != nil {
		c.checkPooled(ctx, r)
	}
	if o.LeastPrivilege {
		c.checkGrants(ctx, r)
	}

	stopReader()
	<-readerDone
	r.Check.ReadsSampled, r.Check.ReadsSawDoubled = rd.samples, rd.bad
	if rd.bad > 0 {
		r.violate("a reader saw doubled rows in %d of %d samples (up to %d rows, first at %s)",
			rd.bad, rd.samples, rd.worst, rd.firstBad.Format(time.RFC3339))
	}

	h := history{events: append(append([]*event(nil), pl.events...), settle...), faults: nem.faults(), pauses: c.timely.pauseTimes()}
	h.events = append(h.events, c.src.phaseEvents()...)
	for _, rep := range c.replicas {
		h.exits = append(h.exits, rep.history()...)
	}
	c.figures(r, pl, settle, pub, h)
	// A 90-minute campaign's outbox and audit hold millions of rows.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	if err := checkTables(cctx, c.db, r); err != nil {
		return r, err
	}
	if err := checkRuns(cctx, c.db, c.js, h, o.AckWait, r); err != nil {
		return r, err
	}
	if err := checkChains(cctx, c.db, r); err != nil {
		return r, err
	}
	if err := checkStored(cctx, c.js, h, r); err != nil {
		return r, err
	}
	if err := checkResults(cctx, c.db, c.js, h, r); err != nil {
		return r, err
	}
	if err := checkDownstream(cctx, c.db, o, r); err != nil {
		return r, err
	}
	if err := storageFullFigures(cctx, c.db, c.logs, pub, h, r); err != nil {
		return r, err
	}
	if err := c.src.check(cctx, c.db, r); err != nil {
		return r, err
	}
	if err := c.timely.check(cctx, c.db, r); err != nil {
		return r, err
	}
	if err := c.files.checkFiles(cctx, c.db, c.js, r); err != nil {
		return r, err
	}
	if info, err := c.streamInfo(cctx, eventsStream); err == nil {
		r.Messages.StoredInStream = info.State.LastSeq
	}
	r.WallSeconds = time.Since(began).Seconds()
	return r, nil
}

// setup makes everything the campaign runs on; standby adds a streaming
// standby of the caller's cluster, for the schedule's failovers.
func (c *campaign) setup(ctx context.Context, standby bool) error {
	o := c.o
	c.logs = filepath.Join(o.Dir, "logs")
	if err := os.MkdirAll(c.logs, 0o755); err != nil {
		return err
	}
	admin, err := pgx.Connect(ctx, o.PG.URL(""))
	if err != nil {
		return fmt.Errorf("chaos: connect to the cluster: %w", err)
	}
	_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)")
	if err == nil {
		_, err = admin.Exec(ctx, "CREATE DATABASE "+dbName)
	}
	admin.Close(ctx)
	if err != nil {
		return fmt.Errorf("chaos: create database: %w", err)
	}
	if c.wh, err = newWarehouse(ctx, o.PG, standby, o.Logf); err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(c.wh.url(dbName))
	if err != nil {
		return err
	}
	pcfg.MaxConns = 8
	if c.db, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return err
	}
	if err := createSchema(ctx, c.db, o.Partitions, o.SlowLoad, rand.New(rand.NewPCG(uint64(o.Seed), 3))); err != nil {
		return err
	}
	if o.downstream() {
		if err := createDownstream(ctx, c.db); err != nil {
			return err
		}
	}
	if o.PGSource {
		if c.src, err = startSource(ctx, o); err != nil {
			return err
		}
		if _, err := c.db.Exec(ctx, sourceTargetsSQL); err != nil {
			return fmt.Errorf("chaos: the source datasets' targets: %w", err)
		}
	}
	if c.files, err = setupFiles(ctx, o, c.db, c.logs); err != nil {
		return err
	}
	if c.timely, err = setupTimely(ctx, o, c.db); err != nil {
		return err
	}
	var clientURL, directURL string
	if o.Cluster {
		if c.cluster, err = startCluster(ctx, o.NATSBin, o.Dir, o.NATSStore, c.logs); err != nil {
			return err
		}
		c.nats = c.cluster
		clientURL, directURL = c.cluster.clientURLs(), c.cluster.directURLs()
	} else {
		box, err := startNATS(filepath.Join(o.Dir, "jetstream"))
		if err != nil {
			return err
		}
		c.nats = box
		clientURL, directURL = box.url, box.url
	}
	if c.link, err = startLink(c.wh.addr()); err != nil {
		return err
	}
	pgURL := fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", c.link.addr, dbName)
	if o.pooled() {
		// idem, the pooler, the link, PostgreSQL: the link's toxics and a
		// failover's re-pointing act on the pooler's server connections.
		if c.pooler, err = o.Pooler(pgURL); err != nil {
			return fmt.Errorf("chaos: start the pooler: %w", err)
		}
		pgURL = c.pooler.URL(dbName)
	}
	c.cfg = filepath.Join(o.Dir, "idem.yaml")
	if err := os.WriteFile(c.cfg, []byte(c.config(clientURL, pgURL)), 0o600); err != nil {
		return err
	}
	// Operator commands (idem pause) run as the administrator, whichever
	// role the replicas log in as.
	c.adminCfg = filepath.Join(o.Dir, "idem-admin.yaml")
	if err := os.WriteFile(c.adminCfg, []byte(c.config(clientURL, pgURL)), 0o600); err != nil {
		return err
	}
	for _, args := range [][]string{{"migrate"}, {"streams"}} {
		// A cluster that just formed may still be electing its meta leader:
		// retry, as a setup job's back-off would.
		for try := 1; ; try++ {
			out, err := exec.CommandContext(ctx, o.Bin, append(args, "--config", c.cfg)...).CombinedOutput()
			if err == nil {
				break
			}
			if try == 5 || !o.Cluster {
				return fmt.Errorf("chaos: idem %s: %w\n%s", args[0], err, out)
			}
			o.Logf("chaos: idem %s failed (try %d), again: %s", args[0], try, strings.TrimSpace(string(out)))
			sleepCtx(ctx, 2*time.Second)
		}
	}
	if o.LeastPrivilege {
		// migrate and streams ran as the administrator; the replicas run
		// as the loader, with the config written again for it.
		if err := c.asLoader(ctx, clientURL, pgURL); err != nil {
			return err
		}
	}
	connect := func(url, name string) (*nats.Conn, jetstream.JetStream, error) {
		nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1),
			nats.ReconnectWait(100*time.Millisecond), nats.ReconnectBufSize(-1))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		return nc, js, err
	}
	if c.nc, c.js, err = connect(directURL, "idem chaos checker"); err != nil {
		return err
	}
	if c.pubNC, c.pubJS, err = connect(clientURL, "idem chaos publisher"); err != nil {
		return err
	}
	prob := o.CrashProb
	if o.NoFaults || prob < 0 {
		prob = 0
	}
	for i := range o.Replicas {
		rep := newReplica(i, o.Bin, c.cfg, c.logs, o.Seed, prob)
		rep.env = c.files.env()
		c.replicas = append(c.replicas, rep)
		go rep.supervise()
	}
	return c.waitReady(ctx, time.Minute)
}

// config is the replicas' config: every dataset of the campaign, with
// NATS at natsURL and the warehouse at pgURL.
func (c *campaign) config(natsURL, pgURL string) string {
	// The file datasets end with the top-level s3: block: last.
	return configYAML(natsURL, pgURL, c.o) + c.timely.yaml() + c.files.yaml()
}

// waitReady waits until every replica has said it started.
func (c *campaign) waitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ready := 0
		for _, rep := range c.replicas {
			if logSays(rep.logPath(), serveStarted) {
				ready++
			}
		}
		if ready == len(c.replicas) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: %d of %d replicas started within %s; logs in %s", ready, len(c.replicas), within, c.logs)
		}
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// waitDrained waits until the consumer has nothing pending, no advisory
// awaits the reconciler, and every settle event is in the ledger or the
// dead-letter stream.
func (c *campaign) waitDrained(ctx context.Context, deadline time.Time, settle []*event) error {
	var last string
	for {
		done, state, err := c.drained(ctx, settle)
		if err == nil && done {
			return nil
		}
		if err != nil {
			state = err.Error()
		}
		last = state
		if time.Now().After(deadline) {
			return errors.New(last)
		}
		sleepCtx(ctx, 250*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (c *campaign) drained(ctx context.Context, settle []*event) (bool, string, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons, err := c.js.Consumer(qctx, eventsStream, durableConsumer)
	if err != nil {
		return false, "", err
	}
	ci, err := cons.Info(qctx)
	if err != nil {
		return false, "", err
	}
	adv, err := c.streamInfo(qctx, advisoryStream)
	if err != nil {
		return false, "", err
	}
	var loaded int
	if err := c.db.QueryRow(qctx, `SELECT count(*) FROM idem.run_ledger WHERE dag_id = $1 AND run_id = $2`,
		pipeline, settle[0].runID).Scan(&loaded); err != nil {
		return false, "", err
	}
	state := fmt.Sprintf("consumer: %d pending, %d awaiting ack; %d advisories; settle events loaded %d of %d",
		ci.NumPending, ci.NumAckPending, adv.State.Msgs, loaded, len(settle))
	if ci.NumPending > 0 || ci.NumAckPending > 0 || adv.State.Msgs > 0 {
		return false, state, nil
	}
	if loaded == len(settle) {
		return true, state, nil
	}
	// Idle with settle events missing: done only if the rest were dead-lettered.
	dls, err := readDeadLetters(qctx, c.js)
	if err != nil {
		return false, "", err
	}
	inDLQ := 0
	for _, dl := range dls {
		if idx, _, ok := parseChaosID(dl.chaosID); ok && idx >= settle[0].idx {
			inDLQ++
		}
	}
	return loaded+inDLQ >= len(settle), state, nil
}

func (c *campaign) streamInfo(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

// figures fills the report's counts from the plan and the history, and
// flags panics and unclean final stops.
func (c *campaign) figures(r *Report, pl *plan, settle []*event, pub *publisher, h history) {
	for _, ev := range pl.events {
		if ev.fatal != "" {
			r.Events.Fatal++
		} else {
			r.Events.Valid++
			if ev.replay {
				r.Events.Replays++
			}
		}
	}
	r.Events.Settle = len(settle)
	r.Events.Total = len(pl.events) + len(settle)
	for _, m := range pl.mutations {
		if m.done {
			r.Events.StagingChanges++
		}
	}
	for _, ev := range h.events {
		for _, cp := range ev.copies {
			if !cp.acked {
				continue
			}
			r.Messages.Published++
			if cp.n > 0 {
				r.Messages.ExtraCopies++
			}
			if cp.msgID {
				r.Messages.WithMsgID++
			}
			if cp.duplicate {
				r.Messages.DedupedByJetStream++
			}
			if cp.late {
				r.Messages.LateCopies++
			}
		}
	}
	r.Messages.PublishRetries = pub.retries
	// Messages stored while the warehouse was down: what idem had to hold.
	for _, ev := range h.events {
		for _, cp := range ev.copies {
			for _, f := range h.faults {
				if cp.acked && !cp.duplicate && f.Kind == FaultWarehouseDown && f.Skipped == "" &&
					!cp.sentAt.Before(f.Start) && !cp.sentAt.After(f.End) {
					r.Messages.DuringWarehouseOutages++
				}
			}
		}
	}
	if pub.mutFails > 0 {
		r.note("%d staging changes could not be applied (the database stayed down); the reference is staging as it is", pub.mutFails)
	}
	for _, f := range h.faults {
		if f.Skipped != "" {
			r.Faults.Skipped++
			continue
		}
		r.Faults.Total++
		r.Faults.ByKind[f.Kind]++
		switch f.Kind {
		case FaultWarehouseDown:
			r.Faults.LongestWarehouseOutageSeconds = max(r.Faults.LongestWarehouseOutageSeconds, f.Outage.Seconds())
			r.Faults.SlowestResumeSeconds = max(r.Faults.SlowestResumeSeconds, f.Resumed.Seconds())
			if f.Resumed == 0 && f.Err == "" {
				r.violate("warehouse_down at %s: idem finished no load within %s of PostgreSQL coming back (%.1fs outage)",
					f.Start.Format(time.RFC3339), resumeBound, f.Outage.Seconds())
			}
		case FaultPGFast, FaultPGImmediate:
			r.Faults.LongestWarehouseOutageSeconds = max(r.Faults.LongestWarehouseOutageSeconds, f.Outage.Seconds())
		case FaultFailover:
			r.Faults.FailoverLostLoads += f.LostLoads
			r.Faults.LongestFailoverOutageSeconds = max(r.Faults.LongestFailoverOutageSeconds, f.Outage.Seconds())
			r.Faults.SlowestFailoverResumeSeconds = max(r.Faults.SlowestFailoverResumeSeconds, f.Resumed.Seconds())
			if f.Resumed == 0 && f.Err == "" {
				r.violate("failover at %s: idem finished no load within %s of the promotion, through the same address and config",
					f.Start.Format(time.RFC3339), resumeBound)
			}
		case FaultPoolerRestart:
			r.Faults.LongestPoolerOutageSeconds = max(r.Faults.LongestPoolerOutageSeconds, f.Outage.Seconds())
		case FaultNATSDown, FaultNATSRestart:
			r.Faults.LongestNATSOutageSeconds = max(r.Faults.LongestNATSOutageSeconds, f.Outage.Seconds())
		case FaultRollingRestart:
			r.Faults.ReplicasRolled += f.Param
		}
		siteFaultFigures(r, f)
		switch {
		case f.Err != "" && f.Kind == FaultRollingRestart:
			// A replica that does not stop on SIGTERM, or whose successor
			// does not start, is a deploy that hangs.
			r.violate("rolling restart at %s: %s", f.Start.Format(time.RFC3339), f.Err)
		case f.Err != "":
			r.note("fault %s at %s: %s", f.Kind, f.Start.Format(time.RFC3339), f.Err)
		}
	}
	// The point of a long warehouse outage is to outlast every message's
	// retries: one that did not proves nothing about the circuit.
	if n := r.Faults.ByKind[FaultWarehouseDown]; n > 0 && r.Faults.LongestWarehouseOutageSeconds <= r.RetryScheduleSeconds {
		r.violate("the longest warehouse outage (%.1fs) did not outlast the retry schedule (%.1fs): the campaign proves nothing about outages",
			r.Faults.LongestWarehouseOutageSeconds, r.RetryScheduleSeconds)
	}
	x := &r.Exits
	x.CleanFinal = 0
	finals := map[int]bool{}
	for _, e := range h.exits {
		x.Starts++
		switch {
		case e.Final:
			finals[e.Replica] = true
			if e.Code == 0 {
				x.CleanFinal++
			} else {
				r.violate("replica %d did not stop cleanly at the end: exit %d %s: %s", e.Replica, e.Code, e.Signal, e.LastLine)
			}
		case e.Killed:
			x.KilledByChaos++
		case e.Crashed:
			x.CrashHook++
			r.Faults.Total++
			r.Faults.ByKind[FaultCrashCommit]++
		case e.Code == 0:
			x.GracefulRestarts++
		case e.Restarted:
			// A deploy's SIGTERM must end in a clean exit, as the final stop.
			x.Other++
			r.violate("replica %d incarnation %d did not stop cleanly on a rolling restart's SIGTERM: exit %d %s: %s",
				e.Replica, e.Incarnation, e.Code, e.Signal, e.LastLine)
		case e.Code == 1 && startupFailure(e.LastLine):
			x.StartupFailure++
		default:
			x.Other++
			r.note("replica %d incarnation %d exited %d %s: %s", e.Replica, e.Incarnation, e.Code, e.Signal, e.LastLine)
		}
		s := scanLog(e.Log)
		if len(s.panics) > 0 {
			r.Check.Panics += len(s.panics)
			r.violate("%s: %s", e.Log, s.panics[0])
		}
		r.Reverify.add(s.reverify)
	}
	r.Check.CleanStops = x.CleanFinal == len(c.replicas)
	if len(finals) != len(c.replicas) {
		r.violate("%d of %d replicas were running at the end", len(finals), len(c.replicas))
	}
}

// checkPooled looks, once the replicas have stopped, at what they left on
// the pooler's server connections: behind a transaction pooler those go to
// other clients, so any session state there (an advisory lock above all)
// is a violation.
func (c *campaign) checkPooled(ctx context.Context, r *Report) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	findings, err := c.pooler.Leftovers(pctx, dbName, c.wh.url(""))
	if err != nil {
		r.violate("pooled server connections could not be inspected: %v", err)
		return
	}
	r.Check.PooledLeftovers = len(findings)
	for _, f := range findings {
		r.violate("left on a pooled server connection after the replicas stopped: %s", f)
	}
}

// startupFailure recognises a process that exited because PostgreSQL or
// NATS was down while it started: the supervisor restarts it.
func startupFailure(line string) bool {
	for _, s := range []string{"cannot reach PostgreSQL", "cannot reach NATS", "nats connect", "connect: connection refused",
		"the database system is", "schema idem", "look up stream", "SQLSTATE 57P", "unexpected EOF", "connection reset", "failed to connect",
		"JetStream system temporarily unavailable"} {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func (c *campaign) close() {
	for _, rep := range c.replicas {
		rep.stop(10 * time.Second)
	}
	if c.nc != nil {
		c.nc.Close()
	}
	if c.pubNC != nil {
		c.pubNC.Close()
	}
	if c.cluster != nil {
		c.cluster.close()
	} else if c.nats != nil {
		c.nats.down()
	}
	if c.link != nil {
		c.link.close()
	}
	c.files.close()
	if c.db != nil {
		c.db.Close()
	}
	c.src.close()
	if c.wh != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := c.wh.close(ctx); err != nil {
			c.o.Logf("chaos: PostgreSQL not handed back as it was found: %v", err)
		}
	}
}

// waitOutbox waits until the relays published every outbox row, for at
// most bound, and returns how many are left and how long it waited.
func (c *campaign) waitOutbox(ctx context.Context, bound time.Duration) (int, time.Duration) {
	start := time.Now()
	left := -1
	for time.Since(start) < bound && ctx.Err() == nil {
		if err := c.db.QueryRow(ctx, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL").Scan(&left); err == nil && left == 0 {
			return 0, time.Since(start)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return left, time.Since(start)
}

// publishFor is how long after the start the publisher may take to
// publish the workload: a minute past the phase, and past the longest
// phase EveryKind may run (twice its length), since the faults that hold
// it back (a warehouse down under a mutation, a full stream) go on there.
func publishFor(o Options) time.Duration {
	if o.EveryKind {
		return 2*o.Duration + time.Minute
	}
	return o.Duration + time.Minute
}
