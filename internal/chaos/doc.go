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
//     through which every idem process connects.
//  2. Fault phase (Options.Duration): Options.Replicas `idem serve`
//     processes on the same durable consumer, each restarted by a
//     supervisor when it dies. A publisher sends Options.Events distinct
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
// # Determinism
//
// The workload (every event, copy, delay and staging change) and the fault
// schedule (kinds, times, targets, parameters) are functions of the seed.
// How they interleave with real processes is not: the same seed replays the
// same intentions, as in Jepsen, not the same history.
//
// # What the faults are
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
//
// PostgreSQL runs with synchronous_commit on: idem acknowledges a message
// only after COMMIT returns, so a commit that a server crash can take back
// would be a lost load by configuration, not by idem.
package chaos
