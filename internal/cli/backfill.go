package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/schemas"
)

const (
	// backfillWindow bounds the publishes waiting for their PubAck: enough to
	// keep the server busy, few enough that a failure leaves little in doubt.
	backfillWindow = 256
	// backfillPubAckTimeout bounds the wait for one PubAck, as publishEvent's.
	backfillPubAckTimeout = 10 * time.Second
	// maxBackfillPartitions refuses a typo that would plan a century of hours.
	maxBackfillPartitions = 100_000
	// backfillPoll is how often --wait reads the audit table.
	backfillPoll = time.Second
	// backfillPlainEvery paces progress lines when stderr is not a terminal.
	backfillPlainEvery = 10 * time.Second
)

// A partition's state before the backfill, as the plan sees it.
const (
	planMissing  = "missing"  // never attempted
	planSuccess  = "success"  // the latest attempt loaded it
	planFailed   = "failed"   // the latest attempt failed for good (dead-lettered) or long ago
	planStale    = "stale"    // `started` long ago and no load holds it: its process died
	planRunning  = "running"  // `started`, and alive or JetStream will redeliver it
	planRetrying = "retrying" // failed transiently, JetStream will redeliver it
)

// reprocess is which partitions a backfill republishes.
type reprocess struct{ missing, failed, all bool }

func parseReprocess(s string) (reprocess, error) {
	var r reprocess
	for _, w := range strings.Split(s, ",") {
		switch strings.TrimSpace(w) {
		case "missing":
			r.missing = true
		case "failed":
			r.failed = true
		case "all":
			r.all = true
		default:
			return r, &UsageError{fmt.Errorf("--reprocess %q: want a comma-separated list of missing, failed, all", s)}
		}
	}
	return r, nil
}

func (r reprocess) String() string {
	if r.all {
		return "all"
	}
	var w []string
	if r.missing {
		w = append(w, "missing")
	}
	if r.failed {
		w = append(w, "failed")
	}
	return strings.Join(w, ",")
}

// wants says whether a partition in state status is republished. A partition
// some delivery still owns (running, retrying) never is: that would load it
// twice at once for nothing.
func (r reprocess) wants(status string) bool {
	switch status {
	case planRunning, planRetrying:
		return false
	case planMissing:
		return r.missing || r.all
	case planFailed, planStale:
		return r.failed || r.all
	}
	return r.all
}

// planPolicy turns a partition's latest attempt into its plan state, from the
// dataset's delivery budget and the consumer's ack wait.
type planPolicy struct {
	ackWait time.Duration
	retry   consumer.Retry
}

func newPlanPolicy(cfg *config.Config, d *config.Dataset) planPolicy {
	return planPolicy{ackWait: cfg.NATS.AckWait.Std(), retry: consumer.Retry{
		MaxDeliveries: d.MaxDeliveries(), Delay: d.RetryDelay.Std(), MaxDelay: d.MaxRetryDelay.Std()}}
}

// state classifies the latest attempt (see the command's help for the rules).
func (p planPolicy) state(l audit.LatestAttempt) (status, reason string) {
	switch l.Status {
	case audit.StatusMissing:
		return planMissing, "never attempted"
	case audit.StatusSuccess:
		return planSuccess, "loaded by run " + l.RunID
	case audit.StatusStarted:
		switch {
		case l.Locked:
			return planRunning, "a load holds the partition now"
		case l.Age < 2*p.ackWait:
			return planRunning, "started " + compactDuration(l.Age) + " ago; if its process died JetStream redelivers it"
		}
		return planStale, "started " + compactDuration(l.Age) + " ago and no load holds the partition: its process died"
	case audit.StatusFailed:
		switch {
		case l.ErrorKind == "fatal":
			return planFailed, fmt.Sprintf("fatal error on attempt %d: dead-lettered", l.Attempt)
		case l.Attempt >= p.retry.MaxDeliveries:
			return planFailed, fmt.Sprintf("failed attempt %d of %d: dead-lettered", l.Attempt, p.retry.MaxDeliveries)
		case l.Age < p.retry.Backoff(l.Attempt, 1)+p.ackWait:
			return planRetrying, fmt.Sprintf("transient failure on attempt %d of %d: JetStream redelivers it", l.Attempt, p.retry.MaxDeliveries)
		}
		return planFailed, fmt.Sprintf("transient failure on attempt %d of %d and no redelivery for %s", l.Attempt, p.retry.MaxDeliveries, compactDuration(l.Age))
	}
	return planFailed, "unknown audit status " + l.Status
}

