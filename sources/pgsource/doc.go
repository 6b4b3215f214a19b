// Package pgsource reads a partition's rows from another PostgreSQL (the
// application's own database, often a streaming standby) into the load's
// transaction on the warehouse, by logical date: [Copy] for the rows,
// [Fingerprint] for a hash that says whether they changed since.
//
// It never begins, commits or rolls back the load's transaction (it works
// inside a savepoint of it), never writes to the source, never logs, and
// never puts the source's URL or password in an error: errors name the
// source as host:port/database ([Spec.Addr]). It imports nothing of idem but
// internal/sqlcheck.
//
// # One snapshot, pinned text
//
// Each attempt opens a dedicated connection to the source (pgconn's CopyTo
// closes its connection when the writer fails) and one transaction,
// BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY: the statement that
// records the snapshot's position ([Source]) and the COPY see the same
// snapshot. Rows travel as COPY text from COPY (sql) TO STDOUT into
// COPY table (columns) FROM STDIN on the load's connection
// (pgconn.PgConn.CopyFrom), through an io.Pipe fed by a 64 KiB buffer, so
// memory does not grow with the partition. Text, not binary: binary COPY
// between two servers depends on both having identical types and build
// options. DateStyle, IntervalStyle, extra_float_digits, TimeZone,
// bytea_output, lc_monetary and xmloption are pinned on both sides (SET
// LOCAL on the source, set_config(..., true) on the destination, the
// caller's values restored afterwards), so a value reads back as itself
// whatever either database defaults to.
//
// # Binding @partition
//
// COPY (query) TO STDOUT takes no bind parameters. @partition and @run_id
// are replaced by string literals exactly where pgx's named-argument lexer
// would bind them, cross-checked against internal/sqlcheck's lexer; the
// literal is plain for simple values ('2026-11-28') and a Unicode-escape
// constant (U&'...') holding no quote, dollar, star or semicolon otherwise.
// It is untyped, like a bound parameter, so PostgreSQL types it from
// context. The comment at the top of bind.go argues why this is safe.
//
// # A standby's lag
//
// With [Spec.MaxReplicaLag] set, a source in recovery is sampled before its
// snapshot is taken: now() - pg_last_xact_replay_timestamp(), the age of the
// primary's last commit the standby has replayed. A standby that streams
// (its WAL receiver runs) and has replayed everything it received
// (pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn(); after a restart
// replay stands past what the stream has brought again) and the primary's
// WAL up to its end as last reported (pg_stat_wal_receiver.latest_end_lsn)
// counts as lag 0, because an idle primary commits nothing and the last
// commit only grows old; a standby whose stream is down does not, as it
// cannot know what it misses. If the lag stays above the
// limit for a few samples, Copy returns a [*LagError]: a wait, never a
// failure. The comparison uses the standby's clock against the primary's
// commit times, so clock skew between them adds to or hides lag.
//
// # Recovery conflicts
//
// A standby's replay may cancel a query whose snapshot still needs rows a
// VACUUM on the primary removed, or that holds a lock replay needs:
// SQLSTATE 40001 "canceling statement due to conflict with recovery" (or
// 40P01). The COPY into the destination runs in a savepoint; Copy rolls it
// back and reads again from a new snapshot, up to
// [Spec.RecoveryConflictRetries] times, then returns a fatal
// [*RecoveryConflictError] whose message names the fix:
// hot_standby_feedback = on on the standby, or a larger
// max_standby_streaming_delay.
//
// # Errors by behaviour
//
// Callers tell the outcomes apart with errors.As on behaviours, as idem's
// consumer does, without importing this package's types:
//
//	NotReady() bool           *LagError: hold the message, spend no attempt
//	Fatal() bool (true)       *RecoveryConflictError, *SpecError,
//	                          *PartitionError, *Error of KindFatal;
//	                          FatalReason() gives the dead letter's reason
//	SourceUnavailable() bool  *Error of KindUnavailable: transient, the
//	                          source (not the warehouse) is down
//	anything else from Copy   transient source errors (*Error), a wrapped
//	                          context error, or the destination's own error
//
// A source *Error does not wrap the driver's error, so a classifier that
// reads SQLSTATEs as the warehouse's never mistakes the source's for it;
// it keeps the SQLSTATE in its SQLState field.
package pgsource
