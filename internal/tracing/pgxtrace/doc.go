// Package pgxtrace makes the OpenTelemetry client spans of the statements
// idem sends through pgx.
//
// [PgxTracer] is a pgx.QueryTracer, BatchTracer, CopyFromTracer and
// ConnectTracer: one client span per statement (one per statement of a
// batch, under a span for the batch), with db.system.name postgresql,
// db.namespace the database, db.query.text the statement as written, and
// db.response.status_code the SQLSTATE of a failure. The arguments are
// never recorded: values reach PostgreSQL only as bound parameters, and
// that is where they stay. Nor is a failed statement's error text, which
// can quote an argument (PostgreSQL's invalid input syntax, pgx's encoding
// errors): a server error is its SQLSTATE, any other its kind. The
// statement text is recorded as written, so a source must not hold a
// secret as a literal. [WithPgxTracer] adds it to a connection config
// alongside any tracer the config already has.
package pgxtrace
