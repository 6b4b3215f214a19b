package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/config"
)

// waitBackfill polls the audit table until every published partition has a
// final outcome, the timeout passes, or ctx ends. loadStart is when the first
// event went out: loads began then, so the ETA extrapolates from it.
func waitBackfill(ctx context.Context, e *env, db audit.Querier, cfg *config.Config, res *backfillResult, dlq *bfDLQWatch, loadStart time.Time, timeout time.Duration) error {
	maxDeliveries := cfg.Datasets[res.Dataset].MaxAttempts()
	pending := map[string]*bfPartition{}
	var keys []string
	for _, p := range res.Partitions {
		if p.Action == "publish" {
			p.Outcome = &bfOutcome{Status: "queued"}
			pending[p.Partition] = p
			keys = append(keys, p.Partition)
		}
	}
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(backfillPoll)
	defer tick.Stop()
	prog := newBFProgress(e.errOut)
	defer prog.end()
	sum := &bfWaitSummary{}
	res.Wait = sum
	for {
		if len(keys) > 0 {
			attempts, err := audit.RunAttempts(ctx, db, cfg.Pipeline, res.Dataset, res.RunID, keys)
			if err != nil {
				if ctx.Err() != nil {
					sum.Interrupted = true
					return nil
				}
				return err
			}
			keys = keys[:0]
			for _, a := range attempts {
				p := pending[a.Partition]
				dl, dead := dlq.get(a.Partition)
				o := backfillOutcome(a, dl, dead, maxDeliveries)
				p.Outcome = &o
				if !o.Final {
					keys = append(keys, a.Partition)
				}
			}
		}
		*sum = bfWaitSummary{ElapsedMS: time.Since(start).Milliseconds()}
		var c bfCounts
		for _, p := range res.Partitions {
			if p.Outcome == nil {
				continue
			}
			switch {
			case p.Outcome.Status == audit.StatusSuccess:
				sum.Loaded++
			case p.Outcome.Final:
				sum.Failed++
			default:
				sum.Pending++
				if p.Outcome.Status == planRetrying {
					c.retrying++
				}
			}
		}
		c.loaded, c.failed = sum.Loaded, sum.Failed
		prog.show(time.Now(), len(keys) == 0, func(tty bool) string {
			return bfProgressLine(tty, "loaded", c.loaded+c.failed, res.ToPublish, &c, loadStart, time.Now())
		})
		if len(keys) == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			sum.TimedOut = true
			return nil
		case <-ctx.Done():
			sum.Interrupted = true
			return nil
		}
	}
}

// reportBackfill prints what did not load and the summary; exit 1 when a
// partition failed or is still pending.
func reportBackfill(e *env, res *backfillResult, asJSON bool) error {
	sum := res.Wait
	if asJSON {
		if err := printJSON(e.out, res); err != nil {
			return err
		}
	} else {
		tb := &table{headers: []string{"PARTITION", "STATUS", "ATTEMPTS", "DLQ", "ERROR"}}
		for _, p := range res.Partitions {
			if o := p.Outcome; o != nil && o.Status != audit.StatusSuccess {
				attempts := "-"
				if o.Attempts > 0 {
					attempts = strconv.Itoa(o.Attempts)
				}
				tb.add(p.Partition, o.Status, attempts, orDash(o.DLQ), truncateCell(o.Error, 100))
			}
		}
		if len(tb.rows) > 0 {
			if err := tb.print(e.out, false); err != nil { // no colour: see the dry run's table
				return err
			}
		}
		line := fmt.Sprintf("%s: %d published, %d loaded, %d failed, %d pending, after %s",
			res.RunID, res.Published, sum.Loaded, sum.Failed, sum.Pending, (time.Duration(sum.ElapsedMS) * time.Millisecond).Round(100*time.Millisecond))
		switch {
		case sum.TimedOut:
			line += ": timed out; the pending partitions are still queued or loading"
		case sum.Interrupted:
			line += ": interrupted; the pending partitions are still queued or loading"
		}
		fmt.Fprintln(e.out, line)
	}
	if sum.Failed > 0 || sum.Pending > 0 {
		return ErrReported
	}
	return nil
}

// bfCounts feed the progress line.
type bfCounts struct{ loaded, failed, retrying int }

// bfProgress draws one line redrawn in place on a terminal (at most every
// backfillRedraw), or prints a plain line every backfillPlainEvery
// otherwise; the final state is always shown.
type bfProgress struct {
	w     io.Writer
	tty   bool
	last  time.Time
	drawn bool
}

// backfillRedraw spares a terminal 365 redraws in 30 ms.
const backfillRedraw = 100 * time.Millisecond

func newBFProgress(w io.Writer) *bfProgress {
	return &bfProgress{w: w, tty: isTerminal(w), last: time.Now()}
}

func (p *bfProgress) show(now time.Time, final bool, text func(tty bool) string) {
	switch {
	case p.tty && (final || !p.drawn || now.Sub(p.last) >= backfillRedraw):
		fmt.Fprintf(p.w, "\r\x1b[K%s", text(true))
		p.drawn, p.last = true, now
	case !p.tty && (final || now.Sub(p.last) >= backfillPlainEvery):
		fmt.Fprintln(p.w, text(false))
		p.last = now
	}
}

func (p *bfProgress) end() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// bfProgressLine renders "[=====>    ] 120/365 loaded  3 failed  2 retrying  ETA 12s"
// for a terminal, or a plain sentence for a log.
func bfProgressLine(tty bool, verb string, done, total int, c *bfCounts, start, now time.Time) string {
	eta := "?"
	if done >= total {
		eta = "0s"
	} else if done > 0 {
		eta = compactDuration(time.Duration(float64(now.Sub(start)) / float64(done) * float64(total-done)))
	}
	count := done
	if c != nil {
		count = c.loaded
	}
	if !tty {
		s := fmt.Sprintf("backfill: %d/%d %s", count, total, verb)
		if c != nil {
			s += fmt.Sprintf(", %d failed, %d retrying, %d pending", c.failed, c.retrying, total-done)
		}
		return s + ", ETA " + eta
	}
	const width = 30
	filled := 0
	if total > 0 {
		filled = done * width / total
	}
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar = strings.Repeat("=", max(filled-1, 0)) + ">" + strings.Repeat(" ", width-max(filled, 1))
	}
	s := fmt.Sprintf("[%s] %d/%d %s", bar, count, total, verb)
	if c != nil {
		s += fmt.Sprintf("  %d failed  %d retrying", c.failed, c.retrying)
	}
	return s + "  ETA " + eta
}

// compactDuration is 45s, 12m05s or 3h20m.
func compactDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}
