// Package consumer is idem's JetStream side: it fetches "partition ready"
// events from the durable pull consumer, hands each to a Handler, and turns
// the handler's result into the message's fate: ack, nak with a delay, or
// dead letter then term. It also creates the streams and consumers
// (EnsureStreams, which leaves an existing consumer alone; ConsumerDrift
// says how it differs from the config and ApplyStreams updates it) and
// dead-letters messages whose process died on every delivery (Reconciler).
//
// It must never know what a handler does: no Postgres, and no import of
// handlers, strategies or audit. What it needs to know about a message comes
// from schemas (the dataset, for routing and limits, and whether the body is
// valid at all); what it needs to know about a failure comes from the
// error's behaviour. It never builds a connection either: internal/service
// does, with internal/natsconn's options, and drains it after Run returns.
//
// # A message's way through
//
//  1. Fetch asks for as many messages as there are free slots: twice
//     Config.MaxInFlight, so the next loads' messages are already here
//     while the previous ones commit and are acked. A fetched message
//     never waits in a buffer without its heartbeats (step 3), and at most
//     MaxInFlight handlers run at once (step 6).
//  2. The message is read: JetStream metadata (stream sequence,
//     NumDelivered), its dataset from the subject's last token, and the body
//     through schemas.Decode with the configured datasets' partition types.
//  3. Heartbeats start (see below).
//  4. While the warehouse circuit is open, the message waits (see below).
//  5. If the dataset has a MaxConcurrency, the message waits for a turn; if
//     half the slots already wait for that dataset, it goes back instead.
//  6. The message waits for one of the MaxInFlight load slots, then the
//     Handler runs, panics recovered as *PanicError; with a GroupHandler,
//     the message that takes the slot takes along up to GroupSize-1 others
//     of its dataset waiting for one, and one call loads them all (each
//     keeps its own heartbeats, fate and ack: see group.go). The slot is
//     freed before the fate is carried out: the ack overlaps the next load.
//  7. Decide gives the fate; a Hold goes back to step 4, anything else
//     stops the heartbeats and is carried out.
//
// An invalid body skips steps 4 to 6: the handler never sees it.
//
// # How a message's fate crosses the boundary
//
// A Handler says one thing: nil, or an error. Behaviours are read from it,
// none of them a type this package imports:
//
//   - nil: the work is committed, or was found already done (a duplicate).
//   - Fatal() bool reporting true: retrying cannot help
//     (handlers.FatalError, schemas.InvalidEventError).
//   - Unavailable() bool reporting true: the warehouse cannot be used at
//     all (handlers.UnavailableError); the event is not at fault.
//   - Attempt() int: the number of the load that ran, counted by the
//     handler in the audit table (handlers.AttemptError). A handler that
//     reports none is counted by JetStream's deliveries instead.
//   - BudgetSpent() bool, with Crashed() bool: the message's loads already
//     ran as often as its budget allows, the last one died (Crashed) or
//     failed; this delivery ran nothing (handlers.BudgetSpentError).
//   - the handler context's cause, context.Cause(ctx): ErrShutdown means the
//     consumer interrupted it, whatever the handler made of the
//     cancellation.
//
// Everything else is transient. Decide is the one function that maps this to
// a Fate, pure and table-tested:
//
//	handler returned nil                      -> Ack: DoubleAck, confirmed by the server
//	cause is ErrShutdown                      -> Nak after ShutdownNakDelay; not a failure
//	no turn for the dataset                   -> Nak after TurnDelay; not a failure
//	dataset paused, beyond what this holds    -> Nak after PauseDelay; not a failure (pause.go)
//	Unavailable() reports true                -> Hold: the warehouse circuit
//	Fatal() reports true (invalid body too)   -> DeadLetter "fatal", after one delivery
//	BudgetSpent(), Crashed()                  -> DeadLetter "crashed", nothing ran
//	BudgetSpent()                             -> DeadLetter "exhausted", nothing ran
//	last allowed attempt, handler panicked    -> DeadLetter "crashed"
//	last allowed attempt, transient error     -> DeadLetter "exhausted"
//	transient error, attempts left            -> Nak after Retry.Backoff(attempt)
//
// # The retry budget counts loads that ran
//
// Retry.MaxAttempts (retries+1) is set against the attempt the handler
// reports, never against JetStream's delivery count: a nak at shutdown, a
// deferral for want of a turn, a message held through an outage and a
// redelivery that finds the run done all cost a delivery and no attempt.
// The handler learns the budget from Message.MaxAttempts and refuses to run
// past it, so a message whose load kills the process every time ends as
// crashed after its attempts, from the `started` rows those attempts left.
//
// # The warehouse circuit
//
// The first Unavailable error opens it: the fetch loop stops fetching (a
// message fetched now could only wait), every held message waits with its
// heartbeats going (no delivery, no attempt spent), and Config.Probe is
// called after ProbeDelay, doubling up to MaxProbeDelay. When a probe
// succeeds, one waiting message runs first (half open); if its load reaches
// the warehouse the circuit closes and everything resumes, otherwise it
// opens again. A stop while open naks the held messages for another replica.
// Warehouse reports the state for /readyz, Hooks.Circuit each change for a
// gauge, and the log has one line per change of state, never one per
// message. Errors on a working connection (a permission denied on one table,
// a schema mismatch) keep their own fate: they are the event's.
//
// Carrying a fate out: Ack is DoubleAck, the only ack the server confirms.
// Nak is always NakWithDelay: a plain Nak ignores every backoff and
// redelivers at once. DeadLetter publishes the copy, waits for JetStream's
// PubAck, and only then sends TermWithReason; if the publish fails the
// message is nak'ed with the backoff delay instead and stays pending. A
// message is never in neither place.
//
// Watermill's router is not used for this: its message model knows ack and
// nack, with no delay, no reason, no term and no in-progress, so the fate
// would have to be smuggled across it. (Nor is its SQL outbox: see
// package relay.)
//
// # Dead letters
//
// A dead letter goes to <DLQSubjectPrefix>.<dataset> when the subject names
// a configured dataset (even if the body is invalid), and to
// <DLQSubjectPrefix>._invalid otherwise. It carries the original body
// unchanged, the original headers with every value of a repeated key, and
// Idem-Error (one line, at most 1 KiB), Idem-Error-Kind (fatal, exhausted,
// crashed), Idem-Original-Subject, Idem-Original-Stream, Idem-Original-Seq,
// Idem-Deliveries, Idem-Failed-At (RFC 3339, UTC), and Idem-Dataset,
// Idem-Partition, Idem-Run-Id where known. Original headers named Nats-* or
// Idem-* are kept as Idem-Original-<name>: a Nats-Expected-* or Nats-TTL
// meant for the events stream must not make the dead-letter stream refuse
// or expire the copy, and a publisher's Idem-Partition must not pass for
// ours. A copy too big for max_payload or the stream's max_msg_size goes
// without its body, with Idem-Body-Omitted saying where the original is.
//
// # One dead letter per message, and the window that relies on
//
// Every path that dead-letters message <seq> of stream <stream> publishes
// with Nats-Msg-Id dlq:<stream>:<seq> (deadletter.MsgID), and JetStream
// drops a publish whose id it has seen within the dead-letter stream's
// duplicate window (StreamsConfig.DeadLetterDuplicates;
// DefaultDeadLetterDuplicates, a day). The Term that follows the PubAck is
// sent with a reply and sent again until the server confirms it (for up to
// 30s): one sent fire-and-forget while the consumer had no leader was
// dropped. A Term lost with the process that sent it (killed between the
// PubAck and the Term) brings the message back after AckWait, and its
// second run can be held through a warehouse outage or a pause for much
// longer than the events stream's 2-minute window: hence a day. An
// advisory whose ack was lost comes back after the reconciler's ack wait
// (30s); several replicas see no advisory twice, as the advisory consumer
// is a shared work queue. Beyond the window a second dead letter of the
// same message is possible, never a lost one;
// replaying both is harmless because loads are idempotent.
//
// # The fleet: mixed config versions
//
// With Config.Fleet, every replica writes the datasets it knows into a
// key-value bucket under its own key, refreshed every Refresh, removed on
// stop, expired after 3×Refresh when the process died. An event whose only
// fault is a dataset this replica does not know (the schemas error's
// UnknownDataset) goes back to the stream after 2 s, spending no attempt,
// while a live replica knows it or while it is younger than Fleet.Grace (a
// config rolling out); after that its decoding error stands and it is
// dead-lettered as fatal. Without a usable bucket the consumer logs it and
// dead-letters such events at once.
//
// # The backstop and the reconciler
//
// The consumer's MaxDeliver is a loose backstop (DefaultMaxDeliver, far
// above every budget), not the retry budget. When a message reaches it,
// JetStream stops delivering it, keeps it in the stream and only says so in
// the advisory $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>.
// Advisories are core NATS messages, lost when no one listens, which is
// exactly when a poison message has taken every replica down; so
// EnsureStreams captures them in a work-queue stream (AdvisoryStream) and
// the Reconciler consumes it: it reads the message by stream sequence
// (Stream.GetMsg) and dead-letters it as crashed. A message removed from the
// stream meanwhile is logged and forgotten. JetStream (nats-server 2.15.2)
// raises the advisory when the last delivery's ack wait expires while some
// client has a pull request waiting on the consumer; a serving replica
// always has one.
//
// Every nak counts as a delivery for JetStream, which is why deferrals back
// off (TurnDelay grows with the delivery count) and why held messages keep
// their delivery with heartbeats instead of being nak'ed.
//
// # Heartbeats
//
// From the moment a message is read until its handler returns (including
// its wait for a dataset turn), InProgress is sent every AckWait/3, so a
// load longer than the ack wait is never delivered to a second worker. The
// heartbeat goroutine has stopped before the fate's ack is sent. If the
// process dies, heartbeats stop and JetStream redelivers after AckWait.
//
// # Concurrency
//
// A message holds one of MaxInFlight slots from fetch to fate, so memory and
// ack-pending messages stay bounded. A dataset at its MaxConcurrency makes
// its next messages wait, heartbeating, up to half the slots; a message
// beyond that goes back to the stream (Nak after TurnDelay, no attempt
// spent), so a backlog of one dataset does not fill the process while other
// datasets' messages could run. JetStream hands out messages in stream
// order: per-dataset limits protect Postgres; they make datasets fair only
// within these bounds.
//
// # Lanes: live partitions before a backfill
//
// Backfills travel on their own subjects (schemas.BackfillPrefix,
// idem.backfill.<dataset>), read by a second durable (Consumer +
// "_backfill") through a second fetch loop; live events stay on
// <SubjectPrefix>.<dataset>. Both lanes' messages take the same way
// (process, Decide, the dead-letter stream, which keeps their subject) and
// share the slots and MaxInFlight (lanes.go): alone, a lane uses all of
// them; while live messages are held, the backfill keeps to BackfillShare
// percent and a live message takes the next free load, so it starts within
// one load and one pull however long the backfill's backlog. Groups form
// within a lane. A replica of a version before the lanes reads only the
// live durable: backfill events wait until a replica of this version runs.
//
// # Stopping
//
// Stop(grace), or the cancellation of Run's context (with
// Config.ShutdownGrace), stops fetching at once: the pull in progress is
// cancelled, so the server sends nothing more. Messages that have not
// started their handler are nak'ed after ShutdownNakDelay for another
// replica. Handlers running get the grace period; then their context is
// cancelled with cause ErrShutdown and their messages are nak'ed. Run
// returns nil once every fetched message has its fate.
//
// # Logs and metrics
//
// Every log line about a message carries dataset, partition, run_id (when
// the body decoded; subject otherwise), attempt and stream_seq; the handler
// finds that logger with zerolog.Ctx(ctx). Hooks report events by outcome
// with the handler's duration, dead letters by kind, redeliveries, messages
// in flight and heartbeats; internal/service plugs Prometheus into them. Dataset labels
// are configured names or InvalidDataset, so their number stays bounded.
//
// # Wiring, in internal/service
//
//	nc, err := natsconn.Connect(ctx, cfg.NATS, "idem serve", log)
//	js, err := jetstream.New(nc)
//	cfg := consumer.Config{Stream: ..., Datasets: ..., MaxGroup: ..., Log: log, Hooks: hooks}
//	err = consumer.EnsureStreams(ctx, js, cfg.Streams())
//	cfg.GroupHandler = func(ctx context.Context, ms []*consumer.Message) []error {
//		_, errs := h.HandleGroup(ctx, events(ms), metas(ms))
//		return errs
//	}
//	cfg.GroupSize = func(m *consumer.Message) int { return h.GroupSize(m.Event) }
//	c, err := consumer.New(js, cfg, func(ctx context.Context, m *consumer.Message) error {
//		_, err := h.Handle(ctx, m.Event, handlers.Meta{StreamSeq: m.StreamSeq, MaxAttempts: m.MaxAttempts})
//		return err
//	})
//	r, err := consumer.NewReconciler(js, cfg)
//	go r.Run(ctx)
//	err = c.Run(ctx) // returns after SIGTERM's grace period, every message settled
//	nc.Drain()
package consumer
