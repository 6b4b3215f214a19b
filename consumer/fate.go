package consumer

import (
	"errors"
	"fmt"
	"time"
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
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Nak:
		return "nak"
	case DeadLetter:
		return "dead_letter"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Kind says why a message was dead-lettered; it is the Idem-Error-Kind header.
type Kind string

const (
	// KindFatal: the error can never go away by retrying (invalid event,
	// schema mismatch, ...), dead-lettered after one delivery.
	KindFatal Kind = "fatal"
	// KindExhausted: a transient error on the last allowed delivery.
	KindExhausted Kind = "exhausted"
	// KindCrashed: the last allowed delivery ended without a verdict, because
	// the handler panicked or the process died or lost the message.
	KindCrashed Kind = "crashed"
)

// Outcome labels a delivery's end for metrics and logs.
type Outcome string

const (
	OutcomeAcked            Outcome = "acked"              // success or duplicate, confirmed
	OutcomeRetried          Outcome = "retried"            // transient failure, nak'ed with backoff
	OutcomeInterrupted      Outcome = "interrupted"        // stopped by shutdown, nak'ed, not a failure
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
	// decoding error (fatal), or ErrShutdown.
	Err error
	// Cause is context.Cause of the handler's context after it returned; nil
	// while the context is live. ErrShutdown means the process is stopping.
	Cause error
	// Attempt is JetStream's NumDelivered: 1 on the first delivery.
	Attempt int
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
//	Err has Fatal() == true                      -> DeadLetter fatal
//	Err is "delivered past the budget"           -> DeadLetter crashed (handler not called)
//	Attempt >= MaxDeliveries, Err is a panic     -> DeadLetter crashed
//	Attempt >= MaxDeliveries                     -> DeadLetter exhausted
//	otherwise                                    -> Nak after Backoff(Attempt)
//
// A DeadLetter's Delay is the backoff too: it is used if the dead letter
// cannot be published.
func Decide(in Input) Fate {
	backoff := in.Retry.Backoff(in.Attempt, in.Jitter)
	var unfinished *unfinishedError
	var panicked *PanicError
	switch {
	case in.Err == nil:
		return Fate{Action: Ack}
	case errors.Is(in.Cause, ErrShutdown) || errors.Is(in.Err, ErrShutdown):
		return Fate{Action: Nak, Delay: in.ShutdownDelay, Shutdown: true}
	case isFatal(in.Err):
		return Fate{Action: DeadLetter, Kind: KindFatal, Delay: backoff}
	case errors.As(in.Err, &unfinished):
		return Fate{Action: DeadLetter, Kind: KindCrashed, Delay: backoff}
	case in.Attempt >= in.Retry.MaxDeliveries && errors.As(in.Err, &panicked):
		return Fate{Action: DeadLetter, Kind: KindCrashed, Delay: backoff}
	case in.Attempt >= in.Retry.MaxDeliveries:
		return Fate{Action: DeadLetter, Kind: KindExhausted, Delay: backoff}
	}
	return Fate{Action: Nak, Delay: backoff}
}

// isFatal finds the behaviour, not a type: handlers and schemas mark their
// fatal errors with a Fatal method, and this package imports neither.
func isFatal(err error) bool {
	var f interface{ Fatal() bool }
	return errors.As(err, &f) && f.Fatal()
}

// PanicError is a recovered handler panic. It is transient: the delivery is
// retried, and a panic on the last allowed delivery is dead-lettered as
// crashed.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the handler goroutine's stack at the panic
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// unfinishedError replaces the handler's error for a message delivered past
// its dataset's budget: the last allowed delivery ended without a verdict
// (the process died, lost the message, was stopped, or could not publish the
// dead letter), so the message is not run again.
type unfinishedError struct{ attempt, max int }

func (e *unfinishedError) Error() string {
	return fmt.Sprintf("delivery %d is past the dataset's %d allowed deliveries: the last allowed delivery ended without a verdict "+
		"(the process died, lost the message, was stopped, or could not publish its dead letter)", e.attempt, e.max)
}
