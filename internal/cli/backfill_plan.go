package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/schemas"
)

// planBackfill reads each partition's latest attempt and decides its action.
func planBackfill(ctx context.Context, db audit.Querier, cfg *config.Config, res *backfillResult, keys []string, rp reprocess) error {
	t0 := time.Now()
	latest, err := audit.LatestAttempts(ctx, db, cfg.Pipeline, res.Dataset, keys)
	if err != nil {
		return err
	}
	policy := newPlanPolicy(cfg, cfg.Datasets[res.Dataset])
	for _, l := range latest {
		p := &bfPartition{Partition: l.Partition, LastRunID: l.RunID, Attempt: l.Attempt, Error: l.Error, Action: "skip"}
		p.Status, p.Reason = policy.state(l)
		if rp.wants(p.Status) {
			p.Action = "publish"
			res.ToPublish++
		}
		res.Partitions = append(res.Partitions, p)
	}
	res.PlanMS = time.Since(t0).Milliseconds()
	return nil
}

// printPlan is the dry run's answer: one line per partition, then the counts.
func printPlan(e *env, res *backfillResult, asJSON bool) error {
	if asJSON {
		return printJSON(e.out, res)
	}
	tb := &table{headers: []string{"PARTITION", "STATUS", "LAST_RUN_ID", "ATTEMPT", "ACTION", "REASON"}}
	for _, p := range res.Partitions {
		attempt := "-"
		if p.Attempt > 0 {
			attempt = strconv.Itoa(p.Attempt)
		}
		tb.add(p.Partition, p.Status, orDash(p.LastRunID), attempt, p.Action, p.Reason)
	}
	// No colour: tabwriter counts escape bytes and these status columns mix
	// coloured words with others (running, retrying), so colour would break
	// the alignment.
	if err := tb.print(e.out, false); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "dry run: %s; would publish with run_id %s; nothing was published\n", planSummary(res), res.RunID)
	return nil
}

// planSummary counts the plan: "31 partition(s) of orders from A to B: 28 to
// publish (27 missing, 1 failed), 3 skipped (3 success)".
func planSummary(res *backfillResult) string {
	count := func(action string) (int, string) {
		by := map[string]int{}
		n := 0
		for _, p := range res.Partitions {
			if p.Action == action {
				by[p.Status]++
				n++
			}
		}
		var parts []string
		for _, s := range []string{planMissing, planFailed, planStale, planSuccess, planRunning, planRetrying} {
			if by[s] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", by[s], s))
			}
		}
		if len(parts) == 0 {
			return n, ""
		}
		return n, " (" + strings.Join(parts, ", ") + ")"
	}
	pub, pubBy := count("publish")
	skip, skipBy := count("skip")
	first, last := res.Partitions[0].Partition, res.Partitions[len(res.Partitions)-1].Partition
	if first > last { // --reverse; canonical keys sort by time
		first, last = last, first
	}
	return fmt.Sprintf("%d partition(s) of %s from %s to %s: %d to publish%s, %d skipped%s (--reprocess %s)",
		res.Planned, res.Dataset, first, last, pub, pubBy, skip, skipBy, res.Reprocess)
}

// backfillPartitions lists the canonical partition keys from..to inclusive.
func backfillPartitions(typ schemas.PartitionType, step, from, to string) ([]string, string, error) {
	switch typ {
	case schemas.PartitionDate, "":
		if step == "" {
			step = "day"
		}
		if step != "day" {
			return nil, "", &UsageError{fmt.Errorf("--step %s: the dataset's partitions are days (partition_type date): use --step day", step)}
		}
		f, t, err := dateRange(from, to)
		if err != nil {
			return nil, "", err
		}
		n := int(t.Sub(f).Hours()/24) + 1
		if n > maxBackfillPartitions {
			return nil, "", &UsageError{fmt.Errorf("--from %s --to %s spans %d partitions; at most %d per backfill", from, to, n, maxBackfillPartitions)}
		}
		keys := make([]string, 0, n)
		for d := f; !d.After(t); d = d.AddDate(0, 0, 1) {
			keys = append(keys, d.Format(time.DateOnly))
		}
		return keys, step, nil
	case schemas.PartitionHour:
		if step == "" {
			step = "hour"
		}
		if step != "hour" {
			return nil, "", &UsageError{fmt.Errorf("--step %s: the dataset's partitions are hours (partition_type timestamp): use --step hour", step)}
		}
		f, err := hourBound(from, "--from", false)
		if err != nil {
			return nil, "", err
		}
		t, err := hourBound(to, "--to", true)
		if err != nil {
			return nil, "", err
		}
		if t.Before(f) {
			return nil, "", &UsageError{fmt.Errorf("--to %s is before --from %s", to, from)}
		}
		n := int(t.Sub(f)/time.Hour) + 1
		if n > maxBackfillPartitions {
			return nil, "", &UsageError{fmt.Errorf("--from %s --to %s spans %d partitions; at most %d per backfill", from, to, n, maxBackfillPartitions)}
		}
		keys := make([]string, 0, n)
		for h := f; !h.After(t); h = h.Add(time.Hour) {
			p, err := schemas.ParsePartition(schemas.PartitionHour, h.Format(time.RFC3339))
			if err != nil {
				return nil, "", &UsageError{err}
			}
			keys = append(keys, p.Key)
		}
		return keys, step, nil
	}
	return nil, "", &UsageError{fmt.Errorf("the dataset's partitions are %s keys, which cannot be enumerated: publish them one by one with 'idem publish'", typ)}
}

// hourBound reads an hour (2026-01-01T05, or RFC 3339 on the hour) or a day,
// which stands for its first hour (from) or its last (to).
func hourBound(s, flag string, last bool) (time.Time, error) {
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		if last {
			d = d.Add(23 * time.Hour)
		}
		return d, nil
	}
	p, err := schemas.ParsePartition(schemas.PartitionHour, s)
	if err != nil {
		return time.Time{}, &UsageError{fmt.Errorf("%s %q: want YYYY-MM-DD or an hour, YYYY-MM-DDTHH", flag, s)}
	}
	return p.Time.UTC(), nil
}

// parsePerSecond reads N/s, N/m, N/h or N (per second); "" is unlimited (0).
func parsePerSecond(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	num, unit, _ := strings.Cut(s, "/")
	per := map[string]float64{"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[unit]
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || per == 0 || n <= 0 || n > 1e6 {
		return 0, &UsageError{fmt.Errorf("--rate %q: want events per second, minute or hour, such as 50/s, 100/m or 2000/h", s)}
	}
	return n / per, nil
}

// bfPacer spaces events perSecond apart (no burst): a backfill must not flood
// the consumer or the database behind it.
type bfPacer struct {
	every time.Duration
	next  time.Time
}

func (p *bfPacer) wait(ctx context.Context) error {
	if p.every <= 0 {
		return nil
	}
	now := time.Now()
	if d := p.next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now = p.next
	}
	p.next = now.Add(p.every)
	return nil
}
