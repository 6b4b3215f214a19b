package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/schemas"
)

// LanesResult is (k): the latency of live events published while a
// backfill of Backfill events loads on the backfill lane, at max_in_flight
// InFlight. Reported, not asserted: the lane's promise is that a live
// event waits for one load and one pull, not for the backlog.
type LanesResult struct {
	Backfill int `json:"backfill"`
	InFlight int `json:"in_flight"`
	// Live are the live events' publish-to-ack latencies, in milliseconds,
	// each published once the previous one was acked.
	Live []float64 `json:"live_ms"`
	// BackfillLeft is how many backfill events were not yet acked when
	// each live one was.
	BackfillLeft []int `json:"backfill_left"`
	// BackfillSeconds is the whole backfill's time, publish to last ack.
	BackfillSeconds float64 `json:"backfill_seconds"`
}

func lanesDS() dataset { return smallDataset("lanes", "lanes") }

// runLanes is (k). Skipped when the mode sets no LanesBackfill (the smoke
// test).
func (e *env) runLanes(ctx context.Context) error {
	n := e.sizes.LanesBackfill
	if n == 0 {
		return nil
	}
	const inFlight, live = 4, 5
	if err := e.smallTables(ctx, e.pool, "lanes", n+live); err != nil {
		return err
	}
	proc, err := e.startIdem(ctx, "lanes", inFlight, []dataset{lanesDS()})
	if err != nil {
		return err
	}
	defer proc.kill()
	d := lanesDS()
	evs := make([]event, n)
	for i := range evs {
		evs[i] = event{d.Name, dayKey(smallBase, i), fmt.Sprintf("lanes-bf-%05d", i)}
	}
	t0, seqs, err := e.publishBurst(ctx, schemas.BackfillPrefix(subjectPre), evs)
	if err != nil {
		return err
	}
	out := &LanesResult{Backfill: n, InFlight: inFlight}
	e.res.Lanes = out
	// The live events go out once a tenth of the backfill is in, one at a
	// time.
	if _, err := proc.acks.wait(ctx, seqs[:n/10], 10*time.Minute); err != nil {
		return fmt.Errorf("lanes: %w\n%s", err, proc.tail())
	}
	for i := range live {
		m, err := e.msg(event{d.Name, dayKey(smallBase, n+i), fmt.Sprintf("lanes-live-%d", i)})
		if err != nil {
			return err
		}
		t1 := time.Now()
		ack, err := e.js.PublishMsg(ctx, m)
		if err != nil {
			return err
		}
		at, err := proc.acks.wait(ctx, []uint64{ack.Sequence}, 10*time.Minute)
		if err != nil {
			return fmt.Errorf("lanes: live event: %w\n%s", err, proc.tail())
		}
		out.Live = append(out.Live, float64(at[0].Sub(t1).Microseconds())/1000)
		out.BackfillLeft = append(out.BackfillLeft, n-proc.acks.count(seqs))
	}
	at, err := proc.acks.wait(ctx, seqs, time.Hour)
	if err != nil {
		return fmt.Errorf("lanes: %w\n%s", err, proc.tail())
	}
	last := t0
	for _, a := range at {
		last = maxTime(last, a)
	}
	out.BackfillSeconds = last.Sub(t0).Seconds()
	if err := e.waitAudit(ctx, "lanes-live-", audit.StatusSuccess, live, 10*time.Second); err != nil {
		return err
	}
	e.logf("lanes: live events during a %d-event backfill: %v ms (backfill left: %v); backfill %.1f s",
		n, out.Live, out.BackfillLeft, out.BackfillSeconds)
	return proc.stop()
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// lanesMarkdown renders (k).
func (r *Results) lanesMarkdown() string {
	l := r.Lanes
	if l == nil || len(l.Live) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### (k) Live events during a %d-event backfill\n\n", l.Backfill)
	fmt.Fprintf(&b, "%d 10-row partitions published at once on the backfill lane, through `idem serve` at max_in_flight %d; once a tenth was acked, %d live events, each published once the previous one was acked. The backfill took %.1f s.\n\n",
		l.Backfill, l.InFlight, len(l.Live), l.BackfillSeconds)
	t := &table{head: []string{"live event", "publish → ack ms", "backfill events still pending"}}
	for i, ms := range l.Live {
		t.add(fmt.Sprint(i+1), num(ms), fmt.Sprint(l.BackfillLeft[i]))
	}
	fmt.Fprintf(&b, "%s\n", t)
	return b.String()
}
