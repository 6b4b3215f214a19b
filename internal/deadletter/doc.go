// Package deadletter owns the dead-letter envelope and the dead-letter
// stream's operations: the Idem-* header names and the kind words (fatal,
// exhausted, crashed); building a dead letter from a failed message
// (Envelope, for the consumer, which decides fates and publishes); reading
// one back (Letter); and what operators do with them (Store: list with
// filters, get, replay, delete).
//
// Whoever writes the envelope also reads it: a header renamed on the way in
// (Idem-Original-<name>) is restored here on replay, and nowhere else.
//
// It must never import consumer, handlers or the command line, and it holds
// no presentation: callers render what it returns.
//
// # Writing
//
// A dead letter carries the original body unchanged and the original headers
// with every value of a repeated key. Original headers named Nats-* or Idem-*
// are kept as Idem-Original-<name>, so a Nats-Expected-* or Nats-TTL meant
// for the events stream cannot make the dead-letter stream refuse or expire
// the copy, and a publisher's Idem-Partition cannot pass for ours. Header
// values are one line of at most MaxHeaderValueBytes. Its Nats-Msg-Id is
// MsgID(stream, seq), so JetStream keeps one dead letter per message within
// the dead-letter stream's duplicate window.
//
// A fatal error's reason word (schema_mismatch, check_failed, ...) is
// Idem-Error-Reason when the outermost fatal error of the chain names it
// (interface{ FatalReason() string }); otherwise, and for dead letters stored
// before that header existed, Letter.Reason is read from the error text's
// leading "<word>:". Filter.Reason selects by it.
//
// # Replaying
//
// A replay republishes the original body and headers to the original
// subject, less the envelope and less the original's Nats-* directives
// (Nats-TTL excepted), with Idem-Replay-Of and Idem-Replay-Count. The dead
// letter is deleted only after JetStream has stored the replay, so it is
// never in neither place. One already replayed MaxReplays times is refused
// unless forced.
package deadletter
