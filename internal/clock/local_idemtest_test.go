//go:build idemtest

package clock

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLocalSteps: in a test build, Local follows the offset in
// IDEM_TEST_CLOCK_FILE, and Site does not.
func TestLocalSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	t.Setenv("IDEM_TEST_CLOCK_FILE", path)
	s := &Site{}
	s.Learn(time.Now())
	if err := os.WriteFile(path, []byte("-1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	if d := time.Since(Local()); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("Local is %s behind time.Now, want an hour", d)
	}
	if d := time.Since(s.Now()); d < -time.Second || d > time.Second {
		t.Fatalf("Site moved by %s with the host's clock", d)
	}
}
