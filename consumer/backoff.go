package consumer

import "time"

// Backoff is the redelivery delay after a transient failure of delivery
// attempt (1 for the first): exponential from r.Delay, doubling per attempt,
// capped at r.MaxDelay, with jitter spreading a burst of failures (every
// partition failing when Postgres restarts) over time.
//
// The delay is uniform in [lo, min(2·lo, MaxDelay)] where lo = Delay·2^(attempt−1)
// capped at MaxDelay, so it is never under Delay nor over MaxDelay. jitter is
// uniform in [0,1) (values outside are clamped); Backoff is pure so tests and
// examples pass fixed values.
func (r Retry) Backoff(attempt int, jitter float64) time.Duration {
	if r.Delay <= 0 {
		return 0
	}
	ceiling := max(r.MaxDelay, r.Delay)
	lo := r.Delay
	for i := 1; i < attempt && lo < ceiling; i++ {
		if lo > ceiling/2 {
			lo = ceiling
		} else {
			lo *= 2
		}
	}
	lo = min(lo, ceiling)
	hi := ceiling
	if lo <= ceiling/2 {
		hi = 2 * lo
	}
	jitter = min(max(jitter, 0), 1)
	return lo + time.Duration(jitter*float64(hi-lo))
}
