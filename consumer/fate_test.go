package consumer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fatalError marks an error as fatal the way handlers and schemas do: by
// behaviour, not by type.
type fatalError struct{ msg string }

func (e *fatalError) Error() string { return e.msg }
func (e *fatalError) Fatal() bool   { return true }

// notFatal has a Fatal method that says no: it must retry.
type notFatal struct{}

func (notFatal) Error() string { return "says not fatal" }
func (notFatal) Fatal() bool   { return false }

// unavailable says the warehouse cannot be used, as handlers.UnavailableError does.
type unavailable struct{}

func (unavailable) Error() string     { return "warehouse unavailable: connection refused" }
func (unavailable) Unavailable() bool { return true }

// spent says the budget of attempts was used up before this delivery, as
// handlers.BudgetSpentError does.
type spent struct{ crashed bool }

func (spent) Error() string     { return "budget spent" }
func (spent) BudgetSpent() bool { return true }
func (s spent) Crashed() bool   { return s.crashed }
func (spent) Attempt() int      { return 3 }

// datasetPaused says the handler's begin found the dataset paused, as
// handlers.PausedError does.
type datasetPaused struct{}

func (datasetPaused) Error() string       { return "dataset orders is paused: no attempt began" }
func (datasetPaused) DatasetPaused() bool { return true }

