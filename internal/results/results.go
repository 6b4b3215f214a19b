// Package results is the format of every event's terminal outcome: loaded,
// skipped (its run had already loaded), dead-lettered, or rejected by its
// checks. idem publishes one result per outcome on
// <prefix>.<dataset> of the results stream; `idem publish --wait` and
// `idem backfill --wait` follow it (package resultstream publishes and
// follows it; this package links no NATS client, so the handlers can
// build a result) with NATS access only, and a
// scheduler can subscribe to it (a Dagster sensor reporting
// materializations).
//
// A load's result is written in the load's transaction (an outbox row,
// published by internal/relay), so a committed load always gets one and a
// rolled-back load never does; a skip's by the statement that decides the
// skip, so it commits with it; a dead letter's after the dead-letter
// stream acknowledged it. Each carries
// the event's stream sequence in a header, which is what a waiter matches.
package results

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Statuses of a result.
const (
	StatusLoaded       = "loaded"        // the load committed
	StatusSkipped      = "skipped"       // the run had already loaded: nothing done
	StatusDeadLettered = "dead_lettered" // fatal, or out of retries: in the dead-letter stream
	StatusRejected     = "rejected"      // the checks refused the partition: dead-lettered, kind check
)

// Headers of a result message.
const (
	HeaderEventStream = "Idem-Event-Stream"
	HeaderEventSeq    = "Idem-Event-Seq"
	HeaderStatus      = "Idem-Status"
)

// Rows counts what a load wrote.
type Rows struct {
	Inserted int64 `json:"inserted"`
	Updated  int64 `json:"updated"`
	// Deleted is -1 when the load does not count it (a TRUNCATE).
	Deleted int64 `json:"deleted"`
}

// Result is one event's terminal outcome, the body of a result message.
type Result struct {
	Pipeline  string `json:"pipeline"`
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
	RunID     string `json:"run_id"`
	Status    string `json:"status"`
	// Rows is what the load wrote (loaded; for skipped, the run's load).
	Rows *Rows `json:"rows,omitempty"`
	// Attempts is the number of loads this event ran (0 when none ran: an
	// invalid event, or a skip decided before a load).
	Attempts int `json:"attempts"`
	// ErrorKind and Error say why it was dead-lettered or rejected.
	ErrorKind string `json:"error_kind,omitempty"`
	Error     string `json:"error,omitempty"`
	// FailedChecks names the checks that refused the partition (rejected).
	FailedChecks []string `json:"failed_checks,omitempty"`
	// Stream and StreamSeq locate the event; MsgID is its Nats-Msg-Id.
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
	MsgID     string `json:"msg_id,omitempty"`
	// AuditID is the attempt's row in idem.pipeline_audit (loaded, skipped).
	AuditID int64 `json:"audit_id,omitempty"`
	// LoadedBy, for a skip, is the attempt that loaded the run (its Rows
	// are that load's).
	LoadedBy int64 `json:"loaded_by_audit_id,omitempty"`
	// DeadLetterSeq is the dead letter's sequence in its stream.
	DeadLetterSeq uint64 `json:"dead_letter_seq,omitempty"`
	// PublishedAt is when the events stream stored the event; FinishedAt
	// when the outcome was reached; Seconds the time between.
	PublishedAt *time.Time `json:"published_at,omitempty"`
	FinishedAt  time.Time  `json:"finished_at"`
	Seconds     float64    `json:"seconds"`
}

// Done says whether the outcome is what the publisher asked for: loaded,
// or already loaded by that run.
func (r Result) Done() bool { return r.Status == StatusLoaded || r.Status == StatusSkipped }

// Finish sets FinishedAt and Seconds from PublishedAt.
func (r *Result) Finish(at time.Time) {
	r.FinishedAt = at.UTC()
	if r.PublishedAt != nil && !r.PublishedAt.IsZero() {
		p := r.PublishedAt.UTC()
		r.PublishedAt = &p
		r.Seconds = at.Sub(p).Seconds()
	} else {
		r.PublishedAt = nil
	}
}

// Subject is where the results of dataset go: <prefix>.<dataset>.
func Subject(prefix, dataset string) string { return prefix + "." + dataset }

// MsgID is a result's Nats-Msg-Id: one per attempt for loads and skips
// (its audit id and the token of the outbox row that holds the result),
// one per event for a dead letter (auditID 0), so a result published
// twice inside the duplicate window is stored once. The token tells apart
// two attempts with one audit id: after a failover that lost commits, a
// new attempt can be given the audit id of a lost one, whose result may
// already be in the stream.
func MsgID(stream string, seq uint64, auditID int64, token string) string {
	b := make([]byte, 0, len("idem-result:")+len(stream)+2*21+len(":dead-letter")+1+len(token))
	b = append(append(append(b, "idem-result:"...), stream...), ':')
	b = append(strconv.AppendUint(b, seq, 10), ':')
	if auditID == 0 {
		return string(append(b, "dead-letter"...))
	}
	b = strconv.AppendInt(b, auditID, 10)
	if token != "" {
		b = append(append(b, ':'), token...)
	}
	return string(b)
}

// Parse reads a result message's body.
func Parse(body []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(body, &r); err != nil {
		return Result{}, fmt.Errorf("results: a result that is not JSON: %w", err)
	}
	return r, nil
}
