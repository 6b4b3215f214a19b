package calendar

import "time"

// Window is the partitions a recheck window holds: those of the last
// Length, counted back from now over partition keys, the current one
// included (7 days on 2026-12-06 holds 2026-11-30 to 2026-12-06), in UTC.
type Window struct {
	Length time.Duration
	// Hourly: keys are hours (RFC 3339, 2026-12-06T10:00:00Z); else dates.
	Hourly bool
}

func (w Window) step() time.Duration {
	if w.Hourly {
		return time.Hour
	}
	return 24 * time.Hour
}

// n is how many partitions the window holds: Length in steps, rounded up.
func (w Window) n() int {
	s := w.step()
	return max(1, int((w.Length+s-1)/s))
}

// Keys lists the window's keys at now, oldest first.
func (w Window) Keys(now time.Time) []string {
	s, n := w.step(), w.n()
	last := now.UTC().Truncate(s)
	out := make([]string, 0, n)
	for i := n - 1; i >= 0; i-- {
		out = append(out, w.format(last.Add(-time.Duration(i)*s)))
	}
	return out
}

func (w Window) format(t time.Time) string {
	if w.Hourly {
		return t.Format(time.RFC3339)
	}
	return t.Format(time.DateOnly)
}

// Holds reports whether key is inside the window at now (a key that does
// not parse is not). A later key, a partition published ahead, is too.
func (w Window) Holds(key string, now time.Time) bool {
	end, ok := w.Ends(key)
	return ok && now.Before(end)
}

// Ends is when the window passes key: from then on its load is final.
func (w Window) Ends(key string) (time.Time, bool) {
	layout := time.DateOnly
	if w.Hourly {
		layout = time.RFC3339
	}
	t, err := time.Parse(layout, key)
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC().Add(time.Duration(w.n()) * w.step()), true
}
