package statuspage

import (
	"sort"
	"time"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/schemas"
)

// Status is a cell's colour: what an operator needs to know of a partition.
type Status string

const (
	Success      Status = "success"       // the latest attempt loaded it
	Provisional  Status = "provisional"   // loaded, and its source is still rechecked (recheck:): it may be reloaded
	Outdated     Status = "outdated"      // loaded, under another definition than the dataset's current one
	Running      Status = "running"       // an attempt started and has not finished
	Failed       Status = "failed"        // the latest attempt failed; it may be retried
	DeadLettered Status = "dead_lettered" // failed and in the dead-letter stream
	Rejected     Status = "rejected"      // the checks refused the latest load: the previous rows stay
	Retracted    Status = "retracted"     // an operator emptied it on purpose (idem retract)
	Missing      Status = "missing"       // expected by the calendar, not loaded, within its deadline
	Late         Status = "late"          // expected by the calendar, not loaded, past its deadline
	Waiting      Status = "waiting"       // a join whose upstreams have not all loaded, or a source not ready
	Cancelled    Status = "cancelled"     // the latest attempt's backfill was cancelled: not loaded, not a failure
	None         Status = "none"          // nothing known and nothing expected
)

// Statuses in the legend's order.
var Statuses = []Status{Success, Provisional, Outdated, Running, Failed, DeadLettered, Rejected, Retracted, Late, Missing, Waiting, Cancelled, None}

// Dataset is what the page knows of a configured dataset.
type Dataset struct {
	Name      string
	Upstreams []string
	// Calendar, when the dataset has one (expect:).
	Calendar *calendar.Expect
	// PartitionType is how the API parses the dataset's partition keys;
	// empty is date, as in the config.
	PartitionType schemas.PartitionType
	// Recheck, when the dataset has one (recheck:), is its window: a
	// loaded partition inside it is provisional.
	Recheck *calendar.Window
	// Definition is the hash of the dataset's current definition; a load
	// under another is Outdated. "": not known, none is.
	Definition string
}

// Grid is datasets × partitions.
type Grid struct {
	Keys   []string
	Rows   []Row
	Counts map[Status]int
}

// Row is one dataset's cells, one per key.
type Row struct {
	Dataset string
	Cells   []Status
}

// cellKey names one partition of one dataset: a cell of the grid.
type cellKey struct{ dataset, partition string }

// build colours every cell from the latest attempts, the source waits, the
// dead letters and the calendars. It is pure: the caller read the audit
// and the stream.
func build(now time.Time, datasets []Dataset, keys []string, latest []audit.Latest, waits []audit.Wait, dead []DeadLetter) Grid {
	g := Grid{Keys: keys, Counts: map[Status]int{}}
	from, to := "", ""
	if len(keys) > 0 {
		from, to = keys[0], keys[len(keys)-1]
	}
	c := newCells(now, datasets, from, to, latest, waits, dead)
	for _, ds := range datasets {
		r := Row{Dataset: ds.Name, Cells: make([]Status, len(keys))}
		for i, k := range keys {
			r.Cells[i] = c.status(ds, k)
			g.Counts[r.Cells[i]]++
		}
		g.Rows = append(g.Rows, r)
	}
	return g
}

// cells turns the audit into a Status, for the grid and the JSON API
// alike: the audit's rule (audit.StateOf) with the dead letters and the
// calendars over it, on what both read, indexed for partition keys
// from..to.
type cells struct {
	now      time.Time
	byCell   map[cellKey]audit.Latest
	waits    map[cellKey]audit.Wait
	inDLQ    map[cellKey]bool
	runInDLQ map[[3]string]bool
	// due holds the slots of each calendar within from..to, by key; a
	// dataset without a calendar has no entry.
	due map[string]map[string]calendar.Slot
}

