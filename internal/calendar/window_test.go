package calendar

import (
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 30, 0, 0, time.UTC)
	w := Window{Length: 7 * 24 * time.Hour}
	keys := w.Keys(now)
	if len(keys) != 7 || keys[0] != "2026-11-30" || keys[6] != "2026-12-06" {
		t.Fatalf("7d keys: %v", keys)
	}
	for key, want := range map[string]bool{"2026-11-29": false, "2026-11-30": true, "2026-12-06": true, "2026-12-07": true, "junk": false} {
		if got := w.Holds(key, now); got != want {
			t.Errorf("Holds(%s) = %v, want %v", key, got, want)
		}
	}
	end, ok := w.Ends("2026-11-30")
	if !ok || !end.Equal(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("Ends(2026-11-30) = %v", end)
	}
	if w.Holds("2026-11-30", end) {
		t.Error("the window still holds a partition it has passed")
	}
	h := Window{Length: 90 * time.Minute, Hourly: true}
	keys = h.Keys(now)
	if len(keys) != 2 || keys[0] != "2026-12-06T09:00:00Z" || keys[1] != "2026-12-06T10:00:00Z" {
		t.Fatalf("90m hourly keys: %v", keys)
	}
	if h.Holds("2026-12-06T08:00:00Z", now) || !h.Holds("2026-12-06T09:00:00Z", now) {
		t.Error("hourly Holds")
	}
}
