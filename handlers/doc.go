// Package handlers turns one "partition ready" event into one load transaction,
// and classifies every failure as fatal (dead-letter now) or transient (retry).
//
// # Who owns what
//
// The handler owns the transaction: it is the only place that begins, commits
// or rolls back a load. Strategies receive the pgx.Tx; audit functions receive
// whatever Querier the handler gives them. The handler never acknowledges a
// message: it returns an Outcome or an error, and the consumer decides the
// message's fate from IsFatal (an interface check, so the consumer does not
// import this package).
//
// # The order of writes
//
// The ledger is checked first, outside any lock, so a redelivery after a lost
// ack costs one indexed read. The `started` row is committed on its own so that
// a process that dies mid-load leaves a trace. The load transaction then takes
// a per-partition advisory lock (two replicas, or a redelivery racing a slow
// first delivery, never load one partition at once), checks the ledger again,
// runs the strategy, marks the audit row `success` and inserts the ledger row,
// whose primary key makes a second success of the same run impossible.
//
// This package must never talk to NATS.
package handlers