func TestDecide(t *testing.T) {
	retry := Retry{MaxAttempts: 3, Delay: time.Second, MaxDelay: time.Minute}
	transient := errors.New("connection reset")
	fatal := fmt.Errorf("load: %w", &fatalError{"undefined_object: relation missing"})
	const shutdownDelay = 500 * time.Millisecond

	tests := []struct {
		name    string
		err     error
		cause   error
		attempt int
		want    Fate
	}{
		{name: "success acks", attempt: 1, want: Fate{Action: Ack}},
		{name: "success on the last attempt acks", attempt: 3, want: Fate{Action: Ack}},
		{name: "success after shutdown began still acks: it committed", cause: ErrShutdown, attempt: 1, want: Fate{Action: Ack}},
		{name: "shutdown cause naks shortly", err: context.Canceled, cause: ErrShutdown, attempt: 1,
			want: Fate{Action: Nak, Delay: shutdownDelay, Shutdown: true}},
		{name: "shutdown on the last attempt naks, not exhausted", err: context.Canceled, cause: ErrShutdown, attempt: 3,
			want: Fate{Action: Nak, Delay: shutdownDelay, Shutdown: true}},
		{name: "shutdown wins over a fatal error it caused", err: fatal, cause: ErrShutdown, attempt: 1,
			want: Fate{Action: Nak, Delay: shutdownDelay, Shutdown: true}},
		{name: "not run because of shutdown", err: ErrShutdown, cause: ErrShutdown, attempt: 2,
			want: Fate{Action: Nak, Delay: shutdownDelay, Shutdown: true}},
		{name: "handler returns the shutdown cause", err: fmt.Errorf("load: %w", ErrShutdown), attempt: 1,
			want: Fate{Action: Nak, Delay: shutdownDelay, Shutdown: true}},
		{name: "other cancellation cause is no shutdown", err: transient, cause: errors.New("handler timeout"), attempt: 1,
			want: Fate{Action: Nak, Delay: time.Second}},
		{name: "fatal dead-letters after one delivery", err: fatal, attempt: 1,
			want: Fate{Action: DeadLetter, Kind: KindFatal, Delay: time.Second}},
		{name: "fatal on the last attempt is fatal, not exhausted", err: fatal, attempt: 3,
			want: Fate{Action: DeadLetter, Kind: KindFatal, Delay: 4 * time.Second}},
		{name: "Fatal() false is transient", err: notFatal{}, attempt: 1,
			want: Fate{Action: Nak, Delay: time.Second}},
		{name: "transient with attempts left naks with backoff", err: transient, attempt: 1,
			want: Fate{Action: Nak, Delay: time.Second}},
		{name: "transient backoff doubles", err: transient, attempt: 2,
			want: Fate{Action: Nak, Delay: 2 * time.Second}},
		{name: "transient on the last attempt is exhausted", err: transient, attempt: 3,
			want: Fate{Action: DeadLetter, Kind: KindExhausted, Delay: 4 * time.Second}},
		{name: "past the budget is exhausted too", err: transient, attempt: 4,
			want: Fate{Action: DeadLetter, Kind: KindExhausted, Delay: 8 * time.Second}},
		{name: "panic with attempts left retries", err: &PanicError{Value: "boom"}, attempt: 2,
			want: Fate{Action: Nak, Delay: 2 * time.Second}},
		{name: "panic on the last attempt is crashed", err: &PanicError{Value: "boom"}, attempt: 3,
			want: Fate{Action: DeadLetter, Kind: KindCrashed, Delay: 4 * time.Second}},
		{name: "budget spent, last attempt died: crashed", err: fmt.Errorf("x: %w", spent{crashed: true}), attempt: 3,
			want: Fate{Action: DeadLetter, Kind: KindCrashed, Delay: 4 * time.Second}},
		{name: "budget spent, last attempt failed: exhausted", err: spent{}, attempt: 3,
			want: Fate{Action: DeadLetter, Kind: KindExhausted, Delay: 4 * time.Second}},
		{name: "unavailable warehouse holds the message", err: fmt.Errorf("begin: %w", unavailable{}), attempt: 1,
			want: Fate{Action: Hold}},
		{name: "unavailable on the last attempt still holds, never exhausted", err: unavailable{}, attempt: 3,
			want: Fate{Action: Hold}},
		{name: "unavailable past the budget still holds", err: unavailable{}, attempt: 9,
			want: Fate{Action: Hold}},
		{name: "shutdown wins over unavailable", err: unavailable{}, cause: ErrShutdown, attempt: 1,
			want: Fate{Action: Nak, Delay: shutdownDelay, Shutdown: true}},
		{name: "no turn defers, whatever the attempt", err: errNoTurn, attempt: 3,
			want: Fate{Action: Nak, Delay: 2 * time.Second, Deferred: true}},
		{name: "a paused dataset's message not held goes back, whatever the attempt", err: &PausedError{Dataset: "orders"}, attempt: 3,
			want: Fate{Action: Nak, Delay: 2 * time.Second, Paused: true}},
		{name: "a paused message comes back no later than the pause's end", err: &PausedError{Dataset: "orders", Left: 300 * time.Millisecond}, attempt: 1,
			want: Fate{Action: Nak, Delay: 300 * time.Millisecond, Paused: true}},
		{name: "a pause the handler's begin found goes back as one, whatever the attempt", err: fmt.Errorf("x: %w", datasetPaused{}), attempt: 3,
			want: Fate{Action: Nak, Delay: 2 * time.Second, Paused: true}},
		{name: "shutdown wins over a pause", err: &PausedError{Dataset: "orders"}, cause: ErrShutdown, attempt: 1,
			want: Fate{Action: Nak, Delay: shutdownDelay, Shutdown: true}},
		{name: "a dataset another replica knows is left to it", err: errElsewhere, attempt: 1,
			want: Fate{Action: Nak, Delay: fleetNakDelay / 2, Deferred: true}}, // jitter 0
		{name: "a dataset still rolling out waits", err: errRollout, attempt: 1,
			want: Fate{Action: Nak, Delay: fleetNakDelay / 2, Deferred: true}}, // jitter 0
		{name: "invalid body (fatal decode error) dead-letters", err: &fatalError{"invalid event: body: is empty"}, attempt: 1,
			want: Fate{Action: DeadLetter, Kind: KindFatal, Delay: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(Input{Err: tt.err, Cause: tt.cause, Attempt: tt.attempt, Delivery: 2, Retry: retry, Jitter: 0, ShutdownDelay: shutdownDelay})
			require.Equal(t, tt.want, got)
		})
	}
}

func TestFateOutcome(t *testing.T) {
	require.Equal(t, OutcomeAcked, Fate{Action: Ack}.Outcome())
	require.Equal(t, OutcomeRetried, Fate{Action: Nak}.Outcome())
	require.Equal(t, OutcomeInterrupted, Fate{Action: Nak, Shutdown: true}.Outcome())
	require.Equal(t, OutcomeDeferred, Fate{Action: Nak, Deferred: true}.Outcome())
	require.Equal(t, OutcomePaused, Fate{Action: Nak, Paused: true}.Outcome())
	require.Equal(t, "hold", Fate{Action: Hold}.String())
	require.Equal(t, OutcomeDeadLettered, Fate{Action: DeadLetter, Kind: KindFatal}.Outcome())
	require.Equal(t, "dead_letter(exhausted)", Fate{Action: DeadLetter, Kind: KindExhausted}.String())
	require.Equal(t, "nak(1s)", Fate{Action: Nak, Delay: time.Second}.String())
}

