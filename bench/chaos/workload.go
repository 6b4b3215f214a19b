package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// chaosIDHeader tags every message the harness publishes, so that a dead
// letter (which keeps the original's headers) names the copy it came from.
const chaosIDHeader = "Chaos-Id"

// event is one distinct event of the workload: a valid (dataset, partition,
// run_id), or a fatal input.
type event struct {
	idx       int
	dataset   string // as published; "" for bodies without one
	partition string
	runID     string
	fatal     string // fatal kind; "" for a valid event
	want      string // for a fatal input: a substring of its Idem-Error
	subject   string
	body      []byte
	msgID     string // the Nats-Msg-Id of copies that carry one
	replay    bool   // an earlier event named the same (dataset, partition)
	settle    bool
	copies    []*pubCopy
}

func (e *event) key() runKey { return runKey{e.dataset, e.partition, e.runID} }

// runKey is what the ledger records once per successful run.
type runKey struct{ dataset, partition, runID string }

// pubCopy is one publish of an event, and what JetStream answered.
type pubCopy struct {
	ev    *event
	n     int
	at    time.Duration // offset in the fault phase
	msgID bool
	late  bool

	acked     bool
	seq       uint64
	duplicate bool // JetStream dropped it: same Nats-Msg-Id in the window
	sentAt    time.Time
	attempts  int
}

func (c *pubCopy) chaosID() string { return fmt.Sprintf("e%d.%d", c.ev.idx, c.n) }

// mutation changes the staging rows of one partition before an event:
// updates with a higher version, or inserts of new keys. Never a deletion.
type mutation struct {
	at      time.Duration
	ds      dataset
	p       int
	insert  bool
	base    int64 // insert: first new id
	n       int   // insert: rows; update: modulus
	r       int   // update: residue
	salt    int
	done    bool
	failErr string
}

// item is the next thing the publisher does.
type item struct {
	at  time.Duration
	cp  *pubCopy
	mut *mutation
}

// plan is the whole seeded workload of the fault phase.
type plan struct {
	events    []*event
	items     []item
	mutations []*mutation
}

// fatalKinds are the bad inputs of the workload, with their weight and the
// reason their dead letter must give. The full corpus lives with the
// decoder's tests; these are the ones whose fate the chaos run checks under
// faults.
var fatalKinds = []struct {
	name   string
	weight int
	want   string
}{
	{"empty_partition", 6, "empty_source"},
	{"truncated_json", 1, "invalid event"},
	{"wrong_type", 1, "invalid event"},
	{"missing_run_id", 1, "invalid event"},
	{"impossible_date", 1, "invalid event"},
	{"unknown_dataset", 1, "invalid event"},
	{"subject_mismatch", 1, "invalid event"},
	{"empty_body", 1, "invalid event"},
}

