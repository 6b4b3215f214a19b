//go:build idemtest

package service

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"
)

// crashHook kills the process at a chosen point of a chosen run, to test what
// a real crash leaves behind: IDEM_TEST_CRASH=<point>:<run_id>, where point is
// "before_load" (the attempt's `started` row is committed, the load has not
// run: the process dies in the attempt) or "after_commit" (the load
// committed, the ack was never sent). Only test builds have it.
//
// The chaos harness (bench/chaos) also sets
// IDEM_TEST_CRASH_AFTER_COMMIT_PROB=<p> and IDEM_TEST_CRASH_SEED=<n>: every
// after_commit point then exits with probability p, drawn from a generator
// seeded with n, so a crash between COMMIT and the ack happens at random
// moments of a long run rather than at one run chosen in advance. The line
// printed before exiting is what the harness counts.
func crashHook(point, runID string) {
	if os.Getenv("IDEM_TEST_CRASH") == point+":"+runID {
		fmt.Fprintf(os.Stderr, "idemtest: crashing at %s of run %s\n", point, runID)
		os.Exit(3)
	}
	if point == "after_commit" && randomCrash().hit() {
		fmt.Fprintf(os.Stderr, "idemtest: random crash at %s of run %s at %s\n", point, runID, time.Now().UTC().Format(time.RFC3339Nano))
		os.Exit(3)
	}
}

// crashDice is the seeded draw behind IDEM_TEST_CRASH_AFTER_COMMIT_PROB.
// Handlers run concurrently, hence the mutex.
type crashDice struct {
	mu   sync.Mutex
	prob float64
	rng  *rand.Rand
}

var randomCrash = sync.OnceValue(func() *crashDice {
	p, err := strconv.ParseFloat(os.Getenv("IDEM_TEST_CRASH_AFTER_COMMIT_PROB"), 64)
	if err != nil || p <= 0 {
		return &crashDice{}
	}
	seed, _ := strconv.ParseUint(os.Getenv("IDEM_TEST_CRASH_SEED"), 10, 64)
	return &crashDice{prob: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
})

func (d *crashDice) hit() bool {
	if d.prob <= 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rng.Float64() < d.prob
}