// newCells indexes the latest attempts, the current source waits, the
// dead letters and the ended slots of every calendar from..to. An empty
// from..to reads no calendar.
func newCells(now time.Time, datasets []Dataset, from, to string, latest []audit.Latest, waits []audit.Wait, dead []DeadLetter) *cells {
	c := &cells{
		now:      now,
		byCell:   make(map[cellKey]audit.Latest, len(latest)),
		waits:    make(map[cellKey]audit.Wait, len(waits)),
		inDLQ:    make(map[cellKey]bool, len(dead)),
		runInDLQ: make(map[[3]string]bool, len(dead)),
		due:      map[string]map[string]calendar.Slot{},
	}
	for _, l := range latest {
		c.byCell[cellKey{l.Dataset, l.Partition}] = l
	}
	for _, w := range waits {
		c.waits[cellKey{w.Dataset, w.Partition}] = w
	}
	for _, d := range dead {
		c.inDLQ[cellKey{d.Dataset, d.Partition}] = true
		c.runInDLQ[[3]string{d.Dataset, d.Partition, d.RunID}] = true
	}
	if from == "" || to == "" {
		return c
	}
	for _, ds := range datasets {
		if ds.Calendar == nil {
			continue
		}
		m := map[string]calendar.Slot{}
		for _, s := range ds.Calendar.Ended(now, from, to) {
			m[s.Key] = s
		}
		c.due[ds.Name] = m
	}
	return c
}

// slot is the calendar's slot of ds's partition key, when the calendar
// expects it and its period has ended.
func (c *cells) slot(ds Dataset, key string) (calendar.Slot, bool) {
	s, ok := c.due[ds.Name][key]
	return s, ok
}

// status is the colour of ds's partition key: its state as the audit
// decides it (audit.StateOf, audit.WaitingFor), with what the page knows
// besides: the dead letters and the calendars.
func (c *cells) status(ds Dataset, key string) Status {
	// A current wait is newer than any attempt (audit.WaitOf): the event
	// waits for its source, or gave up and is in the dead letters.
	if w, ok := c.waits[cellKey{ds.Name, key}]; ok {
		if !w.GaveUp {
			return Waiting
		}
		if c.inDLQ[cellKey{ds.Name, key}] {
			return DeadLettered
		}
	}
	l := c.byCell[cellKey{ds.Name, key}]
	switch audit.StateOf(l.Status, l.ErrorKind) {
	case audit.StatusSuccess:
		if audit.Outdated(l.Definition, ds.Definition) {
			return Outdated
		}
		if ds.Recheck != nil && ds.Recheck.Holds(key, c.now) {
			return Provisional
		}
		return Success
	case audit.StatusStarted:
		// A process that died in its last allowed attempt leaves the
		// row started; the reconciler dead-letters the message.
		if c.runInDLQ[[3]string{ds.Name, key, l.RunID}] {
			return DeadLettered
		}
		return Running
	case audit.StateRejected:
		return Rejected
	case audit.StatusCancelled:
		return Cancelled
	case audit.StateRetracted:
		return Retracted
	case audit.StatusMissing:
	default:
		if c.inDLQ[cellKey{ds.Name, key}] {
			return DeadLettered
		}
		return Failed
	}
	// Never attempted: a join waits for its upstreams, as far as the page
	// knows of them (an attempt, or a calendar that expects the partition).
	for _, w := range audit.WaitingFor(ds.Upstreams, func(up string) string { return c.state(up, key) }) {
		if w.State != audit.StatusMissing || c.due[ds.Name] != nil || c.due[w.Dataset] != nil {
			return Waiting
		}
	}
	if s, ok := c.due[ds.Name][key]; ok {
		if c.now.Before(s.Due) {
			return Missing
		}
		return Late
	}
	return None
}

// state is the audit's state of dataset's partition key (audit.StateOf).
func (c *cells) state(dataset, key string) string {
	l := c.byCell[cellKey{dataset, key}]
	return audit.StateOf(l.Status, l.ErrorKind)
}

// columns chooses the grid's partition keys: the calendars' ended
// partitions and the recently attempted ones, within from..to when given,
// the newest n, oldest first.
func columns(now time.Time, datasets []Dataset, recent []string, from, to string, n int) []string {
	set := map[string]bool{}
	for _, ds := range datasets {
		if ds.Calendar == nil {
			continue
		}
		slots := ds.Calendar.Ended(now, from, to)
		if len(slots) > n {
			slots = slots[len(slots)-n:]
		}
		for _, s := range slots {
			set[s.Key] = true
		}
	}
	for _, k := range recent {
		if (from == "" || k >= from) && (to == "" || k <= to) {
			set[k] = true
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > n {
		keys = keys[len(keys)-n:]
	}
	return keys
}
