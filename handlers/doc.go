// Package handlers turns one "partition ready" event into one load
// transaction (Handle), or several events of one dataset into one shared
// transaction (HandleGroup), and classifies every failure: fatal
// (dead-letter now), unavailable (the warehouse, not the event) or transient
// (retry).
//
// # Who owns what
//
// The handler owns the transaction: it is the only place that begins, commits
// or rolls back a load. Strategies receive the pgx.Tx (or queue their
// statements on the handler's batch); the audit's statements are queued on
// the batches the handler sends, and what is written after a rollback runs
// on the pool the handler gives. The handler never acknowledges a message:
// it returns an Outcome or an error, and the consumer decides the message's
// fate from the error's behaviour (Fatal, Unavailable, BudgetSpent: interface
// checks, so the consumer does not import this package).
//
// # The order of writes
//
// Before any of it, a source outside the warehouse, or a SELECT source
// with ready_when, is asked whether the partition is there (wait.go): one
// that is not returns a *WaitError, no attempt counted. For such a source
// the rows stream with COPY into a stage the strategy reads (source.go), or
// straight into a delete_insert target.
//
// A load is three pipelined round trips on one connection (see loading):
//
//  1. one statement checks the ledger (a run already done is recorded
//     `skipped`: a redelivery after a lost ack costs one indexed read),
//     counts the loads of this message that already ran against its budget,
//     and writes the `started` row, committed at once so that a process
//     that dies mid-load leaves a trace; behind it the load's transaction
//     opens, tries the per-partition advisory lock (two replicas, or a
//     redelivery racing a slow first delivery, never load one partition at
//     once) and looks the ledger up again under it;
//  2. the strategy loads, and the checks run on what it produced;
//  3. finish marks the audit row `success` and inserts the ledger row in one
//     statement, whose primary key makes a second success of the same run
//     impossible, writes the result, the lineage, the checks' outcomes, the
//     schema changes and the downstream events, and commits.
//
// Before a load begins, an event of a cancelled backfill is recorded
// `cancelled` and acked unloaded (one indexed read); the first round trip
// records an ordinary event of a retracted partition `skipped`, as it does
// a duplicate (handler.go). With keep_versions a load
// archives the rows it replaces before the strategy runs, and Restore and
// Retract run as a load does (versions.go).
//
// A lock another load holds costs a round trip (a group leaves that event
// to load alone after it). A group runs the same round trips for all its
// events, with set-based statements (one for their audit rows, one DELETE
// and one INSERT for their rows with delete_insert, one for their
// successes), and the same finish; if anything fails in it, it rolls back
// and each event loads alone.
//
// This package must never talk to NATS.
package handlers
