//go:build idemtest

package cli

import (
	"fmt"
	"os"
)

// crashHook kills the process at a chosen point of a chosen run, to test what
// a real crash leaves behind: IDEM_TEST_CRASH=<point>:<run_id>, where point is
// "before_load" (the delivery dies before any work) or "after_commit" (the
// load committed, the ack was never sent). Only test builds have it.
func crashHook(point, runID string) {
	if os.Getenv("IDEM_TEST_CRASH") == point+":"+runID {
		fmt.Fprintf(os.Stderr, "idemtest: crashing at %s of run %s\n", point, runID)
		os.Exit(3)
	}
}
