// Package backfill plans, publishes and follows a backfill: one event per
// partition of a range, chosen from the audit ledger (missing, failed,
// stale), published with JetStream's confirmation under one run_id, then
// followed through the audit table and the dead-letter stream until each
// partition has an outcome.
//
// It decides and reports in a Result; it never parses flags, prints or
// decides an exit code: that is the CLI's part (internal/cli).
package backfill

import (
	"fmt"
	"time"
)

// A partition's state before the backfill, as the plan sees it.
const (
	StatusMissing  = "missing"  // never attempted
	StatusSuccess  = "success"  // the latest attempt loaded it
	StatusFailed   = "failed"   // the latest attempt failed for good (dead-lettered) or long ago
	StatusStale    = "stale"    // `started` long ago and no load holds it: its process died
	StatusRunning  = "running"  // `started`, and alive or JetStream will redeliver it
	StatusRetrying = "retrying" // failed transiently, JetStream will redeliver it
)

// What the plan does with a partition.
const (
	ActionPublish = "publish"
	ActionSkip    = "skip"
)

// Partition is one line of the plan, then of the result.
type Partition struct {
	Partition string `json:"partition"`
	// Status is the partition's state before the backfill: missing, success,
	// outdated (with --reprocess outdated), failed, stale, running or
	// retrying.
	Status    string `json:"status"`
	LastRunID string `json:"last_run_id,omitempty"`
	Attempt   int    `json:"attempt,omitempty"`
	Error     string `json:"error,omitempty"`
	Action    string `json:"action"` // publish or skip
	Reason    string `json:"reason"`
	// Seq is the event's stream sequence once JetStream confirmed it.
	Seq       uint64 `json:"seq,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	// Outcome is the run's end for this partition, once waited for.
	Outcome *Outcome `json:"outcome,omitempty"`
}

// Outcome is where one published partition stands in this backfill's run.
type Outcome struct {
	// Status: success; failed (dead-lettered: fatal, exhausted or crashed);
	// or, still pending, queued (no attempt yet), started, retrying.
	Status   string `json:"status"`
	Final    bool   `json:"final"`
	Attempts int    `json:"attempts,omitempty"`
	Rows     *int64 `json:"rows,omitempty"`
	DLQ      string `json:"dlq,omitempty"` // fatal, exhausted or crashed
	Error    string `json:"error,omitempty"`
}

// Result is a backfill from end to end: the plan, what was published and,
// once waited for, how each partition ended. The caller fills in the request
// (Dataset to Planned); Plan, Publish and Wait fill in the rest.
type Result struct {
	Dataset    string       `json:"dataset"`
	From       string       `json:"from"`
	To         string       `json:"to"`
	Step       string       `json:"step"`
	Reprocess  string       `json:"reprocess"`
	RunID      string       `json:"run_id"`
	Force      bool         `json:"force"`
	DryRun     bool         `json:"dry_run"`
	Planned    int          `json:"planned"` // partitions in the range
	ToPublish  int          `json:"to_publish"`
	Published  int          `json:"published"`
	Duplicates int          `json:"duplicates"`
	PlanMS     int64        `json:"plan_ms"`
	PublishMS  int64        `json:"publish_ms"`
	Wait       *WaitSummary `json:"wait,omitempty"`
	Partitions []*Partition `json:"partitions"`
}

// WaitSummary counts the published partitions by outcome.
type WaitSummary struct {
	Loaded  int `json:"loaded"`
	Failed  int `json:"failed"`
	Pending int `json:"pending"`
	// Cancelled counts the partitions recorded cancelled (`idem backfill
	// cancel`); Cancellation says by whom, when and why.
	Cancelled    int    `json:"cancelled,omitempty"`
	Cancellation string `json:"cancellation,omitempty"`
	TimedOut     bool   `json:"timed_out"`
	// Interrupted: the wait was stopped (its context ended) before every
	// outcome.
	Interrupted bool  `json:"interrupted,omitempty"`
	ElapsedMS   int64 `json:"elapsed_ms"`
}

// NewRunID is a backfill's run id when none is given: backfill__<UTC time>.
func NewRunID(now time.Time) string {
	return "backfill__" + now.UTC().Format("20060102T150405.000Z")
}

// CompactDuration is 45s, 12m05s or 3h20m.
func CompactDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}
