package consumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/idem-data/idem/internal/deadletter"
)

// ErrShutdown is the cause with which the consumer cancels a handler's
// context when the grace period of a stop runs out. A handler interrupted so
// is nak'ed for prompt redelivery elsewhere, not counted as a failure.
var ErrShutdown = errors.New("consumer: shutting down")

// Action is what happens to a delivered message.
type Action int

const (
	// Ack confirms the message with DoubleAck: the handler committed.
	Ack Action = iota + 1
	// Nak naks the message with Fate.Delay, so JetStream redelivers it.
	Nak
	// DeadLetter publishes a copy to the dead-letter stream, waits for the
	// PubAck, then terminates the message. If the publish fails the message
	// is nak'ed with Fate.Delay instead: it is never in neither place.
	DeadLetter
	// Hold keeps the message (heartbeats go on) while the warehouse circuit
	// is open, and runs it again once the circuit lets it through. It spends
	// neither a delivery nor an attempt.
	Hold
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Nak:
		return "nak"
	case DeadLetter:
		return "dead_letter"
	case Hold:
		return "hold"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Kind says why a message was dead-lettered; it is the Idem-Error-Kind
// header. Package deadletter defines the kinds.
type Kind = deadletter.Kind

const (
	KindFatal     = deadletter.KindFatal
	KindExhausted = deadletter.KindExhausted
	KindCrashed   = deadletter.KindCrashed
)

// Outcome labels a delivery's end for metrics and logs.
type Outcome string

const (
	OutcomeAcked            Outcome = "acked"              // success or duplicate, confirmed
	OutcomeRetried          Outcome = "retried"            // transient failure, nak'ed with backoff
	OutcomeInterrupted      Outcome = "interrupted"        // stopped by shutdown, nak'ed, not a failure
	OutcomeDeferred         Outcome = "deferred"           // its dataset was at max_concurrency with a queue: nak'ed, not a failure
	OutcomeWaiting          Outcome = "waiting"            // its source was not ready yet: nak'ed for later, not a failure
	OutcomePaused           Outcome = "paused"             // its dataset is paused and this process holds enough of it: nak'ed for later
	OutcomeDeadLettered     Outcome = "dead_lettered"      // in the dead-letter stream, terminated
	OutcomeDeadLetterFailed Outcome = "dead_letter_failed" // the dead letter could not be published: nak'ed
)

// Fate is the decision about one delivery.
type Fate struct {
	Action Action
	// Delay is the redelivery delay: of the nak for Nak, and of the nak
	// that replaces the dead letter for DeadLetter when its publish fails.
	Delay time.Duration
	// Kind is set for DeadLetter.
	Kind Kind
	// Shutdown marks a Nak caused by a stop rather than a failure.
	Shutdown bool
	// Deferred marks a Nak of a message whose dataset had no turn free.
	Deferred bool
	// Waiting marks a Nak of a message whose source is not ready yet (a
	// partition without its marker, a replica too far behind): no load
	// ran, no attempt is spent; the handler decides when waiting ends.
	Waiting bool
	// Paused marks a Nak of a paused dataset's message this process did
	// not hold (PauseDelay): no load ran, no attempt is spent.
	Paused bool
}

// Outcome is f's metric label once carried out as decided.
func (f Fate) Outcome() Outcome {
	switch {
	case f.Action == Ack:
		return OutcomeAcked
	case f.Action == DeadLetter:
		return OutcomeDeadLettered
	case f.Shutdown:
		return OutcomeInterrupted
	case f.Deferred:
		return OutcomeDeferred
	case f.Waiting:
		return OutcomeWaiting
	case f.Paused:
		return OutcomePaused
	}
	return OutcomeRetried
}

func (f Fate) String() string {
	switch {
	case f.Action == DeadLetter:
		return fmt.Sprintf("dead_letter(%s)", f.Kind)
	case f.Action == Nak:
		return fmt.Sprintf("nak(%s)", f.Delay)
	}
	return f.Action.String()
}

// Input is everything Decide looks at.
type Input struct {
	// Err is what the handler returned: nil for success or a duplicate. When
	// the handler was not called, the consumer puts the reason here: the
	// decoding error (fatal), ErrShutdown, or errNoTurn.
	Err error
	// Cause is context.Cause of the handler's context after it returned; nil
	// while the context is live. ErrShutdown means the process is stopping.
	Cause error
	// Attempt is the number of the attempt that ran, from 1, as the handler
	// reports it (an error with an Attempt() int method); for a handler that
	// reports none, JetStream's delivery count stands in.
	Attempt int
	// Delivery is JetStream's NumDelivered: 1 on the first delivery.
	Delivery int
	// Retry is the dataset's budget and backoff.
	Retry Retry
	// Jitter is uniform in [0,1), drawn by the caller: Decide stays pure.
	Jitter float64
	// ShutdownDelay is the redelivery delay of an interrupted message.
	ShutdownDelay time.Duration
}

// Decide is the one place where a delivery's fate is decided. The rows, in
// order (the first that matches wins):
//
//	Err == nil                                   -> Ack (DoubleAck)
//	Cause or Err is ErrShutdown                  -> Nak after ShutdownDelay (not a failure)
//	Err is errNoTurn                             -> Nak after TurnDelay(Delivery) (not a failure)
//	Err is a *PausedError, or DatasetPaused()    -> Nak after PauseDelay(Delivery, Left) (not a failure)
//	Err is errElsewhere or errRollout            -> Nak after 1-3s: another replica knows the dataset, or may soon
//	Err has Unavailable() == true                -> Hold (the warehouse circuit)
//	Err has WaitFor() > 0 (a source not ready)   -> Nak after WaitFor, no attempt spent
//	Err has Fatal() == true                      -> DeadLetter fatal
//	Err has BudgetSpent(), and Crashed()         -> DeadLetter crashed (nothing ran)
//	Err has BudgetSpent()                        -> DeadLetter exhausted (nothing ran)
//	Attempt >= MaxAttempts, Err is a panic       -> DeadLetter crashed
//	Attempt >= MaxAttempts                       -> DeadLetter exhausted
//	otherwise                                    -> Nak after Backoff(Attempt)
//
// A DeadLetter's Delay is the backoff too: it is used if the dead letter
// cannot be published.
func Decide(in Input) Fate {
	backoff := in.Retry.Backoff(max(in.Attempt, 1), in.Jitter)
	var panicked *PanicError
	p, paused := isPaused(in.Err)
	switch {
	case in.Err == nil:
		return Fate{Action: Ack}
	case errors.Is(in.Cause, ErrShutdown) || errors.Is(in.Err, ErrShutdown):
		return Fate{Action: Nak, Delay: in.ShutdownDelay, Shutdown: true}
	case errors.Is(in.Err, errNoTurn):
		return Fate{Action: Nak, Delay: TurnDelay(in.Delivery), Deferred: true}
	case paused:
		return Fate{Action: Nak, Delay: PauseDelay(in.Delivery, p.Left), Paused: true}
	case has(in.Err, func(e interface{ DatasetPaused() bool }) bool { return e.DatasetPaused() }):
		// The handler's begin found the pause this process had not read
		// yet: back later, as a pause it had read would have sent it.
		return Fate{Action: Nak, Delay: PauseDelay(in.Delivery, 0), Paused: true}
	case errors.Is(in.Err, errElsewhere) || errors.Is(in.Err, errRollout):
		return Fate{Action: Nak, Delay: fleetDelay(in.Jitter), Deferred: true}
	case has(in.Err, func(e interface{ Unavailable() bool }) bool { return e.Unavailable() }):
		return Fate{Action: Hold}
	case sourceWait(in.Err) > 0:
		return Fate{Action: Nak, Delay: sourceWait(in.Err), Waiting: true}
	case isFatal(in.Err):
		return Fate{Action: DeadLetter, Kind: KindFatal, Delay: backoff}
	case has(in.Err, func(e interface{ BudgetSpent() bool }) bool { return e.BudgetSpent() }):
		if has(in.Err, func(e interface{ Crashed() bool }) bool { return e.Crashed() }) {
			return Fate{Action: DeadLetter, Kind: KindCrashed, Delay: backoff}
		}
		return Fate{Action: DeadLetter, Kind: KindExhausted, Delay: backoff}
	case in.Attempt >= in.Retry.MaxAttempts && errors.As(in.Err, &panicked):
		return Fate{Action: DeadLetter, Kind: KindCrashed, Delay: backoff}
	case in.Attempt >= in.Retry.MaxAttempts:
		return Fate{Action: DeadLetter, Kind: KindExhausted, Delay: backoff}
	}
	return Fate{Action: Nak, Delay: backoff}
}

// has reports whether errors.As finds an I in err's chain for which ok says
// true: the consumer reads behaviours, never the types of the packages that
// define them.
func has[I any](err error, ok func(I) bool) bool {
	var v I
	return errors.As(err, &v) && ok(v)
}

// reportedAttempt is the attempt number the handler put on its error, or 0.
func reportedAttempt(err error) int {
	var a interface{ Attempt() int }
	if errors.As(err, &a) {
		return a.Attempt()
	}
	return 0
}

// errNoTurn: the message's dataset is at its MaxConcurrency and already has
// as many messages waiting for a turn; this one goes back to the stream for
// later rather than take a slot that other datasets could use.
var errNoTurn = errors.New("consumer: the dataset is at its max_concurrency with a full queue")

// errElsewhere: the event's dataset is not in this replica's config, but a
// live replica of the fleet has it. errRollout: no replica has it yet, and
// the event is younger than the fleet's grace.
var (
	errElsewhere = errors.New("consumer: another live replica knows this dataset")
	errRollout   = errors.New("consumer: no live replica knows this dataset yet; waiting for the rollout")
)

// TurnDelay is the redelivery delay of a message deferred for want of a
// turn: one second per delivery so far, at most 30 s, so a long queue is
// redelivered ever more slowly and a short one is taken up soon.
func TurnDelay(delivery int) time.Duration {
	return min(time.Duration(max(delivery, 1))*time.Second, 30*time.Second)
}

// sourceWait is how long the handler asks the message to wait for its source
// (a WaitFor method on the error), 0 when it asks for nothing.
func sourceWait(err error) time.Duration {
	var w interface{ WaitFor() time.Duration }
	if errors.As(err, &w) {
		return w.WaitFor()
	}
	return 0
}

// isFatal finds the behaviour, not a type: handlers and schemas mark their
// fatal errors with a Fatal method, and this package imports neither.
func isFatal(err error) bool {
	var f interface{ Fatal() bool }
	return errors.As(err, &f) && f.Fatal()
}

// PanicError is a recovered handler panic. It is transient: the message is
// retried, and a panic on the last allowed attempt is dead-lettered as
// crashed.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the handler goroutine's stack at the panic
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }
