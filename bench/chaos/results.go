package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// resultsStream is where idem publishes each event's terminal outcome.
const resultsStream = "IDEM_RESULTS"

// ResultFigures count the results stream against the audit and the
// dead-letter stream.
type ResultFigures struct {
	Loaded       int `json:"loaded"`        // "loaded" results read
	Skipped      int `json:"skipped"`       // "skipped" results read
	DeadLettered int `json:"dead_lettered"` // "dead_lettered" or "rejected" results read
	Missing      int `json:"missing"`       // committed loads without their result
	Doubled      int `json:"doubled"`       // an attempt's result stored more than once
	Orphans      int `json:"orphans"`       // results of loads the warehouse does not hold
	OrphansLost  int `json:"orphans_lost"`  // of which excused: a failover lost commits
	DLQMissing   int `json:"dlq_missing"`   // dead letters without a result (allowed: counted)
	DLQDoubled   int `json:"dlq_doubled"`   // a dead letter's result stored twice
	SkipsMissing int `json:"skips_missing"` // skipped attempts without a result (a crash right after the skip)
	BadHeaders   int `json:"bad_headers"`   // a result whose headers do not match its body
	Unanswered   int `json:"unanswered"`
	DoubledLost  int `json:"doubled_lost"` // of a load a failover lost and its reload, under one audit id    // settled events without any result
}

// result is what the checker reads of a result message: spelled out here,
// not imported, so a renamed field fails the campaign.
type result struct {
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
	RunID     string `json:"run_id"`
	Status    string `json:"status"`
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
	AuditID   int64  `json:"audit_id"`
	DLQSeq    uint64 `json:"dead_letter_seq"`
}

// attemptKey names one attempt: audit ids alone may be reused by a
// promoted standby that lost the last ones.
type attemptKey struct {
	id            int64
	dataset, part string
	run           string
	seq           uint64
}

// readResults reads every message of the results stream.
func readResults(ctx context.Context, js jetstream.JetStream, r *Report) ([]result, error) {
	var out []result
	err := eachMsg(ctx, js, resultsStream, func(m *jetstream.RawStreamMsg) error {
		var res result
		if err := json.Unmarshal(m.Data, &res); err != nil {
			r.violate("result %d is not JSON: %v", m.Sequence, err)
			return nil
		}
		if m.Header.Get("Idem-Status") != res.Status || m.Header.Get("Idem-Event-Seq") != strconv.FormatUint(res.StreamSeq, 10) ||
			m.Header.Get("Idem-Event-Stream") != res.Stream {
			r.Check.Results.BadHeaders++
			r.violate("result %d: headers %v do not match its body %+v", m.Sequence, m.Header, res)
		}
		out = append(out, res)
		return nil
	})
	return out, err
}

// checkResults: every committed load has exactly one "loaded" result; no
// result names a load the warehouse does not hold, unless a failover lost
// it; a dead letter has at most one result, and every result of one names
// a dead letter. It waits for the outbox to drain first (the relays publish
// results after their commit).
func checkResults(ctx context.Context, db querier, js jetstream.JetStream, h history, r *Report) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var pending int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL AND result IS NOT NULL").Scan(&pending); err != nil {
			return fmt.Errorf("chaos: read outbox: %w", err)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			r.violate("%d results unpublished in the outbox after the relays stopped", pending)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	rs, err := readResults(ctx, js, r)
	if err != nil {
		return err
	}
	f := &r.Check.Results
	lossy := slices.ContainsFunc(h.faults, func(x *fault) bool { return x.Kind == FaultFailover })

	loaded := map[attemptKey]int{}
	skipped := map[attemptKey]int{}
	dlq := map[uint64]int{}
	answered := map[uint64]bool{} // event sequences with at least one result
	for _, res := range rs {
		answered[res.StreamSeq] = true
		k := attemptKey{res.AuditID, res.Dataset, res.Partition, res.RunID, res.StreamSeq}
		switch res.Status {
		case "loaded":
			f.Loaded++
			loaded[k]++
		case "skipped":
			f.Skipped++
			skipped[k]++
		case "dead_lettered", "rejected":
			f.DeadLettered++
			dlq[res.StreamSeq]++
		default:
			r.violate("result with an unknown status %q: %+v", res.Status, res)
		}
	}
	rows, err := db.Query(ctx, `SELECT id, task_id, partition_key, run_id, stream_seq, status FROM idem.pipeline_audit
		WHERE dag_id = $1 AND status IN ('success', 'skipped') AND stream_seq IS NOT NULL`, pipeline)
	if err != nil {
		return fmt.Errorf("chaos: read audit: %w", err)
	}
	committed := map[attemptKey]bool{}
	for rows.Next() {
		var k attemptKey
		var seq int64
		var status string
		if err := rows.Scan(&k.id, &k.dataset, &k.part, &k.run, &seq, &status); err != nil {
			return err
		}
		k.seq = uint64(seq)
		if status == "skipped" {
			if skipped[k] == 0 {
				f.SkipsMissing++
				if !answered[k.seq] {
					// What a waiter follows: the event, whichever attempt answers.
					f.Unanswered++
					r.violate("event %d (%s %s run %s) was skipped and has no result at all: its waiter would never hear", k.seq, k.dataset, k.part, k.run)
				}
			}
			continue
		}
		committed[k] = true
		switch n := loaded[k]; {
		case n == 0:
			f.Missing++
			if f.Missing <= 5 {
				r.violate("the load of %s %s run %s (audit %d, event %d) committed and has no result", k.dataset, k.part, k.run, k.id, k.seq)
			}
		case n > 1 && lossy:
			// A load a failover lost and its reload by the re-verification
			// can share an audit id (the promoted standby's sequence starts
			// where its copy ended) and so a message id; past the
			// duplicate window both results stay. Each said something true.
			f.DoubledLost++
		case n > 1:
			f.Doubled++
			r.violate("the load of %s %s run %s (audit %d) has %d results", k.dataset, k.part, k.run, k.id, n)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for k := range loaded {
		if committed[k] {
			continue
		}
		f.Orphans++
		if lossy {
			f.OrphansLost++
			continue
		}
		if f.Orphans <= 5 {
			r.violate("a result says %s %s run %s loaded (audit %d, event %d), and the warehouse holds no such load: a rolled-back load was announced",
				k.dataset, k.part, k.run, k.id, k.seq)
		}
	}
	if f.Missing > 5 {
		r.violate("... %d committed loads without a result in all", f.Missing)
	}
	if f.DoubledLost > 0 {
		r.note("%d loads have two results: a load a failover lost and its reload, which got the same audit id", f.DoubledLost)
	}
	if f.OrphansLost > 0 {
		r.note("%d loaded results name loads a failover lost (loaded again by the re-verification, with results of their own)", f.OrphansLost)
	}
	dls, err := readDeadLetters(ctx, js)
	if err != nil {
		return err
	}
	letters := map[uint64]bool{}
	for _, dl := range dls {
		seq, _ := strconv.ParseUint(dl.origSeq, 10, 64)
		letters[seq] = true
		switch n := dlq[seq]; {
		case n == 0:
			f.DLQMissing++
		case n > 1:
			f.DLQDoubled++
			r.violate("dead letter of event %d has %d results", seq, n)
		}
	}
	for seq := range dlq {
		if !letters[seq] {
			r.violate("a dead-lettered result names event %d, which has no dead letter", seq)
		}
	}
	if f.DLQMissing > 0 {
		r.note("%d dead letters without a result (published after the dead letter's PubAck, given up under a NATS fault; a waiter reads the dead-letter stream too)", f.DLQMissing)
	}
	if f.SkipsMissing > 0 {
		r.note("%d skipped attempts without a result (the skip commits before its result is written: a crash, an outage or a failover in between leaves the message unacked, and its redelivery is skipped with a result)", f.SkipsMissing)
	}
	return nil
}
