// Package schemas says what an idem event is: the "partition ready" wire body,
// its JSON Schema, and the strict decoder that turns raw bytes from a subject
// into a validated [Event] or an [*InvalidEventError].
//
// It is pure: it must never do I/O, talk to NATS or Postgres, read the clock or
// the environment. Everything above it (handlers, consumer, cmd) relies on an
// Event having been checked here once, so the rules live in one place.
//
// # Strictness
//
// [Decode] rejects anything the JSON Schema in partition_ready.v1.json rejects,
// and more: duplicate keys (which most JSON parsers silently resolve), invalid
// UTF-8, trailing data, a dataset that does not match the subject or the
// configuration, and partitions that are not real calendar dates. Go's
// encoding/json matches field names case-insensitively and keeps the last of
// duplicate keys, so the decoder walks the token stream itself instead of
// unmarshalling into a struct.
//
// Every rejection is an [*InvalidEventError] whose Fatal method returns true,
// so the consumer can dead-letter it without importing this package.
//
// # Hostile strings
//
// run_id, attribute values and text partitions may hold any printable text,
// including quotes, SQL and shell metacharacters. That is deliberate: they are
// only ever bound as query parameters or set as header values, never
// interpolated, and control characters (which could split a log line or a NATS
// header) are rejected here.
package schemas