func makePlan(o Options, rng *rand.Rand) *plan {
	pl := &plan{}
	nextID := map[[2]int]int64{}
	seen := map[[2]int]bool{}
	for i := range o.Events {
		at := o.Duration * time.Duration(i) / time.Duration(o.Events)
		if rng.Float64() < o.FatalShare {
			ev := fatalEvent(i, o, rng)
			cp := &pubCopy{ev: ev, at: at, msgID: true}
			ev.copies = []*pubCopy{cp}
			pl.events = append(pl.events, ev)
			pl.items = append(pl.items, item{at: at, cp: cp})
			continue
		}
		di, p := rng.IntN(len(datasets)), rng.IntN(o.Partitions)
		d := datasets[di]
		k := [2]int{di, p}
		ev := &event{
			idx: i, dataset: d.name, partition: partitionKey(p), runID: fmt.Sprintf("run-%d-%06d", o.Seed, i),
			subject: "idem.ready." + d.name, replay: seen[k],
		}
		ev.body = validBody(ev.dataset, ev.partition, ev.runID)
		ev.msgID = ev.dataset + ":" + ev.partition + ":" + ev.runID
		seen[k] = true
		if ev.replay && rng.Float64() < 0.4 {
			m := &mutation{at: at, ds: d, p: p, insert: rng.IntN(2) == 0, salt: rng.IntN(1000)}
			if m.insert {
				if nextID[k] == 0 {
					nextID[k] = rowBase(p) + 1000 // initial rows use fewer than 1000 ids
				}
				m.base, m.n = nextID[k], 1+rng.IntN(3)
				nextID[k] += int64(m.n)
			} else {
				m.n = 2 + rng.IntN(2)
				m.r = rng.IntN(m.n)
			}
			pl.mutations = append(pl.mutations, m)
			pl.items = append(pl.items, item{at: at, mut: m})
		}
		copies := 1 + rng.IntN(3)
		mode := rng.IntN(10) // 0-3 every copy with Nats-Msg-Id, 4-6 none, 7-9 mixed
		for c := range copies {
			cp := &pubCopy{ev: ev, n: c, at: at}
			switch {
			case mode < 4:
				cp.msgID = true
			case mode >= 7:
				cp.msgID = rng.IntN(2) == 0
			}
			if c > 0 {
				r := rng.Float64()
				switch {
				case r < 0.5: // right behind the first
				case r < 0.8 || at+10*time.Second >= o.Duration:
					cp.at = min(at+time.Duration(200+rng.IntN(4800))*time.Millisecond, o.Duration)
				default: // late: after the first was loaded, perhaps past the duplicate window
					cp.at = min(at+time.Duration(10+rng.IntN(140))*time.Second, o.Duration)
					cp.late = true
				}
			}
			ev.copies = append(ev.copies, cp)
			pl.items = append(pl.items, item{at: cp.at, cp: cp})
		}
		pl.events = append(pl.events, ev)
	}
	// Stable: a mutation stays before the first copy of its event.
	sort.SliceStable(pl.items, func(a, b int) bool { return pl.items[a].at < pl.items[b].at })
	return pl
}

func validBody(dataset, partition, runID string) []byte {
	return fmt.Appendf(nil, `{"dataset":%q,"partition":%q,"run_id":%q}`, dataset, partition, runID)
}

func fatalEvent(i int, o Options, rng *rand.Rand) *event {
	total := 0
	for _, k := range fatalKinds {
		total += k.weight
	}
	pick := rng.IntN(total)
	kind := fatalKinds[0]
	for _, k := range fatalKinds {
		if pick < k.weight {
			kind = k
			break
		}
		pick -= k.weight
	}
	d := datasets[rng.IntN(len(datasets))]
	ev := &event{idx: i, fatal: kind.name, want: kind.want, dataset: d.name, subject: "idem.ready." + d.name,
		runID: fmt.Sprintf("bad-%d-%06d", o.Seed, i), partition: partitionKey(rng.IntN(o.Partitions))}
	ev.msgID = fmt.Sprintf("chaos-bad:%d:%d", o.Seed, i)
	switch kind.name {
	case "empty_partition":
		ev.partition = emptyDay.AddDate(0, 0, rng.IntN(3650)).Format(time.DateOnly)
		ev.body = validBody(ev.dataset, ev.partition, ev.runID)
	case "truncated_json":
		b := validBody(ev.dataset, ev.partition, ev.runID)
		ev.body = b[:len(b)/2]
	case "wrong_type":
		ev.body = fmt.Appendf(nil, `{"dataset":%q,"partition":20260101,"run_id":%q}`, ev.dataset, ev.runID)
	case "missing_run_id":
		ev.body = fmt.Appendf(nil, `{"dataset":%q,"partition":%q}`, ev.dataset, ev.partition)
	case "impossible_date":
		ev.partition = "2026-02-30"
		ev.body = validBody(ev.dataset, ev.partition, ev.runID)
	case "unknown_dataset":
		ev.dataset, ev.subject = "nope", "idem.ready.nope"
		ev.body = validBody(ev.dataset, ev.partition, ev.runID)
	case "subject_mismatch":
		other := datasets[(indexOf(d.name)+1)%len(datasets)].name
		ev.body = validBody(other, ev.partition, ev.runID)
	case "empty_body":
		ev.body = nil
	}
	return ev
}

