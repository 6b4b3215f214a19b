package consumer

import (
	"context"
	"sync"

	"github.com/idem-data/idem/internal/defaults"
)

// Lane names: the lane label of the in-flight gauge.
const (
	LaneLive     = "live"
	LaneBackfill = "backfill"
)

// DefaultBackfillShare is Config.BackfillShare's default, in percent.
const DefaultBackfillShare = defaults.BackfillShare

// lane is the way a message came: the ready subjects (live) or the
// backfill subjects, each read by its own durable consumer and fetch loop.
// Both lanes share one process's slots and loads; the live lane has
// priority.
type lane int

const (
	laneLive lane = iota
	laneBackfill
)

func (l lane) String() string {
	if l == laneBackfill {
		return LaneBackfill
	}
	return LaneLive
}

// lanes shares the slots (messages held: running plus fetched ahead) and
// the loads (max_in_flight) between the lanes. The rule:
//
//   - a lane holding no message fetches one at a time (a probe), so that a
//     pull of the other lane is always open or about to be;
//   - a lane alone holds every slot (the backfill all but one, kept for
//     the live probe) and runs every load;
//   - while both hold messages, the backfill holds at most its share of
//     the slots and starts a load only while fewer than its share of the
//     loads run; the live lane holds the other slots (and those the
//     backfill fetched beyond its share, until they drain), and a live
//     message waiting for a load gets the next one free, so live work may
//     run on every load the backfill does not.
//
// A live event therefore starts within one load and one pull, however long
// the backfill's backlog; and when no live work is held, the backfill uses
// every load.
type lanes struct {
	slots, loads           int
	shareSlots, shareLoads int

	mu sync.Mutex
	// held counts slots reserved for a pull or held by a message; busy the
	// messages fetched and not settled; running the loads.
	held, busy, running [2]int
	// waiting are the messages waiting for a load, oldest first.
	waiting [2][]chan struct{}
	// changed is closed and replaced whenever a slot frees or the limits
	// change: a fetch loop waiting for room looks again.
	changed chan struct{}
	// pulls cancel each lane's open pull: a backfill pull that holds more
	// slots than the backfill may now gives them back at once, not after
	// its wait.
	pulls [2]context.CancelFunc
}

func newLanes(slots, loads, sharePercent int) *lanes {
	return &lanes{
		slots: slots, loads: loads,
		shareSlots: max(1, min(slots-1, (slots*sharePercent+99)/100)),
		shareLoads: max(1, (loads*sharePercent+99)/100),
		changed:    make(chan struct{}),
	}
}

// limit is the most slots ln may hold now.
func (l *lanes) limit(ln lane) int {
	switch {
	case l.busy[ln] == 0:
		return 1
	case ln == laneLive && l.busy[laneBackfill] > 0:
		return l.slots - l.shareSlots
	case ln == laneLive:
		return l.slots
	case l.busy[laneLive] > 0:
		return l.shareSlots
	case l.slots > l.loads:
		return l.slots - 1
	}
	return l.slots
}

// broadcast wakes the fetch loops waiting for room and cancels a backfill
// pull that holds more than the backfill may now (live work came). A
// message the server sent just then comes back after the ack wait: a
// cost only a backfill pays, so a live pull is never cancelled (one that
// holds many slots after its burst gives them back when its wait ends).
// Called with mu held.
func (l *lanes) broadcast() {
	close(l.changed)
	l.changed = make(chan struct{})
	// Only live work held is worth it: a message in transit to the
	// cancelled pull comes back after the ack wait. A backfill whose
	// messages all settled while its pull waits (busy 0, so its limit is
	// a probe's) keeps its pull.
	if l.pulls[laneBackfill] != nil && l.busy[laneLive] > 0 && l.held[laneBackfill] > l.limit(laneBackfill) {
		l.pulls[laneBackfill]()
		l.pulls[laneBackfill] = nil
	}
}

// reserve waits for at least one slot ln may take, and takes as many as
// it may; 0 means stopping.
func (l *lanes) reserve(ln lane, stopping <-chan struct{}) int {
	for {
		l.mu.Lock()
		n := l.free(ln)
		if n > 0 {
			l.held[ln] += n
			l.mu.Unlock()
			return n
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-stopping:
			return 0
		}
	}
}