// bfPartition is one line of the plan, then of the result.
type bfPartition struct {
	Partition string `json:"partition"`
	// Status is the partition's state before the backfill: missing, success,
	// failed, stale, running or retrying.
	Status    string `json:"status"`
	LastRunID string `json:"last_run_id,omitempty"`
	Attempt   int    `json:"attempt,omitempty"`
	Error     string `json:"error,omitempty"`
	Action    string `json:"action"` // publish or skip
	Reason    string `json:"reason"`
	// Seq is the event's stream sequence once JetStream confirmed it.
	Seq       uint64 `json:"seq,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	// Outcome is the run's end for this partition, with --wait.
	Outcome *bfOutcome `json:"outcome,omitempty"`
}

// bfOutcome is where one published partition stands in this backfill's run.
type bfOutcome struct {
	// Status: success; failed (dead-lettered: fatal, exhausted or crashed);
	// or, still pending, queued (no attempt yet), started, retrying.
	Status   string `json:"status"`
	Final    bool   `json:"final"`
	Attempts int    `json:"attempts,omitempty"`
	Rows     *int64 `json:"rows,omitempty"`
	DLQ      string `json:"dlq,omitempty"` // fatal, exhausted or crashed
	Error    string `json:"error,omitempty"`
}

// backfillResult is what --json prints: the plan with --dry-run, else the
// plan, what was published and, with --wait, how each partition ended.
type backfillResult struct {
	Dataset    string         `json:"dataset"`
	From       string         `json:"from"`
	To         string         `json:"to"`
	Step       string         `json:"step"`
	Reprocess  string         `json:"reprocess"`
	RunID      string         `json:"run_id"`
	Force      bool           `json:"force"`
	DryRun     bool           `json:"dry_run"`
	Planned    int            `json:"planned"` // partitions in the range
	ToPublish  int            `json:"to_publish"`
	Published  int            `json:"published"`
	Duplicates int            `json:"duplicates"`
	PlanMS     int64          `json:"plan_ms"`
	PublishMS  int64          `json:"publish_ms"`
	Wait       *bfWaitSummary `json:"wait,omitempty"`
	Partitions []*bfPartition `json:"partitions"`
}

type bfWaitSummary struct {
	Loaded   int  `json:"loaded"`
	Failed   int  `json:"failed"`
	Pending  int  `json:"pending"`
	TimedOut bool `json:"timed_out"`
	// Interrupted: the command was stopped (Ctrl-C) before every outcome.
	Interrupted bool  `json:"interrupted,omitempty"`
	ElapsedMS   int64 `json:"elapsed_ms"`
}

func backfillRunID(now time.Time) string {
	return "backfill__" + now.UTC().Format("20060102T150405.000Z")
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
are published; all publishes every partition. running and retrying partitions
are never published: a delivery owns them already.

A new run_id makes the consumer load a partition again even when an earlier
run loaded it, so --reprocess all needs no --force; --force only matters with
a --run-id that already succeeded (to resume an interrupted backfill, pass its
run_id: JetStream drops what it already holds within its duplicate window and
the consumer skips what already succeeded).

Events are validated as the consumer validates them, carry Nats-Msg-Id
<dataset>:<partition>:<run_id>, and each is confirmed by JetStream (PubAck)
before it counts as published; a bounded window of publishes is in flight.

--wait then follows the audit table until every published partition has an
outcome: success, or failed (a fatal error, the last allowed delivery, or a
dead letter of this run, for a crash). A progress bar goes to stderr on a
terminal, a line every 10s otherwise; then a table of what did not load.

Exit code: 0 ok; 1 if a partition failed, the wait timed out, or a publish
failed; 2 usage.`,
		Example: `  idem backfill orders --from 2026-01-01 --to 2026-12-31 --dry-run
  idem backfill orders --from 2026-01-01 --to 2026-12-31 --wait
  idem backfill orders --from 2026-03-01 --to 2026-03-31 --reprocess all --rate 20/s --wait --timeout 30m
  idem backfill clicks --from 2026-03-01T00 --to 2026-03-01T23 --step hour --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBackfill(cmd, e, args[0], f)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.from, "from", "", "first partition, YYYY-MM-DD (or YYYY-MM-DDTHH with --step hour) (required)")
	fl.StringVar(&f.to, "to", "", "last partition, inclusive (required)")
	fl.StringVar(&f.step, "step", "", "day or hour (default: the dataset's partition type)")
	fl.StringVar(&f.reprocess, "reprocess", "missing,failed", "which partitions to publish: missing, failed, all")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan, publish nothing")
	fl.StringVar(&f.rate, "rate", "", "publish at most N events per second: N/s, N/m or N/h (default unlimited)")
	fl.BoolVar(&f.reverse, "reverse", false, "publish the newest partition first")
	fl.BoolVar(&f.wait, "wait", false, "follow the loads until each partition succeeded or failed for good")
	fl.DurationVar(&f.timeout, "timeout", time.Hour, "with --wait, give up after this long (exit 1)")
	fl.BoolVar(&f.force, "force", false, "events carry force: rerun even if this run_id already succeeded")
	fl.StringVar(&f.runID, "run-id", "", "run id of every event (default backfill__<UTC timestamp>)")
	fl.BoolVar(&f.asJSON, "json", false, "print the plan (--dry-run) or the result as JSON")
	_ = c.MarkFlagRequired("from")
	_ = c.MarkFlagRequired("to")
	return c
}

func runBackfill(cmd *cobra.Command, e *env, dataset string, f backfillFlags) error {
	ctx := cmd.Context()
	cfg, err := e.validConfig()
	if err != nil {
		return err
	}
	if err := datasetArg(cfg, dataset); err != nil {
		return err
	}
	ds := cfg.Datasets[dataset]
	keys, step, err := backfillPartitions(ds.PartitionType, f.step, f.from, f.to)
	if err != nil {
		return err
	}
	rp, err := parseReprocess(f.reprocess)
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
		runID = backfillRunID(time.Now())
	}
	// Refuse a bad run_id before planning, as the consumer would.
	if _, err := backfillMsg(cfg, schemas.PartitionReady{Dataset: dataset, Partition: keys[0], RunID: runID}); err != nil {
		return &UsageError{err}
	}

	pool, err := connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	res := &backfillResult{Dataset: dataset, From: f.from, To: f.to, Step: step, Reprocess: rp.String(),
		RunID: runID, Force: f.force, DryRun: f.dryRun, Planned: len(keys)}
	if err := planBackfill(ctx, pool, cfg, res, keys, rp); err != nil {
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
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(backfillPubAckTimeout),
		jetstream.WithPublishAsyncMaxPending(2*backfillWindow))
	if err != nil {
		return err
	}
	if _, err := js.Stream(ctx, cfg.NATS.Stream); err != nil {
		return fmt.Errorf("stream %s: %w: run 'idem streams' (or start 'idem serve') first", cfg.NATS.Stream, err)
	}
	var dlq *bfDLQWatch
	if f.wait {
		// Started before publishing, so every dead letter of this run is seen.
		dlq = watchBackfillDLQ(ctx, js, cfg, dataset, runID, e.errOut)
		defer dlq.stop()
	}

	prog := newBFProgress(e.errOut)
	t1 := time.Now()
	pubErr := publishBackfill(ctx, js, cfg, res, perSecond, func(done int) {
		prog.show(time.Now(), done == res.ToPublish, func(tty bool) string {
			return bfProgressLine(tty, "published", done, res.ToPublish, nil, t1, time.Now())
		})
	})
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
	if err := waitBackfill(ctx, e, pool, cfg, res, dlq, t1, f.timeout); err != nil {
		return err
	}
	return reportBackfill(e, res, f.asJSON)
}

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

// backfillMsg builds the message publishEvent sends for ev: validated as the
// consumer validates it, with the canonical partition and Nats-Msg-Id.
func backfillMsg(cfg *config.Config, ev schemas.PartitionReady) (*nats.Msg, error) {
	subject := cfg.NATS.SubjectPrefix + "." + ev.Dataset
	body, err := ev.Marshal()
	if err != nil {
		return nil, err
	}
	dec, err := schemas.Decode(subject, body, lookup(cfg))
	if err != nil {
		return nil, err
	}
	ev.Partition = dec.Key.Key
	if body, err = ev.Marshal(); err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, ev.MsgID())
	return msg, nil
}

// publishBackfill publishes the plan's events in plan order, with up to
// backfillWindow waiting for their PubAck; one connection keeps that order in
// the stream. A partition counts as published only once its PubAck is in.
// On an error nothing more is sent, and the publishes in flight are still
// confirmed or not before it returns.
func publishBackfill(ctx context.Context, js jetstream.JetStream, cfg *config.Config, res *backfillResult, perSecond float64, progress func(done int)) error {
	type inFlight struct {
		p   *bfPartition
		ack jetstream.PubAckFuture
	}
	var window []inFlight
	// confirm takes the oldest publish's PubAck off the window: waiting for
	// it, or with wait false only if it is already in (so progress moves
	// while --rate spaces the publishes).
	confirm := func(wait bool) (bool, error) {
		f := window[0]
		var ack *jetstream.PubAck
		var err error
		if wait {
			t := time.NewTimer(backfillPubAckTimeout + time.Second)
			defer t.Stop()
			select {
			case ack = <-f.ack.Ok():
			case err = <-f.ack.Err():
			case <-t.C:
				err = fmt.Errorf("no PubAck within %s", backfillPubAckTimeout)
			case <-ctx.Done():
				err = ctx.Err()
			}
		} else {
			select {
			case ack = <-f.ack.Ok():
			case err = <-f.ack.Err():
			default:
				return false, nil
			}
		}
		window = window[1:]
		if err != nil {
			return true, fmt.Errorf("publish %s %s: %w", res.Dataset, f.p.Partition, err)
		}
		f.p.Seq, f.p.Duplicate = ack.Sequence, ack.Duplicate
		res.Published++
		if ack.Duplicate {
			res.Duplicates++
		}
		progress(res.Published)
		return true, nil
	}
	drain := func(first error) error {
		for len(window) > 0 {
			if _, err := confirm(true); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	pace := &bfPacer{}
	if perSecond > 0 {
		pace.every = time.Duration(float64(time.Second) / perSecond)
	}
	for _, p := range res.Partitions {
		if p.Action != "publish" {
			continue
		}
		msg, err := backfillMsg(cfg, schemas.PartitionReady{Dataset: res.Dataset, Partition: p.Partition, RunID: res.RunID, Force: res.Force})
		if err != nil {
			return drain(err)
		}
		for len(window) > 0 {
			done, err := confirm(len(window) == backfillWindow)
			if err != nil {
				return drain(err)
			}
			if !done {
				break
			}
		}
		if err := pace.wait(ctx); err != nil {
			return drain(err)
		}
		ack, err := js.PublishMsgAsync(msg, jetstream.WithExpectStream(cfg.NATS.Stream))
		if err != nil {
			return drain(fmt.Errorf("publish %s %s: %w", res.Dataset, p.Partition, err))
		}
		window = append(window, inFlight{p, ack})
	}
	return drain(nil)
}

// bfDeadLetter is what the dead-letter stream says about one partition.
type bfDeadLetter struct{ kind, err string }

// bfDLQWatch collects this run's dead letters for the dataset. It only matters
// for crashes: a fatal or exhausted failure is in the audit table too, a
// delivery that died is only in the dead-letter stream.
type bfDLQWatch struct {
	mu   sync.Mutex
	seen map[string]bfDeadLetter
	cc   jetstream.ConsumeContext
}

func watchBackfillDLQ(ctx context.Context, js jetstream.JetStream, cfg *config.Config, dataset, runID string, warn io.Writer) *bfDLQWatch {
	w := &bfDLQWatch{seen: map[string]bfDeadLetter{}}
	cons, err := js.OrderedConsumer(ctx, cfg.NATS.DLQStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{cfg.NATS.DLQSubjectPrefix + "." + dataset},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err == nil {
		w.cc, err = cons.Consume(func(m jetstream.Msg) {
			h := m.Headers()
			if h.Get(consumer.HeaderRunID) != runID {
				return
			}
			w.mu.Lock()
			w.seen[h.Get(consumer.HeaderPartition)] = bfDeadLetter{kind: h.Get(consumer.HeaderErrorKind), err: h.Get(consumer.HeaderError)}
			w.mu.Unlock()
		})
	}
	if err != nil {
		fmt.Fprintf(warn, "idem: cannot follow the dead-letter stream %s (%v): a delivery that crashed will show as started until --timeout\n", cfg.NATS.DLQStream, err)
	}
	return w
}

func (w *bfDLQWatch) get(partition string) (bfDeadLetter, bool) {
	if w == nil {
		return bfDeadLetter{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d, ok := w.seen[partition]
	return d, ok
}

func (w *bfDLQWatch) stop() {
	if w != nil && w.cc != nil {
		w.cc.Stop()
	}
}

// backfillOutcome decides where a published partition stands in the run: success;
// failed for good (a fatal error, the last allowed delivery, or a dead letter
// of this run, which is how a crash shows); or still pending.
func backfillOutcome(a audit.RunAttempt, dl bfDeadLetter, dead bool, maxDeliveries int) bfOutcome {
	o := bfOutcome{Attempts: a.Attempt, Rows: a.RowCount, Error: a.Error}
	switch {
	case a.Succeeded:
		o.Status, o.Final, o.Error = audit.StatusSuccess, true, ""
	case a.Status == audit.StatusFailed && a.ErrorKind == "fatal":
		o.Status, o.Final, o.DLQ = audit.StatusFailed, true, string(consumer.KindFatal)
	case a.Status == audit.StatusFailed && a.Attempt >= maxDeliveries:
		o.Status, o.Final, o.DLQ = audit.StatusFailed, true, string(consumer.KindExhausted)
	case dead:
		o.Status, o.Final, o.DLQ = audit.StatusFailed, true, dl.kind
		if o.Error == "" || dl.kind == string(consumer.KindCrashed) {
			o.Error = dl.err
		}
	case a.Status == audit.StatusFailed:
		o.Status = planRetrying
	case a.Status == audit.StatusStarted:
		o.Status = audit.StatusStarted
	default:
		o.Status = "queued"
	}
	return o
}

// waitBackfill polls the audit table until every published partition has a
// final outcome, the timeout passes, or ctx ends. loadStart is when the first
// event went out: loads began then, so the ETA extrapolates from it.
func waitBackfill(ctx context.Context, e *env, db audit.Querier, cfg *config.Config, res *backfillResult, dlq *bfDLQWatch, loadStart time.Time, timeout time.Duration) error {
	maxDeliveries := cfg.Datasets[res.Dataset].MaxDeliveries()
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