func indexOf(name string) int {
	for i, d := range datasets {
		if d.name == name {
			return i
		}
	}
	return -1
}

// settleEvents is one final event per (dataset, partition), after the last
// staging change: the reference is staging as it is now.
func settleEvents(o Options, from int) []*event {
	var out []*event
	for _, d := range datasets {
		for p := range o.Partitions {
			ev := &event{idx: from + len(out), dataset: d.name, partition: partitionKey(p), settle: true,
				runID: fmt.Sprintf("settle-%d", o.Seed), subject: "idem.ready." + d.name}
			ev.body = validBody(ev.dataset, ev.partition, ev.runID)
			ev.msgID = ev.dataset + ":" + ev.partition + ":" + ev.runID
			ev.copies = []*pubCopy{{ev: ev, msgID: true}}
			out = append(out, ev)
		}
	}
	return out
}

// publisher carries the plan out in real time: mutations on staging through
// a direct connection (not the proxy), publishes through JetStream, each
// retried until it succeeds, as a real producer would.
type publisher struct {
	js   jetstream.JetStream
	db   *pgxpool.Pool
	logf func(string, ...any)

	mu       sync.Mutex
	retries  int // publish attempts that failed and were retried
	mutFails int
	// dbDown is set when a mutation gave up, until one succeeds: while the
	// warehouse is down for minutes, each mutation tries once, so the
	// publisher keeps its pace and idem gets events to hold.
	dbDown bool
	// storageRefused counts the publishes JetStream refused because the
	// stream was full (js_storage_full): retried like any other.
	storageRefused int
}

func (p *publisher) run(ctx context.Context, start time.Time, items []item) {
	for _, it := range items {
		if d := time.Until(start.Add(it.at)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		if it.mut != nil {
			p.mutate(ctx, it.mut)
		} else {
			p.publish(ctx, it.cp)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func (p *publisher) mutate(ctx context.Context, m *mutation) {
	// Long enough for a short PostgreSQL restart, short enough that a
	// warehouse outage does not stall the publishing of events.
	deadline := time.Now().Add(6 * time.Second)
	if p.dbDown {
		deadline = time.Now()
	}
	for ctx.Err() == nil {
		var err error
		if m.insert {
			_, err = p.db.Exec(ctx, insertRowsSQL(m.ds.staging), m.base, partitionKey(m.p), m.n, m.salt)
		} else {
			_, err = p.db.Exec(ctx, updateRowsSQL(m.ds.staging), partitionKey(m.p), m.n, m.r)
		}
		if err == nil {
			m.done, p.dbDown = true, false
			return
		}
		// A commit lost with a restarting server is retried: the insert skips
		// existing keys, the update only raises versions again.
		if !time.Now().Before(deadline) {
			m.failErr, p.dbDown = err.Error(), true
			p.mu.Lock()
			p.mutFails++
			p.mu.Unlock()
			return
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func (p *publisher) publish(ctx context.Context, cp *pubCopy) {
	for ctx.Err() == nil {
		msg := nats.NewMsg(cp.ev.subject)
		msg.Data = cp.ev.body
		msg.Header.Set(chaosIDHeader, cp.chaosID())
		if cp.msgID {
			msg.Header.Set(jetstream.MsgIDHeader, cp.ev.msgID)
		}
		cp.attempts++
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := p.js.PublishMsg(pctx, msg)
		cancel()
		if err == nil {
			cp.acked, cp.seq, cp.duplicate, cp.sentAt = true, ack.Sequence, ack.Duplicate, time.Now()
			return
		}
		p.mu.Lock()
		p.retries++
		if storageRefused(err) {
			p.storageRefused++
		}
		p.mu.Unlock()
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