func TestBackoff(t *testing.T) {
	r := Retry{MaxAttempts: 20, Delay: 10 * time.Second, MaxDelay: 30 * time.Minute}
	for attempt := 1; attempt <= 20; attempt++ {
		for _, j := range []float64{0, 0.25, 0.5, 0.999999} {
			d := r.Backoff(attempt, j)
			require.GreaterOrEqual(t, d, r.Delay, "attempt %d jitter %v", attempt, j)
			require.LessOrEqual(t, d, r.MaxDelay, "attempt %d jitter %v", attempt, j)
		}
		require.LessOrEqual(t, r.Backoff(attempt, 0), r.Backoff(attempt+1, 0), "never shrinks")
	}
	require.Equal(t, 10*time.Second, r.Backoff(1, 0))
	require.Equal(t, 20*time.Second, r.Backoff(1, 1))
	require.Equal(t, 20*time.Second, r.Backoff(2, 0))
	require.Equal(t, 30*time.Minute, r.Backoff(9, 0.7), "capped, no jitter past the cap")
	require.Equal(t, 30*time.Minute, r.Backoff(1<<30, 0.5), "no overflow")
	require.Equal(t, 10*time.Second, r.Backoff(0, 0), "attempt 0 counts as 1")
	require.Equal(t, 10*time.Second, r.Backoff(1, -3), "jitter clamped")
	require.Equal(t, time.Duration(0), Retry{}.Backoff(3, 0.5), "no delay configured: immediate")
	require.Equal(t, time.Second, TurnDelay(0))
	require.Equal(t, 5*time.Second, TurnDelay(5))
	require.Equal(t, 30*time.Second, TurnDelay(1000), "capped")
	require.Equal(t, time.Second, PauseDelay(0, 0))
	require.Equal(t, 8*time.Second, PauseDelay(4, 0))
	require.Equal(t, MaxPauseDelay, PauseDelay(11, 0), "capped")
	require.Equal(t, MaxPauseDelay, PauseDelay(1000, 0), "no overflow")
	require.Equal(t, 3*time.Second, PauseDelay(1000, 3*time.Second), "never past the pause's end")
	var total time.Duration
	for n := 1; n <= DefaultMaxDeliver; n++ {
		total += PauseDelay(n, 0)
	}
	require.Greater(t, total, 6*24*time.Hour, "MaxDeliver is days of pause away")
	require.Equal(t, 5*time.Second, Retry{Delay: 5 * time.Second, MaxDelay: time.Second}.Backoff(4, 0.5), "MaxDelay below Delay is Delay")
}

func TestFleetDelayIsJittered(t *testing.T) {
	require.Equal(t, time.Second, fleetDelay(0))
	require.Equal(t, 2*time.Second, fleetDelay(0.5))
	require.Less(t, fleetDelay(0.999), 3*time.Second)
	require.NotEqual(t, Decide(Input{Err: errElsewhere, Jitter: 0.1}).Delay, Decide(Input{Err: errElsewhere, Jitter: 0.9}).Delay)
}

// waitErr asks for a wait, as a handler's error for a source not ready.
type waitErr time.Duration

func (w waitErr) Error() string          { return "source not ready" }
func (w waitErr) WaitFor() time.Duration { return time.Duration(w) }

func TestDecideWaitsForASourceWithoutSpendingAnAttempt(t *testing.T) {
	in := Input{Err: fmt.Errorf("load: %w", waitErr(7*time.Second)), Attempt: 3, Retry: Retry{MaxAttempts: 3, Delay: time.Second, MaxDelay: time.Minute}}
	f := Decide(in)
	require.Equal(t, Fate{Action: Nak, Delay: 7 * time.Second, Waiting: true}, f, "a wait is a nak for the asked delay, even on the last attempt")
	require.Equal(t, OutcomeWaiting, f.Outcome())
	// A wait of 0 asks for nothing: the error is transient like any other.
	in.Err, in.Attempt = waitErr(0), 1
	require.Equal(t, OutcomeRetried, Decide(in).Outcome())
}
