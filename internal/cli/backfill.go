package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/backfill"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/schemas"
)

// backfillPlainEvery paces progress lines when stderr is not a terminal.
const backfillPlainEvery = 10 * time.Second

// parseReprocess reads --reprocess: a comma-separated list of missing,
// failed, outdated, all.
func parseReprocess(s string) (backfill.Reprocess, error) {
	var r backfill.Reprocess
	for _, w := range strings.Split(s, ",") {
		switch strings.TrimSpace(w) {
		case "missing":
			r.Missing = true
		case "failed":
			r.Failed = true
		case "all":
			r.All = true
		case "outdated":
			r.Outdated = true
		default:
			return r, &UsageError{fmt.Errorf("--reprocess %q: want a comma-separated list of missing, failed, outdated, all", s)}
		}
	}
	return r, nil
}

type backfillFlags struct {
	from, to, step, reprocess, rate, runID string
	dryRun, reverse, wait, force, asJSON   bool
	timeout                                time.Duration
}

func backfillCmd(e *env) *cobra.Command {
	var f backfillFlags
	c := &cobra.Command{
		Use:   "backfill DATASET --from D --to D",
		Short: "Publish one event per partition of a range, planned from the audit ledger",
		Long: `Plan a range of DATASET's partitions from the audit table, then publish one
confirmed event per partition to reprocess, all under one run_id
(backfill__<UTC timestamp>, or --run-id).

Partitions are days (--step day) for date datasets and hours (--step hour) for
partition_type timestamp datasets; --from and --to are inclusive (for hours, a
day means all its hours, or give an hour: 2026-01-01T05).

The plan reads each partition's latest attempt (skipped duplicates aside):
  missing   never attempted
  success   the latest attempt loaded it
  failed    the latest attempt failed and will not be retried: a fatal error,
            the last allowed delivery, or a transient failure whose redelivery
            is long overdue (its backoff plus the ack wait)
  stale     counts as failed: left 'started' more than twice the ack wait ago
            and no load holds the partition's lock, so its process died
  running   'started' and a load holds the partition's lock, or started less
            than twice the ack wait ago (JetStream redelivers a dead one)
  retrying  a transient failure that JetStream will still redeliver
--reprocess (default missing,failed, as Airflow's backfill) says which states
are published; all publishes every partition; outdated, the partitions whose
latest load ran another definition ('idem audit outdated'), and without
--from and --to it spans the outdated partitions, first to last. running and
retrying partitions are never published: a delivery owns them already.

A new run_id makes the consumer load a partition again even when an earlier
run loaded it, so --reprocess all needs no --force; --force only matters with
a --run-id that already succeeded (to resume an interrupted backfill, pass its
run_id: JetStream drops what it already holds within its duplicate window and
the consumer skips what already succeeded).

Events are validated as the consumer validates them, carry Nats-Msg-Id
<dataset>:<partition>:<run_id>, and each is confirmed by JetStream (PubAck)
before it counts as published; a bounded window of publishes is in flight.

--wait then follows every published event to its outcome on the results
stream, as 'idem publish --wait' does (the audit table says how far the
pending ones got): success, or failed (dead-lettered: fatal, out of retries,
crashed, or rejected by its checks). A progress bar goes to stderr on a
terminal, a line every 10s otherwise; then a table of what did not load.

Exit code: 0 ok; 1 if a partition failed or a publish failed; 2 usage;
3 (with --wait) not every partition finished within --timeout.`,
		Example: `  idem backfill orders --from 2026-01-01 --to 2026-12-31 --dry-run
  idem backfill orders --from 2026-01-01 --to 2026-12-31 --wait
  idem backfill orders --from 2026-03-01 --to 2026-03-31 --reprocess all --rate 20/s --wait --timeout 30m
  idem backfill orders --reprocess outdated --rate 20/s --wait
  idem backfill clicks --from 2026-03-01T00 --to 2026-03-01T23 --step hour --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBackfill(cmd, e, args[0], f)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.from, "from", "", "first partition, YYYY-MM-DD (or YYYY-MM-DDTHH with --step hour); default: the calendar's first (expect:)")
	fl.StringVar(&f.to, "to", "", "last partition, inclusive; default: the calendar's last ended partition")
	fl.StringVar(&f.step, "step", "", "day or hour (default: the dataset's partition type)")
	fl.StringVar(&f.reprocess, "reprocess", "missing,failed", "which partitions to publish: missing, failed, outdated, all")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan, publish nothing")
	fl.StringVar(&f.rate, "rate", "", "publish at most N events per second: N/s, N/m or N/h (default unlimited)")
	fl.BoolVar(&f.reverse, "reverse", false, "publish the newest partition first")
	fl.BoolVar(&f.wait, "wait", false, "follow the loads until each partition succeeded or failed for good")
	fl.DurationVar(&f.timeout, "timeout", time.Hour, "with --wait, give up after this long (exit 1)")
	fl.BoolVar(&f.force, "force", false, "events carry force: rerun even if this run_id already succeeded")
	fl.StringVar(&f.runID, "run-id", "", "run id of every event (default backfill__<UTC timestamp>)")
	fl.BoolVar(&f.asJSON, "json", false, "print the plan (--dry-run) or the result as JSON")
	c.AddCommand(backfillCancelCmd(e))
	return c
}

func runBackfill(cmd *cobra.Command, e *env, dataset string, f backfillFlags) error {
	ctx := cmd.Context()
	cfg, err := e.configFor(dataset)
	if err != nil {
		return err
	}
	ds := cfg.Datasets[dataset]
	rp, err := parseReprocess(f.reprocess)
	if err != nil {
		return err
	}
	if f.from == "" && f.to == "" && rp.Outdated && !rp.All {
		if f.from, f.to, err = outdatedRange(ctx, cfg, dataset); err != nil {
			return err
		}
		if f.from == "" {
			fmt.Fprintf(e.out, "nothing to backfill: no partition of %s is outdated\n", dataset)
			return nil
		}
	}
	if f.from == "" && f.to == "" {
		cal, ok := ds.Calendar()
		if !ok {
			return &UsageError{fmt.Errorf("--from and --to are required: dataset %q has no calendar (expect:)", dataset)}
		}
		ended := cal.Ended(time.Now(), "", "")
		if len(ended) == 0 {
			fmt.Fprintf(e.out, "nothing to backfill: no partition of %s's calendar has ended yet\n", dataset)
			return nil
		}
		f.from, f.to = ended[0].Key, ended[len(ended)-1].Key
	} else if f.from == "" || f.to == "" {
		return &UsageError{errors.New("give both --from and --to, or neither for a dataset with a calendar")}
	}
	keys, step, err := backfillPartitions(ds.PartitionType, f.step, f.from, f.to)
	if err != nil {
		return err
	}
	perSecond, err := parsePerSecond(f.rate)
	if err != nil {
		return err
	}
	switch {
	case f.dryRun && f.wait:
		return &UsageError{errors.New("--dry-run publishes nothing, so --wait has nothing to follow")}
	case cmd.Flags().Changed("timeout") && !f.wait:
		return &UsageError{errors.New("--timeout bounds --wait: add --wait")}
	case f.timeout <= 0:
		return &UsageError{fmt.Errorf("--timeout %s: want a positive duration", f.timeout)}
	}
	if f.reverse {
		for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
			keys[i], keys[j] = keys[j], keys[i]
		}
	}
	runID := f.runID
	if runID == "" {
		runID = backfill.NewRunID(time.Now())
	}
	// Refuse a bad run_id before planning, as the consumer would.
	if _, err := backfill.Message(cfg, schemas.PartitionReady{Dataset: dataset, Partition: keys[0], RunID: runID}); err != nil {
		return &UsageError{err}
	}

	pool, err := connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	res := &backfill.Result{Dataset: dataset, From: f.from, To: f.to, Step: step, Reprocess: rp.String(),
		RunID: runID, Force: f.force, DryRun: f.dryRun, Planned: len(keys)}
	if err := backfill.Plan(ctx, pool, cfg, res, keys, rp); err != nil {
		return err
	}
	if f.dryRun {
		return printPlan(e, res, f.asJSON)
	}
	if !f.asJSON {
		fmt.Fprintf(e.out, "plan: %s\n", planSummary(res))
	}
	if res.ToPublish == 0 {
		if f.asJSON {
			return printJSON(e.out, res)
		}
		fmt.Fprintf(e.out, "nothing to publish (--reprocess %s)\n", rp)
		return nil
	}

	nc, _, err := e.openNATS(ctx, cfg, "idem backfill")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := backfill.NewJetStream(nc)
	if err != nil {
		return err
	}
	if _, err := js.Stream(ctx, cfg.NATS.Stream); err != nil {
		return fmt.Errorf("stream %s: %w: run 'idem streams' (or start 'idem serve') first", cfg.NATS.Stream, err)
	}
	var dlq *backfill.DeadLetters
	if f.wait {
		// Started before publishing, so every dead letter of this run is seen.
		dlq, err = backfill.WatchDeadLetters(ctx, js, cfg, dataset, runID)
		defer dlq.Stop()
		if err != nil {
			fmt.Fprintf(e.errOut, "idem: cannot follow the dead-letter stream %s (%v): a delivery that crashed will show as started until --timeout\n", cfg.NATS.DLQStream, err)
		}
	}

	tctx, tracer, stopTracing, err := e.startTracing(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopTracing()
	// One span for the backfill's publishes; each event's publish span is
	// its child, and each event carries its traceparent.
	tctx, span := tracer.Start(tctx, "backfill "+dataset, trace.WithAttributes(attribute.Int("idem.events", res.ToPublish)))
	prog := newBFProgress(e.errOut)
	t1 := time.Now()
	pubErr := backfill.Publish(tctx, js, cfg, res, perSecond, func(done int) {
		prog.show(time.Now(), done == res.ToPublish, func(tty bool) string {
			return bfProgressLine(tty, "published", done, res.ToPublish, nil, t1, time.Now())
		})
	})
	span.End()
	prog.end()
	took := time.Since(t1)
	res.PublishMS = took.Milliseconds()
	if pubErr != nil {
		fmt.Fprintf(e.errOut, "idem: published %d of %d event(s) with run_id %s, then: %v\n"+
			"To publish the rest, run the same command with --run-id %s.\n", res.Published, res.ToPublish, runID, pubErr, runID)
		return ErrReported
	}
	if !f.asJSON {
		fmt.Fprintf(e.out, "published %d event(s) with run_id %s in %s (%.0f/s), each confirmed by JetStream", res.Published,
			runID, took.Round(time.Millisecond), float64(res.Published)/max(took.Seconds(), 1e-9))
		if res.Duplicates > 0 {
			fmt.Fprintf(e.out, "; %d were duplicates JetStream already held", res.Duplicates)
		}
		fmt.Fprintln(e.out)
	}
	if !f.wait {
		if f.asJSON {
			return printJSON(e.out, res)
		}
		if step == "day" {
			fmt.Fprintf(e.out, "follow with: idem audit status %s --from %s --to %s (or backfill with --wait)\n", dataset, f.from, f.to)
		} else {
			fmt.Fprintf(e.out, "follow with: idem backfill %s --from %s --to %s --dry-run (or backfill with --wait)\n", dataset, f.from, f.to)
		}
		return nil
	}
	rs := backfill.FollowResults(ctx, follower(js, cfg), res)
	defer rs.Stop()
	if err := waitBackfill(ctx, e, pool, cfg, res, dlq, rs, t1, f.timeout); err != nil {
		return err
	}
	if err := rs.Err(); err != nil {
		fmt.Fprintf(e.errOut, "idem: the results stream could not be followed (%v): outcomes came from the audit table\n", err)
	}
	return reportBackfill(e, res, f.asJSON)
}

// outdatedRange is the first and last outdated partition of dataset
// ("" when none is), --reprocess outdated's range without --from and --to.
func outdatedRange(ctx context.Context, cfg *config.Config, dataset string) (string, string, error) {
	pool, err := connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return "", "", err
	}
	defer pool.Close()
	rep, err := backfill.FindOutdated(ctx, pool, cfg, dataset, "", "")
	if err != nil || len(rep.Outdated) == 0 {
		return "", "", err
	}
	return rep.Outdated[0].Partition, rep.Outdated[len(rep.Outdated)-1].Partition, nil
}

// backfillPartitions reads --step, --from and --to for a dataset of type
// typ: the canonical partition keys from..to inclusive, and the step.
func backfillPartitions(typ schemas.PartitionType, step, from, to string) ([]string, string, error) {
	want, ok := backfill.StepOf(typ)
	if !ok {
		return nil, "", &UsageError{fmt.Errorf("the dataset's partitions are %s keys, which cannot be enumerated: publish them one by one with 'idem publish'", typ)}
	}
	if step == "" {
		step = string(want)
	}
	var f, t time.Time
	switch want {
	case backfill.Day:
		if step != string(backfill.Day) {
			return nil, "", &UsageError{fmt.Errorf("--step %s: the dataset's partitions are days (partition_type date): use --step day", step)}
		}
		var err error
		if f, t, err = dateRange(from, to); err != nil {
			return nil, "", err
		}
	case backfill.Hour:
		if step != string(backfill.Hour) {
			return nil, "", &UsageError{fmt.Errorf("--step %s: the dataset's partitions are hours (partition_type timestamp): use --step hour", step)}
		}
		var err error
		if f, err = hourBound(from, "--from", false); err != nil {
			return nil, "", err
		}
		if t, err = hourBound(to, "--to", true); err != nil {
			return nil, "", err
		}
		if t.Before(f) {
			return nil, "", &UsageError{fmt.Errorf("--to %s is before --from %s", to, from)}
		}
	}
	if n := backfill.Span(want, f, t); n > backfill.MaxPartitions {
		return nil, "", &UsageError{fmt.Errorf("--from %s --to %s spans %d partitions; at most %d per backfill", from, to, n, backfill.MaxPartitions)}
	}
	keys, err := backfill.Keys(want, f, t)
	if err != nil {
		return nil, "", &UsageError{err}
	}
	return keys, step, nil
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

// printPlan is the dry run's answer: one line per partition, then the counts.
func printPlan(e *env, res *backfill.Result, asJSON bool) error {
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
func planSummary(res *backfill.Result) string {
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
		for _, s := range []string{backfill.StatusMissing, backfill.StatusFailed, backfill.StatusStale, backfill.StatusOutdated,
			backfill.StatusSuccess, backfill.StatusRunning, backfill.StatusRetrying} {
			if by[s] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", by[s], s))
			}
		}
		if len(parts) == 0 {
			return n, ""
		}
		return n, " (" + strings.Join(parts, ", ") + ")"
	}
	pub, pubBy := count(backfill.ActionPublish)
	skip, skipBy := count(backfill.ActionSkip)
	first, last := res.Partitions[0].Partition, res.Partitions[len(res.Partitions)-1].Partition
	if first > last { // --reverse; canonical keys sort by time
		first, last = last, first
	}
	return fmt.Sprintf("%d partition(s) of %s from %s to %s: %d to publish%s, %d skipped%s (--reprocess %s)",
		res.Planned, res.Dataset, first, last, pub, pubBy, skip, skipBy, res.Reprocess)
}

// waitBackfill follows the loads with a progress line on stderr. loadStart
// is when the first event went out: loads began then, so the ETA
// extrapolates from it.
func waitBackfill(ctx context.Context, e *env, db audit.Querier, cfg *config.Config, res *backfill.Result, dlq *backfill.DeadLetters, rs *backfill.Results, loadStart time.Time, timeout time.Duration) error {
	prog := newBFProgress(e.errOut)
	defer prog.end()
	return backfill.Wait(ctx, db, cfg, res, dlq, rs, timeout, func(c backfill.Counts, final bool) {
		prog.show(time.Now(), final, func(tty bool) string {
			return bfProgressLine(tty, "loaded", c.Loaded+c.Failed+c.Cancelled, res.ToPublish, &c, loadStart, time.Now())
		})
	})
}

// reportBackfill prints what did not load and the summary; exit 1 when a
// partition failed or is still pending.
func reportBackfill(e *env, res *backfill.Result, asJSON bool) error {
	sum := res.Wait
	if asJSON {
		if err := printJSON(e.out, res); err != nil {
			return err
		}
	} else {
		tb := &table{headers: []string{"PARTITION", "STATUS", "ATTEMPTS", "DLQ", "ERROR"}}
		for _, p := range res.Partitions {
			if o := p.Outcome; o != nil && o.Status != audit.StatusSuccess && o.Status != audit.StatusCancelled {
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
		case sum.Cancelled > 0:
			line += fmt.Sprintf(", %d cancelled", sum.Cancelled)
		}
		fmt.Fprintln(e.out, line)
	}
	switch {
	case sum.Cancelled > 0:
		fmt.Fprintf(e.errOut, "idem: backfill %s %s: %d of %d partitions loaded, %d cancelled\n",
			res.RunID, sum.Cancellation, sum.Loaded, res.Published, sum.Cancelled)
		return ErrReported
	case sum.Failed > 0:
		return ErrReported
	case sum.Pending > 0 && sum.TimedOut:
		return &ExitError{Code: 3}
	case sum.Pending > 0:
		return ErrReported
	}
	return nil
}

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
func bfProgressLine(tty bool, verb string, done, total int, c *backfill.Counts, start, now time.Time) string {
	eta := "?"
	if done >= total {
		eta = "0s"
	} else if done > 0 {
		eta = backfill.CompactDuration(time.Duration(float64(now.Sub(start)) / float64(done) * float64(total-done)))
	}
	count := done
	if c != nil {
		count = c.Loaded
	}
	if !tty {
		s := fmt.Sprintf("backfill: %d/%d %s", count, total, verb)
		if c != nil {
			s += fmt.Sprintf(", %d failed, %d retrying, %d pending", c.Failed, c.Retrying, total-done)
			if c.Cancelled > 0 {
				s += fmt.Sprintf(", %d cancelled", c.Cancelled)
			}
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
		s += fmt.Sprintf("  %d failed  %d retrying", c.Failed, c.Retrying)
		if c.Cancelled > 0 {
			s += fmt.Sprintf("  %d cancelled", c.Cancelled)
		}
	}
	return s + "  ETA " + eta
}
