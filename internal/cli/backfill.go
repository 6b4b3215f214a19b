package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

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
		MaxAttempts: d.MaxAttempts(), Delay: d.RetryDelay.Std(), MaxDelay: d.MaxRetryDelay.Std()}}
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
		case l.Attempt >= p.retry.MaxAttempts:
			return planFailed, fmt.Sprintf("failed attempt %d of %d: dead-lettered", l.Attempt, p.retry.MaxAttempts)
		case l.Age < p.retry.Backoff(l.Attempt, 1)+p.ackWait:
			return planRetrying, fmt.Sprintf("transient failure on attempt %d of %d: JetStream redelivers it", l.Attempt, p.retry.MaxAttempts)
		}
		return planFailed, fmt.Sprintf("transient failure on attempt %d of %d and no redelivery for %s", l.Attempt, p.retry.MaxAttempts, compactDuration(l.Age))
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
	if _, err := eventMsg(cfg, schemas.PartitionReady{Dataset: dataset, Partition: keys[0], RunID: runID}); err != nil {
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
