//go:build idemtest

package clock

import (
	"os"
	"strings"
	"sync"
	"time"
)

// In test builds, IDEM_TEST_CLOCK_FILE names a file holding a duration
// ("1h", "-1h", "0s") by which Local's wall reading is moved: a step of
// the host's clock, as the chaos harness's clock_step makes it. The file
// is read again at most every 50 ms.
var (
	stepMu   sync.Mutex
	step     time.Duration
	stepRead time.Time
)

func local() time.Time {
	now := time.Now()
	path := os.Getenv("IDEM_TEST_CLOCK_FILE")
	if path == "" {
		return now
	}
	stepMu.Lock()
	defer stepMu.Unlock()
	if stepRead.IsZero() || now.Sub(stepRead) > 50*time.Millisecond {
		stepRead = now
		if b, err := os.ReadFile(path); err == nil {
			if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
				step = d
			}
		}
	}
	return now.Add(step)
}
