// Package calendar owns a dataset's expected partitions: which partitions
// should exist (one per day or per hour from a first one) and by when (a
// deadline after the partition's period ends). It is pure: the audit says
// what loaded, the caller passes the clock, and calendar says what is missing
// and what is late. Window is the other question asked of partition keys
// against the clock: which partitions a recheck window still holds; and
// ParseDuration reads the durations counted in days that both are written in.
package calendar

import (
	"fmt"
	"time"
)

// Every is the period of a dataset's partitions.
type Every string

const (
	// Day: one partition per calendar day of the calendar's time zone, keyed
	// YYYY-MM-DD (a date partition_type).
	Day Every = "day"
	// Hour: one partition per UTC hour, keyed 2026-11-28T13:00:00Z (a
	// timestamp partition_type).
	Hour Every = "hour"
)

const (
	dateLayout = "2006-01-02"
	hourLayout = "2006-01-02T15:04:05Z"
)

// Expect is a dataset's calendar.
type Expect struct {
	Every Every
	// From is the first expected partition's key.
	From string
	// Deadline is how long after its period ends a partition may still be
	// missing before it is late: with a deadline of 3h, day D is due by
	// D+1 03:00.
	Deadline time.Duration
	// Location is the time zone days are counted in; nil is UTC. Hours are
	// always UTC, like their keys.
	Location *time.Location
}

// Slot is one expected partition.
type Slot struct {
	Key string
	// Start and End bound the partition's period; Due is End + Deadline.
	Start, End, Due time.Time
}

// Validate checks the calendar on its own; the caller checks it fits the
// dataset's partition type (see Fits).
func (e Expect) Validate() error {
	switch e.Every {
	case Day, Hour:
	default:
		return fmt.Errorf("every: %q is not a period; want day or hour", e.Every)
	}
	if _, err := e.start(e.From); err != nil {
		return fmt.Errorf("from: %w", err)
	}
	if e.Deadline < 0 {
		return fmt.Errorf("deadline: %s is negative; want how long after the period ends the partition is due, e.g. 3h", e.Deadline)
	}
	return nil
}

func (e Expect) loc() *time.Location {
	if e.Location == nil || e.Every == Hour {
		return time.UTC
	}
	return e.Location
}

// start parses a key of the calendar's period into the period's start.
func (e Expect) start(key string) (time.Time, error) {
	switch e.Every {
	case Day:
		t, err := time.ParseInLocation(dateLayout, key, e.loc())
		if err != nil || t.Format(dateLayout) != key {
			return time.Time{}, fmt.Errorf("%q is not a day; want YYYY-MM-DD", key)
		}
		return t, nil
	case Hour:
		t, err := time.Parse(hourLayout, key)
		if err != nil || t.Format(hourLayout) != key {
			return time.Time{}, fmt.Errorf("%q is not an hour; want e.g. 2026-01-01T00:00:00Z", key)
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("unknown period %q", e.Every)
}

// slot is the partition whose period starts at t.
func (e Expect) slot(t time.Time) Slot {
	var end time.Time
	var key string
	if e.Every == Day {
		y, m, d := t.Date()
		end = time.Date(y, m, d+1, 0, 0, 0, 0, e.loc()) // a DST day is 23 or 25 hours
		key = t.Format(dateLayout)
	} else {
		end = t.Add(time.Hour)
		key = t.UTC().Format(hourLayout)
	}
	return Slot{Key: key, Start: t, End: end, Due: end.Add(e.Deadline)}
}

// Ended lists the partitions whose period has ended by now, from the
// calendar's first one (or from, when later) to to (a key, inclusive; empty
// for no bound), oldest first. Keys that do not parse bound nothing.
func (e Expect) Ended(now time.Time, from, to string) []Slot {
	first, err := e.start(e.From)
	if err != nil {
		return nil
	}
	if f, err := e.start(from); err == nil && f.After(first) {
		first = f
	}
	var last time.Time
	if t, err := e.start(to); err == nil {
		last = t
	}
	var out []Slot
	for t := first; ; {
		s := e.slot(t)
		if s.End.After(now) || (!last.IsZero() && t.After(last)) {
			return out
		}
		out = append(out, s)
		t = s.End
	}
}

// Gap is an expected partition without a successful load.
type Gap struct {
	Slot
	// Late: past its deadline. A gap that is not late is still within it.
	Late bool
}

// Gaps lists the ended partitions loaded does not report as loaded.
func (e Expect) Gaps(now time.Time, from, to string, loaded func(key string) bool) []Gap {
	var out []Gap
	for _, s := range e.Ended(now, from, to) {
		if !loaded(s.Key) {
			out = append(out, Gap{Slot: s, Late: !now.Before(s.Due)})
		}
	}
	return out
}

// Summary is what the metrics say of a dataset's calendar.
type Summary struct {
	Missing int // ended, not loaded, within the deadline
	Late    int // not loaded past the deadline
	// NewestLoaded is the end of the newest loaded partition's period; zero
	// when none loaded.
	NewestLoaded time.Time
}

// Summarize counts the gaps and finds the newest loaded partition.
func (e Expect) Summarize(now time.Time, loaded func(key string) bool) Summary {
	var s Summary
	for _, sl := range e.Ended(now, "", "") {
		switch {
		case loaded(sl.Key):
			s.NewestLoaded = sl.End
		case now.Before(sl.Due):
			s.Missing++
		default:
			s.Late++
		}
	}
	return s
}
