// Package strategies loads one partition of a dataset idempotently, with the
// three patterns of the article idem grew from:
//
//   - DeleteInsert: delete the partition's rows, insert the source's
//     (straight into the child of a natively partitioned target that holds
//     exactly that partition, which only Spec.TruncatePartition truncates);
//   - Merge: upsert on the natural key, never rewriting unchanged rows, and
//     with a version column never letting an older version win;
//   - AppendDedupe: append rows tagged with run_id and a load sequence, and a
//     view that keeps the latest row per key.
//
// Every statement is set-based SQL inside a pgx.Tx that the caller owns, run
// there or queued on the caller's batch (Describe, GroupLoader's QueueLoads):
// rows never travel through Go. Identifiers are quoted with pgx.Identifier; the
// partition and run_id are bound parameters (@partition, @run_id), never text
// spliced into SQL. The source SQL is the user's, embedded as a subquery.
//
// A load is invisible to readers until it commits and never makes them wait:
// a statement that takes a lock readers would queue behind (TRUNCATE, view
// DDL) only runs when asked for or needed, and waits at most LockTimeout.
//
// A strategy never opens, commits or rolls back a transaction (a savepoint
// inside the caller's aside), never reads the configuration file, and knows
// nothing of NATS.
package strategies
