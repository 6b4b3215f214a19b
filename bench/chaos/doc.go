// Package chaos is idem's chaos harness: it runs two or three real `idem
// serve` processes against an in-process NATS server and a real PostgreSQL,
// publishes a seeded workload while a seeded schedule injects faults, lets the
// system settle, and then checks, independently of idem, that nothing was
// lost, nothing doubled and every bad input dead-lettered once.
//
// It is test machinery: production code must never import it, and it must
// never touch a database, NATS server or process it did not start.
//
// # Shape
//
// The shape is Jepsen's (a generator, a nemesis, a final healing phase and a
// checker over the whole history) with nats-server's bouncing of servers:
//
//  1. Setup: a database "chaos" in a PostgreSQL cluster the caller owns,
//     four datasets (delete_insert on a plain and on a natively partitioned
//     table, merge with a version column, append_dedupe) over
//     Options.Partitions partitions each, staging rows for each partition, an
//     embedded NATS server, and a Toxiproxy proxy in front of PostgreSQL
//     through which every idem process connects. When the schedule holds a
//     failover, an asynchronous streaming standby of the cluster too.
//  2. Fault phase (Options.Duration): Options.Replicas `idem serve`
//     processes on the same durable consumer, each restarted by a
//     supervisor when it dies (or is stopped by a rolling restart). A publisher sends Options.Events distinct
//     events (1 to 3 copies each, with and without Nats-Msg-Id, some copies
//     late; replays with new run_ids; staging changes before some of them;
//     a share of fatal inputs). A nemesis runs the fault schedule; the test
//     build of idem also exits right after a commit and before the ack with
//     probability Options.CrashProb.
//  3. Settle: faults off and healed, one final event per (dataset,
//     partition) with a fresh run_id, then wait until the consumer has
//     nothing pending, within Options.DrainBound of the last fault.
//  4. Check (checker.go): plain SQL over staging and the targets, the
//     audit and ledger tables as a history (each delete_insert load must
//     have deleted what the previous one inserted), the samples of a reader
//     that queried the targets every second, and the dead-letter stream read
//     message by message, all compared with what the publisher recorded.
//
// docs/RELIABILITY.md lists every invariant and the figures of the last
// long run.
//
// # The cluster topology
//
// With Options.Cluster, NATS is three nats-server child processes
// (natscluster.go) with R3 streams, a Toxiproxy proxy in front of every
// client port and on every route, and the schedule draws from
// clusterFaultWeights: the stream's leader or a follower SIGKILLed and
// restarted, a server stopped past an election, one server's routes
// blackholed (a minority partitioned away), a rolling restart of the
// servers, and latency, resets and blackholes on the client links
// (faults_cluster.go). nats_restart and nats_down stop every server. The
// checker is the same; every cluster fault counts as an outage.
//
// # Behind a pooler
//
// With Options.PoolMode (CHAOS_POOLER=transaction or session; `make
// chaos-pooler` runs TestChaosPoolerShort in transaction mode) the replicas
// reach PostgreSQL through a real PgBouncer with its default settings, which
// the test harness starts (Options.Pooler: this package does not know how a
// pooler is run) in front of the Toxiproxy link: idem, PgBouncer, the link,
// PostgreSQL. The link's toxics, the PostgreSQL restarts and the failover's
// re-pointing act as before, on PgBouncer's server connections; `idem
// migrate` and `idem streams` go through the pooler too, and the
// campaign's own pool does not. The schedule adds pooler_restart, as often
// as pg_terminate: a load in flight loses its connection without a word,
// which spends an attempt as pg_immediate does. Once the replicas have
// stopped, the campaign opens as many client connections as the pool
// holds server connections and reports as a violation anything a replica
// left there (an advisory lock, a SET, a prepared statement, a temporary
// table, a LISTEN, a cursor), and any advisory lock an idle backend holds.
//
// # Beyond the default campaign
//
// Options.Kinds restricts the schedule to the named short kinds, among
// them those extraFaultWeights holds, which the default campaign never
// draws because they need more of the site:
//
//   - site_crash (faults_site.go, with Options.Cluster): PostgreSQL, every
//     nats-server, every replica and versitygw SIGKILLed at once, then
//     brought back in an order the seed draws.
//   - pg_disk_full (faults_disk.go, with Options.PG on a sized tmpfs): the
//     data directory's filesystem filled with a ballast, and freed.
//   - js_storage_full (faults_jsfull.go; Options.Downstream adds a then:
//     dataset): the events, dead-letter or results stream at its limit.
//   - clock_step (faults_clock.go): one replica's host clock an hour ahead
//     or behind, read through IDEM_TEST_CLOCK_FILE by the test build.
//   - replica_source_failover (faults_source.go, with Options.PGSource: a
//     second PostgreSQL with a standby, pgsource.go): the standby restarted
//     or promoted mid-COPY.
//   - object_store_down, _slow, _5xx (faults_objstore.go, with
//     Options.Files: watched file datasets in a real versitygw, files.go).
//
// Options.LeastPrivilege runs the replicas as grants.sql's role
// (grants.go). TestChaosFaultsShort runs every one of these kinds in one
// campaign; each has a focused campaign too (CHAOS_FAULTS=1, make
// chaos-faults).
//
// # Determinism
//
// The workload (every event, copy, delay and staging change) and the fault
// schedule (kinds, times, targets, parameters) are functions of the seed.
// How they interleave with real processes is not: the same seed replays the
// same intentions, as in Jepsen, not the same history. TestChaosShort, which
// `make test` runs, uses a fixed seed (CHAOS_SEED overrides it); `make
// chaos` draws one and prints it.
//
// # What the faults are
//
// Short faults, drawn by weight between FaultGapMin and FaultGapMax apart:
//
//	kill          SIGKILL of a replica at a random moment
//	crash_commit  the replica exits right after a load's COMMIT, before the ack
//	              (IDEM_TEST_CRASH_AFTER_COMMIT_PROB in the idemtest build)
//	pause         SIGSTOP for longer than ack_wait, then SIGCONT
//	pg_fast       pg_ctl stop -m fast, down 0-3 s, start
//	pg_immediate  pg_ctl stop -m immediate (a crash), down 0-3 s, start
//	pg_terminate  pg_terminate_backend of every idem connection
//	nats_restart  the NATS server shut down, down 0-2 s, restarted on the
//	              same port and store
//	latency       Toxiproxy latency on the database link, both directions
//	reset_peer    Toxiproxy reset_peer: connections reset (TCP RST)
//	timeout       Toxiproxy timeout: data dropped, connections closed after
//	              the toxic's timeout
//	pooler_restart  behind a pooler only (Options.PoolMode): the pooler
//	                stopped, every client connection dropped at once, down
//	                0-2 s, started on the same port
//
// Long faults, Options.LongRounds rounds of each (one in TestChaosShort,
// four in `make chaos`, none in TestChaosClusterShort), in an order the seed
// draws; the schedule spreads them evenly over the phase, fits each inside
// it, and fills the time between them with short faults:
//
//	warehouse_down   pg_ctl stop -m fast, down WarehouseDownMin to
//	                 WarehouseDownMax (25-35 s in TestChaosShort, 30 s to
//	                 3 min in `make chaos`), start; then wait until idem
//	                 finishes a load again (a violation if not within 60 s,
//	                 twice idem's longest probe delay): no deploy may
//	                 restart the processes before they resume by themselves
//	nats_down        the NATS server shut down for NATSDown (30 s),
//	                 restarted on the same port and store
//	rolling_restart  a deploy: SIGTERM to each replica in turn, wait until it
//	                 exited and its successor started, then the next
//	failover         the standby stopped for 1-3 s while loads go on and are
//	                 acknowledged on the primary alone, the primary
//	                 SIGKILLed, the standby started and promoted, the proxy
//	                 re-pointed to it; then a new standby of the new primary
//	                 at the dead one's place, and a wait until idem finishes
//	                 a load again (a violation if not within 60 s)
//
// Faults never overlap: the nemesis runs one at a time and each heals
// before the next starts (a failover's heal is the new standby); none starts after the phase, but the last one
// runs its full length. The schedule gives a warehouse outage 30 s more for
// idem to resume. The report gives the longest outages as measured, stop to
// start, the messages stored while the warehouse was down (what idem had to
// hold), and how long idem took to load again after it came back.
//
// # The failover
//
// The campaign's PostgreSQL is two places, the caller's cluster and one of
// its own, each a port and a data directory (failover.go). One is the
// primary, the other its asynchronous streaming standby (pg_basebackup
// -R); a failover swaps them: the standby, stopped so that it misses the
// last commits, is promoted once the primary is killed, and the dead
// primary's place is wiped and made the new primary's standby, so the next
// failover finds the same two ports. At the end the caller's cluster is
// handed back as the primary (a switchover after an odd number of
// failovers), for the next campaign.
//
// idem reaches the new primary without a config change because its one
// address, the Toxiproxy proxy, is re-pointed to the promoted server, as a
// virtual IP or HAProxy in front of a Patroni cluster would be. That keeps
// the design unchanged: one link to PostgreSQL for every idem process, the
// one every database toxic acts on, whoever is primary. A multi-host
// postgres.url with target_session_attrs=read-write would need a proxy per
// place and toxics on each, and is tested end to end in e2e
// instead. The campaign's own pool (the checker, the reader, the
// publisher's staging changes, the nemesis's pg_terminate_backend and its
// wait for idem's next load) uses that multi-host form over both places, so
// it always reads and writes the current primary and never the standby.
//
// What a failover tests is re-verification (internal/reverify): the
// promoted standby lacks the last loads idem acknowledged, their ledger
// rows and audit rows; idem notices the new server (its identity, or its
// circuit closing) and loads those events again from the events stream.
// The nemesis reads the old primary's ledger right before the kill and the
// new primary's right after the promotion, before idem can reach it: the
// runs in the first and not the second are the loads the failover took
// back (failover_lost_loads), and the checker counts those the final
// ledger has again. The staging changes of those seconds are lost as well;
// the reference is staging as it ends, so that only changes what the
// settle events load. The primary keeps 512 MB of WAL for its standby
// (wal_keep_size) so that it can always catch up after the primary's other
// restarts, and before a failover the nemesis waits until it has: what it
// misses is the lag, exactly. The standby retries fetching WAL every 200 ms
// rather than 5 s, so that a promotion takes a fraction of a second, not a
// draw of up to 5 s.
//
// In the checker a failover is a fault that ends loads (the kill cuts the
// loads in flight, which counts their attempt, as pg_immediate does), and
// from two seconds after the kill to the promotion plus the ack wait and
// 10 s, an outage: a valid event dead-lettered then is a violation.
//
// # Retries, and why the outage is long
//
// Every dataset runs with idem's default retries (3, so 4 attempts), a
// retry_delay of 1 s and a max_retry_delay of 4 s: a message's retries wait
// 10 s at most in all (retrySchedule, checked against the consumer's own
// Backoff). Validate refuses a warehouse outage shorter than twice that, and
// the campaign reports a violation if the longest one measured did not
// outlast it: an outage that outlives every message's retries is one that
// would dead-letter everything if idem spent retries on it. The promise
// under test is that it does not: while PostgreSQL is unusable idem holds
// its messages, probes, and resumes; the budget counts loads that ran (the
// audit's attempts), not deliveries, so naks at shutdown, holds and
// redeliveries after a NATS outage never spend it.
//
// # Which dead letters the checker excuses
//
// A valid event must never be dead-lettered; the checker judges each copy
// of a valid event found in the dead-letter stream (judgeTransient):
//
//   - fatal: always a violation (misclassification).
//   - exhausted or crashed at a moment that falls inside an outage or a
//     deploy (warehouse_down, pg_fast, pg_terminate, a failover's outage,
//     nats_down, nats_restart, rolling_restart; each window stretched by the
//     ack wait plus 10 s, for reconnects and redeliveries): always a violation,
//     whatever else happened earlier in the message's life. The outage took
//     its last attempt, and idem must hold messages through outages. pg_fast
//     and pg_terminate are short warehouse outages (sessions get 57P01, new
//     connections are refused), held by the same circuit.
//   - otherwise excused only if a fault that ends a load that ran overlapped
//     the message's life: kill, crash_commit and pause (the process dies or
//     stops in the attempt, which stays `started` and counts), and, for an
//     exhausted one, also pg_immediate, failover, reset_peer and timeout (a
//     connection lost mid-load: the load ran and failed, which idem counts by
//     design, since only the next connect tells whether the warehouse is
//     gone).
//     Four such hits on one message are needed to spend its budget, so
//     excused dead letters are rare and each is listed in the notes.
//   - anything else (only latency, or nothing at all): a violation.
//
// The harness injects no poison message (one that kills every process that
// touches it): the crash hook fires at random per load, after the COMMIT,
// so its redelivery finds the run done. That is why crash_commit may excuse
// a crashed dead letter but rarely needs to. Every violation about a valid
// event's dead letter quotes the audit rows of its run (stream sequence,
// attempt, status, times, error) as evidence.
//
// Fatal inputs must still be dead-lettered exactly once, as fatal; one
// dead-lettered after more than one delivery is excused by a fault that
// redelivers without a failure (kill, crash_commit, pause, nats_restart,
// nats_down, rolling_restart), or, for an empty partition, which reaches the
// database, by any fault. An event for a dataset no replica knows
// (unknown_dataset) is redelivered by design while it waits for a config
// rollout (nats.unknown_dataset_grace, 10 s here), so its deliveries are
// not counted.
//
// PostgreSQL runs with synchronous_commit on: idem acknowledges a message
// only after COMMIT returns, so a commit that a server crash can take back
// would be a lost load by configuration, not by idem. A failover takes
// acknowledged commits back on purpose (the standby is asynchronous), and
// re-verification must load them again.
package chaos
