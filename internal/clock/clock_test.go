package clock

import (
	"testing"
	"time"
)

// TestSiteKeepsTheDatabasesClock: once a reading is learned, Site runs
// from it by the monotonic clock, whatever the wall clock said; before,
// it is Local.
func TestSiteKeepsTheDatabasesClock(t *testing.T) {
	var nilSite *Site
	if d := time.Since(nilSite.Now()); d < 0 || d > time.Minute {
		t.Fatalf("a nil Site is %s off Local", d)
	}
	s := &Site{}
	if d := time.Since(s.Now()); d < 0 || d > time.Minute {
		t.Fatalf("a Site with no reading is %s off Local", d)
	}
	db := time.Date(2026, 12, 6, 23, 59, 0, 0, time.UTC)
	s.Learn(db)
	time.Sleep(20 * time.Millisecond)
	got := s.Now().Sub(db)
	if got < 20*time.Millisecond || got > time.Minute {
		t.Fatalf("Site.Now is %s after the reading, want the 20ms slept", got)
	}
}

// TestLocalIsTheHostsClock: in a real build Local is time.Now, whatever
// the test-build variable says.
func TestLocalIsTheHostsClock(t *testing.T) {
	t.Setenv("IDEM_TEST_CLOCK_FILE", "/nonexistent")
	if d := time.Since(Local()); d < 0 || d > time.Minute {
		t.Fatalf("Local is %s off time.Now", d)
	}
}