// free is how many more slots ln may take now. Called with mu held.
func (l *lanes) free(ln lane) int {
	other := l.held[laneBackfill]
	if ln == laneLive {
		// What the backfill holds beyond its share (fetched before live
		// work came) waits for loads the live lane goes first to; left
		// to count, it would leave live work too few slots to fetch
		// ahead or group. It only drains, so the excess is brief. One
		// slot is always the backfill's, for its probe: taken by a live
		// pull in the moment the probe's pull ended, it would be taken
		// again at each pull, and the backfill never fetch while live
		// work runs.
		other = max(1, min(other, l.shareSlots))
	} else {
		other = l.held[laneLive]
	}
	return min(l.slots-l.held[ln]-other, l.limit(ln)-l.held[ln])
}

// lend gives back the slot of a fetched message of ln that waits without
// a load (its dataset paused), for other messages to use meanwhile.
func (l *lanes) lend(ln lane) { l.settled(ln) }

// reclaim takes a slot of ln again, at once, for a message that lent its
// own and now runs. Waiting for a free one could wait forever: a lane
// whose messages all lent theirs counts as empty and probes with one
// slot, which its pull holds. The lanes are over their slots by the
// messages reclaimed at most, until they settle; the loads keep their own
// limit.
func (l *lanes) reclaim(ln lane) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[ln]++
	l.busy[ln]++
	if ln == laneLive && l.busy[ln] == 1 {
		l.broadcast()
	}
}

// pulling registers the cancellation of ln's pull; nil when it is over.
func (l *lanes) pulling(ln lane, cancel context.CancelFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pulls[ln] = cancel
}

// release frees n slots of ln reserved for a pull and left unused.
func (l *lanes) release(ln lane, n int) {
	if n == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[ln] -= n
	l.broadcast()
}

// fetched counts a message of ln, holding one of its reserved slots.
func (l *lanes) fetched(ln lane) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy[ln]++
	if ln == laneLive && l.busy[ln] == 1 {
		l.broadcast()
	}
}

// settled frees the slot of a message of ln.
func (l *lanes) settled(ln lane) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy[ln]--
	l.held[ln]--
	if ln == laneLive && l.busy[ln] == 0 {
		l.grant()
	}
	l.broadcast()
}

// canStart reports whether a load of ln may start now. Called with mu held.
func (l *lanes) canStart(ln lane) bool {
	if l.running[laneLive]+l.running[laneBackfill] >= l.loads {
		return false
	}
	if ln == laneLive {
		return true
	}
	return len(l.waiting[laneLive]) == 0 && (l.busy[laneLive] == 0 || l.running[laneBackfill] < l.shareLoads)
}

// queueLoad asks for a load of ln: the channel receives once it is
// granted. withdraw takes the request back; it reports false when the load
// was granted meanwhile, which the caller then owns (and ends with
// endLoad).
func (l *lanes) queueLoad(ln lane) (granted <-chan struct{}, withdraw func() bool) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiting[ln]) == 0 && l.canStart(ln) {
		l.running[ln]++
		ch <- struct{}{}
	} else {
		l.waiting[ln] = append(l.waiting[ln], ch)
	}
	return ch, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, w := range l.waiting[ln] {
			if w == ch {
				l.waiting[ln] = append(l.waiting[ln][:i:i], l.waiting[ln][i+1:]...)
				return true
			}
		}
		return false
	}
}

// endLoad ends a load of ln and grants the next ones.
func (l *lanes) endLoad(ln lane) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[ln]--
	l.grant()
}

// grant starts the waiting loads that may start, live first. Called with
// mu held.
func (l *lanes) grant() {
	for _, ln := range []lane{laneLive, laneBackfill} {
		for len(l.waiting[ln]) > 0 && l.canStart(ln) {
			l.running[ln]++
			l.waiting[ln][0] <- struct{}{}
			l.waiting[ln] = l.waiting[ln][1:]
		}
	}
}
