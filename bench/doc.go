// Package bench measures idem against the limits it cannot beat: the very SQL
// it issues per event run by a plain pgx loop, the bare single-transaction
// DELETE + INSERT .. SELECT, pgbench running the same pattern, COPY, and a
// naive consumer that does no bookkeeping. Every figure is taken in one run on
// the same servers, so the ratios are fair even on a shared, noisy machine;
// absolute numbers are not.
//
// # What it runs
//
// Run starts a durable PostgreSQL (fsync on, shared_buffers 1GB) and an
// in-process NATS server, or uses the servers named in Options, builds idem
// and runs `idem serve` as a child process, then measures:
//
//   - small: 10-row partitions at several max_in_flight: events/s and
//     publish-to-commit latency, against the limit (the SQL idem issues,
//     captured from idem's own handler and replayed), the floor (BEGIN;
//     DELETE; INSERT .. SELECT; COMMIT), pgbench and a naive consumer;
//   - duplicates: every event delivered twice, idem against the naive consumer
//     (events/s and rows doubled);
//   - skipped: the cost of a redelivery of a run that already succeeded;
//   - big: 100k and 1M-row partitions for every strategy against the floor,
//     COPY and the bare statements, five reruns for drift, WAL and dead tuples;
//   - backfill: `idem backfill` of daily partitions at several max_in_flight;
//   - memory: the peak RSS (VmHWM) of every `idem serve` child;
//   - checks: loads with and without a dataset's checks;
//   - tracing: small events with tracing on (the collector down) and off;
//   - lone: one event at a time, publish to ack, against an earlier idem
//     binary (Options.BaselineBin) on a database it migrates itself.
//   - statements: 10-row partitions and a big load through `idem serve`
//     with postgres.statement_mode prepare, describe and exec, and auto
//     through a pgbouncer the harness starts (transaction pooling), in
//     turns.
//
// Around every closed-loop run of small it reads the CPU time of each
// process from /proc (cpu.go): the PostgreSQL cluster, `idem serve`, and
// its own process with the embedded NATS server.
//
// # Sources
//
// RunSources (sources.go) measures one partition loaded by `idem serve`
// from files (CSV on local disk and in S3, NDJSON, Parquet) and from a
// second PostgreSQL cluster against psql's `\copy` and `psql COPY TO |
// psql COPY FROM` in turns, and idem's peak RSS over a large file of each
// format. Its S3 server is versitygw from testkit/s3test, so it runs as a
// test: TestSources, tiny in `make test`, full in `make bench-sources`,
// which writes bench/results/sources-full.json for `idembench -sources`.
//
// # The limit is captured, not hand-written
//
// The "limit" replays, per event, the statements idem's handler issued for one
// sample event, recorded through a wrapper of handlers.DB, with the partition,
// run_id and audit id rebound. When the handler changes its SQL (fewer round
// trips, a pipeline), the limit follows without editing this package.
//
// # What it must never do
//
// It never touches a database or stream it did not create: it works in a new
// database idembench_* and in streams IDEMBENCH_*, and drops them at the end.
// It never asserts timings: the smoke test checks the harness produces sane
// numbers, not fast ones.
package bench
