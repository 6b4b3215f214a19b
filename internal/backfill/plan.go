package backfill

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/consumer"
	"github.com/idem-data/idem/internal/config"
	"github.com/idem-data/idem/schemas"
)

// MaxPartitions bounds one backfill: it refuses a typo that would plan a
// century of hours.
const MaxPartitions = 100_000

// Step is how far apart the partitions of a range are.
type Step string

const (
	Day  Step = "day"  // partition_type date
	Hour Step = "hour" // partition_type timestamp
)

// StepOf is the step of a dataset's partitions; ok is false for text
// partitions, which cannot be enumerated.
func StepOf(t schemas.PartitionType) (s Step, ok bool) {
	switch t {
	case schemas.PartitionDate, "":
		return Day, true
	case schemas.PartitionHour:
		return Hour, true
	}
	return "", false
}

// Span counts the partitions from..to inclusive, a step apart; from and to
// are on the step (midnight, or the hour, in UTC).
func Span(step Step, from, to time.Time) int {
	if step == Hour {
		return int(to.Sub(from)/time.Hour) + 1
	}
	return int(to.Sub(from).Hours()/24) + 1
}

// Keys lists the canonical partition keys from..to inclusive, a step apart,
// as the consumer records them. Callers bound Span by MaxPartitions first.
func Keys(step Step, from, to time.Time) ([]string, error) {
	keys := make([]string, 0, max(Span(step, from, to), 0))
	if step == Hour {
		for h := from; !h.After(to); h = h.Add(time.Hour) {
			p, err := schemas.ParsePartition(schemas.PartitionHour, h.Format(time.RFC3339))
			if err != nil {
				return nil, err
			}
			keys = append(keys, p.Key)
		}
		return keys, nil
	}
	for d := from; !d.After(to); d = d.AddDate(0, 0, 1) {
		keys = append(keys, d.Format(time.DateOnly))
	}
	return keys, nil
}

// Reprocess is which partitions a backfill republishes. Outdated: those
// whose latest load ran another definition (FindOutdated).
type Reprocess struct{ Missing, Failed, All, Outdated bool }

func (r Reprocess) String() string {
	if r.All {
		return "all"
	}
	var w []string
	if r.Missing {
		w = append(w, "missing")
	}
	if r.Failed {
		w = append(w, "failed")
	}
	if r.Outdated {
		w = append(w, "outdated")
	}
	return strings.Join(w, ",")
}

// wants says whether a partition in state status is republished. A partition
// some delivery still owns (running, retrying) never is: that would load it
// twice at once for nothing.
func (r Reprocess) wants(status string) bool {
	switch status {
	case StatusRunning, StatusRetrying:
		return false
	case StatusMissing:
		return r.Missing || r.All
	case StatusFailed, StatusStale:
		return r.Failed || r.All
	case StatusOutdated:
		return r.Outdated || r.All
	}
	return r.All
}

// Plan reads each partition's latest attempt (keys, canonical, in the order
// to publish) and decides its action into res.
func Plan(ctx context.Context, db audit.Querier, cfg *config.Config, res *Result, keys []string, rp Reprocess) error {
	t0 := time.Now()
	latest, err := audit.LatestAttempts(ctx, db, cfg.Pipeline, res.Dataset, keys)
	if err != nil {
		return err
	}
	var outdated map[string]OutdatedPartition
	if rp.Outdated {
		if outdated, err = outdatedIn(ctx, db, cfg, res.Dataset, keys); err != nil {
			return err
		}
	}
	policy := newPolicy(cfg, cfg.Datasets[res.Dataset])
	for _, l := range latest {
		p := &Partition{Partition: l.Partition, LastRunID: l.RunID, Attempt: l.Attempt, Error: l.Error, Action: ActionSkip}
		p.Status, p.Reason = policy.state(l)
		if o, ok := outdated[l.Partition]; ok && p.Status == StatusSuccess {
			p.Status, p.Reason = StatusOutdated, o.Reason
		}
		if rp.wants(p.Status) {
			p.Action = ActionPublish
			res.ToPublish++
		}
		res.Partitions = append(res.Partitions, p)
	}
	res.PlanMS = time.Since(t0).Milliseconds()
	return nil
}

// policy turns a partition's latest attempt into its plan state, from the
// dataset's delivery budget and the consumer's ack wait.
type policy struct {
	ackWait time.Duration
	retry   consumer.Retry
}

func newPolicy(cfg *config.Config, d *config.Dataset) policy {
	return policy{ackWait: cfg.NATS.AckWait.Std(), retry: consumer.Retry{
		MaxAttempts: d.MaxAttempts(), Delay: d.RetryDelay.Std(), MaxDelay: d.MaxRetryDelay.Std()}}
}

// state classifies the latest attempt:
//   - started: running while a load holds the partition's lock, or for twice
//     the ack wait (JetStream redelivers a dead one); stale after that;
//   - failed: for good after a fatal error or the last allowed delivery;
//     retrying while its redelivery is due (its backoff plus the ack wait),
//     failed once that is long overdue.
func (p policy) state(l audit.LatestAttempt) (status, reason string) {
	switch l.Status {
	case audit.StatusMissing:
		return StatusMissing, "never attempted"
	case audit.StatusSuccess:
		return StatusSuccess, "loaded by run " + l.RunID
	case audit.StatusCancelled:
		// Not a failure, and not loaded by that run: missing, as far as a
		// new backfill is concerned.
		return StatusMissing, "run " + l.RunID + " was " + l.Error
	case audit.StatusStarted:
		switch {
		case l.Locked:
			return StatusRunning, "a load holds the partition now"
		case l.Age < 2*p.ackWait:
			return StatusRunning, "started " + CompactDuration(l.Age) + " ago; if its process died JetStream redelivers it"
		}
		return StatusStale, "started " + CompactDuration(l.Age) + " ago and no load holds the partition: its process died"
	case audit.StatusFailed:
		switch {
		case l.ErrorKind == audit.KindFatal:
			return StatusFailed, fmt.Sprintf("fatal error on attempt %d: dead-lettered", l.Attempt)
		case l.Attempt >= p.retry.MaxAttempts:
			return StatusFailed, fmt.Sprintf("failed attempt %d of %d: dead-lettered", l.Attempt, p.retry.MaxAttempts)
		case l.Age < p.retry.Backoff(l.Attempt, 1)+p.ackWait:
			return StatusRetrying, fmt.Sprintf("transient failure on attempt %d of %d: JetStream redelivers it", l.Attempt, p.retry.MaxAttempts)
		}
		return StatusFailed, fmt.Sprintf("transient failure on attempt %d of %d and no redelivery for %s", l.Attempt, p.retry.MaxAttempts, CompactDuration(l.Age))
	}
	return StatusFailed, "unknown audit status " + l.Status
}
