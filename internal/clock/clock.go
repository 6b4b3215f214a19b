// Package clock holds the two clocks idem serve decides by. Local is this
// host's wall clock. Site is the clock every replica of a site agrees on,
// the database's: learned at each read of it and carried between reads by
// this process's monotonic clock, so that a step of the host's wall clock
// (NTP after a VM is restored from a snapshot) moves no calendar, late
// alert, wait or pause.
package clock

import (
	"sync"
	"time"
)

// Local is this host's wall clock: time.Now in real builds. Test builds
// (-tags idemtest) move it by an offset, to show what a step of the host's
// clock does to what reads it. Durations are measured with time.Now and
// time.Since, never with Local.
func Local() time.Time { return local() }

// Site is the database's clock as this process last read it. The zero
// value, and a nil *Site, are Local until a first reading is learned.
type Site struct {
	mu   sync.Mutex
	at   time.Time // the database's clock at the last reading
	mono time.Time // time.Now right after it, for its monotonic reading
}

// Learn records db, a reading of the database's clock taken just now.
func (s *Site) Learn(db time.Time) {
	s.mu.Lock()
	s.at, s.mono = db, time.Now()
	s.mu.Unlock()
}

// Now is the database's clock now: the last reading plus the time passed
// since it by the monotonic clock, which no step of the wall clock moves.
func (s *Site) Now() time.Time {
	if s == nil {
		return Local()
	}
	s.mu.Lock()
	at, mono := s.at, s.mono
	s.mu.Unlock()
	if at.IsZero() {
		return Local()
	}
	return at.Add(time.Since(mono))
}
