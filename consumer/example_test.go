package consumer_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/idem-data/idem/consumer"
)

// The backoff of a dataset with retry_delay 10s and max_retry_delay 30m:
// each delay is drawn in [lo, 2·lo], lo doubling per attempt, capped at 30m.
func ExampleRetry_Backoff() {
	r := consumer.Retry{MaxAttempts: 12, Delay: 10 * time.Second, MaxDelay: 30 * time.Minute}
	for attempt := 1; attempt <= 9; attempt++ {
		fmt.Printf("attempt %d: %v to %v\n", attempt, r.Backoff(attempt, 0), r.Backoff(attempt, 1))
	}
	// Output:
	// attempt 1: 10s to 20s
	// attempt 2: 20s to 40s
	// attempt 3: 40s to 1m20s
	// attempt 4: 1m20s to 2m40s
	// attempt 5: 2m40s to 5m20s
	// attempt 6: 5m20s to 10m40s
	// attempt 7: 10m40s to 21m20s
	// attempt 8: 21m20s to 30m0s
	// attempt 9: 30m0s to 30m0s
}

type fatal struct{ error }

func (fatal) Fatal() bool { return true }

// Decide maps what the handler returned to a fate.
func ExampleDecide() {
	r := consumer.Retry{MaxAttempts: 3, Delay: time.Second, MaxDelay: time.Minute}
	for _, in := range []consumer.Input{
		{Err: nil, Attempt: 1},
		{Err: errors.New("deadlock detected"), Attempt: 1},
		{Err: errors.New("deadlock detected"), Attempt: 3},
		{Err: fatal{errors.New("relation does not exist")}, Attempt: 1},
		{Err: errors.New("context canceled"), Cause: consumer.ErrShutdown, Attempt: 2},
	} {
		in.Retry, in.ShutdownDelay = r, time.Second
		f := consumer.Decide(in)
		fmt.Printf("%-40v -> %v (%s)\n", in.Err, f, f.Outcome())
	}
	// Output:
	// <nil>                                    -> ack (acked)
	// deadlock detected                        -> nak(1s) (retried)
	// deadlock detected                        -> dead_letter(exhausted) (dead_lettered)
	// relation does not exist                  -> dead_letter(fatal) (dead_lettered)
	// context canceled                         -> nak(1s) (interrupted)
}
