package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-data/idem/audit"
)

// FaultJSStorageFull fills a JetStream stream: its MaxBytes is lowered to
// what it holds, with DiscardNew, so that every new message is refused
// ("maximum bytes exceeded", error 10077) as when a stream reaches its
// limit; held for a few seconds, then the stream's own config is put back.
// It is drawn only when Options.Kinds names it (extraFaultWeights).
const FaultJSStorageFull = "js_storage_full"

// storageFullTarget is one stream js_storage_full fills, and whose writes
// that refuses.
type storageFullTarget struct {
	name   string // the fault's Param names it: Param is the index
	stream string
	writes string
}

// storageFullTargets are the streams js_storage_full fills, one per fault,
// by Param. The relay publishes downstream events into the events stream,
// so "downstream" fills the same stream as "events": the two differ in the
// writes the campaign watches while it holds.
var storageFullTargets = []storageFullTarget{
	{"events", eventsStream, "the scheduler's publishes (the campaign's publisher)"},
	{"dlq", dlqStream, "idem's dead letters"},
	{"results", resultsStream, "idem's results (relay) and dead letters' results"},
	{"downstream", eventsStream, "the relay's downstream events (then:)"},
}

// Bounds of one js_storage_full: how long the stream stays full, and how
// long after the limit is lifted the outbox rows written before it may
// take to go out (the relay's backoff reaches a minute only after about
// a minute of failures; the hold is far shorter).
const (
	storageFullHoldMin  = 3 * time.Second
	storageFullHoldMax  = 6 * time.Second
	storageFullRecovery = 60 * time.Second
)

// downstreamDataset is the dataset `then:` runs after each load of
// downstreamOf when the campaign runs with downstream events
// (Options.downstream): a copy of its upstream's target, so the relay
// publishes one downstream event per upstream success into the events
// stream.
const (
	downstreamDataset = "replace_down"
	downstreamOf      = "replace"
	downstreamTarget  = "analytics.replace_down"
)

// downstream says whether the campaign configures the downstream dataset:
// asked for, or needed by js_storage_full, which fills the stream the relay
// publishes downstream events into.
func (o Options) downstream() bool {
	return o.Downstream || slices.Contains(o.Kinds, FaultJSStorageFull)
}

// storageFullFault draws a js_storage_full: its stream (Param) and hold.
func storageFullFault(f *fault, rng *rand.Rand) {
	f.Param = rng.IntN(len(storageFullTargets))
	f.Hold = storageFullHoldMin + time.Duration(rng.Int64N(int64(storageFullHoldMax-storageFullHoldMin)+1))
	f.Server = storageFullTargets[f.Param].label()
}

func (t storageFullTarget) label() string { return t.stream + ":" + t.name }

// storageFull fills f's stream for f.Hold through the nemesis's direct
// JetStream handle, then restores the stream's config as it was, and waits
// until the outbox rows written before the restore have gone out. f.Outage
// is how long the limit held; f.Resumed how long after the restore the
// outbox had caught up (0 if not within storageFullRecovery). A stream that
// stored a message while full is an error in f: the fault did not hold.
func (n *nemesis) storageFull(ctx, heal context.Context, f *fault) error {
	t := storageFullTargets[f.Param]
	f.Server = t.label()
	orig, held, changed, err := fillStream(heal, n.js, t.stream)
	switch {
	case err != nil && !changed:
		// The stream could not be read (an election, a server down for
		// the other nemesis): nothing was lowered, so nothing to heal.
		f.Skipped = "stream not reachable: " + err.Error()
		return nil
	case err != nil:
		// The update may have applied: put the limit back.
		if _, rerr := restoreStream(heal, n.js, orig, 0); rerr != nil {
			return errors.Join(err, rerr)
		}
		f.Skipped = "stream not filled: " + err.Error()
		return nil
	}
	full := time.Now()
	sleepCtx(ctx, f.Hold)
	gained, err := restoreStream(heal, n.js, orig, held)
	lifted := time.Now()
	f.Outage = lifted.Sub(full)
	if err != nil {
		return err
	}
	if gained > 0 {
		// JetStream's limit, not idem, failed the fault, and the stream
		// is whole again: the fault is void, the campaign goes on.
		f.Skipped = fmt.Sprintf("%s stored %d messages while full: the limit did not hold", t.stream, gained)
		return nil
	}
	f.Resumed = n.waitOutboxBefore(ctx, lifted)
	return nil
}

// fillStream sets stream's MaxBytes to the bytes it holds now (at least
// one byte: 0 means no limit), with DiscardNew, and returns the config to
// restore and the last sequence when it filled. DiscardNew refuses new
// messages and removes none: JetStream enforces a lowered MaxBytes by
// deleting the oldest only under DiscardOld. The stream is looked up for
// up to fillLookup (an election may be under way); changed reports
// whether, on an error, the update may have applied.
func fillStream(ctx context.Context, js jetstream.JetStream, stream string) (orig jetstream.StreamConfig, held uint64, changed bool, err error) {
	var info *jetstream.StreamInfo
	var s jetstream.Stream
	deadline := time.Now().Add(fillLookup)
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err = js.Stream(actx, stream)
		if err == nil {
			info, err = s.Info(actx)
		}
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return jetstream.StreamConfig{}, 0, false, fmt.Errorf("look up %s: %w", stream, err)
		}
		sleepCtx(ctx, time.Second)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	orig = info.Config
	cfg := orig
	cfg.Discard = jetstream.DiscardNew
	cfg.MaxBytes = max(int64(info.State.Bytes), 1)
	if _, err := js.UpdateStream(actx, cfg); err != nil {
		return orig, 0, true, fmt.Errorf("fill %s: %w", stream, err)
	}
	// In a cluster a message proposed before the update applied may still
	// commit after its answer: the sequence to hold is read once those
	// have landed.
	sleepCtx(actx, fillSettle)
	if info, err = s.Info(actx); err != nil {
		return orig, 0, true, fmt.Errorf("info of %s: %w", stream, err)
	}
	return orig, info.State.LastSeq, false, nil
}

// fillLookup is how long a full stream's fault tries to read the stream
// before it passes over the fault.
const fillLookup = 30 * time.Second

// fillSettle is how long after a stream's limit is lowered the messages
// proposed before it may still commit.
const fillSettle = 500 * time.Millisecond

// restoreStream puts orig back, retrying for a minute (the stream's
// config must not stay lowered), and returns how many messages the stream
// stored since it was filled at sequence held. That count is read once,
// before the first update is sent: an update that timed out may have
// applied all the same, and what the stream stored after it, under its
// own limit again, was no message stored while full.
func restoreStream(ctx context.Context, js jetstream.JetStream, orig jetstream.StreamConfig, held uint64) (uint64, error) {
	deadline := time.Now().Add(time.Minute)
	var last uint64
	read := false
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := js.Stream(actx, orig.Name)
		if err == nil && !read {
			var info *jetstream.StreamInfo
			if info, err = s.Info(actx); err == nil {
				last, read = info.State.LastSeq, true
			}
		}
		if err == nil {
			_, err = js.UpdateStream(actx, orig)
		}
		cancel()
		if err == nil {
			return last - min(last, held), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("restore %s: %w", orig.Name, err)
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

// waitOutboxBefore waits until every outbox row written before t has been
// published, and returns how long after t that was; 0 if not within
// storageFullRecovery.
func (n *nemesis) waitOutboxBefore(ctx context.Context, t time.Time) time.Duration {
	for time.Since(t) < storageFullRecovery && ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var left int
		err := n.db.QueryRow(qctx, `SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL AND created_at <= $1`, t).Scan(&left)
		cancel()
		if err == nil && left == 0 {
			return max(time.Since(t), time.Millisecond)
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	return 0
}

// JetStream's error codes for a message refused for want of storage: the
// stream's own limit (10077, "maximum bytes exceeded" under DiscardNew) and
// the account's or server's (10047). nats.go names neither.
const (
	jsErrStoreFailed           jetstream.ErrorCode = 10077
	jsErrInsufficientResources jetstream.ErrorCode = 10047
)

// storageRefused says err is JetStream refusing a message because the
// stream is at its limit (or the account's or server's storage is).
func storageRefused(err error) bool {
	if err == nil {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == jsErrStoreFailed || api.ErrorCode == jsErrInsufficientResources) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "maximum bytes exceeded") || strings.Contains(s, "insufficient resources")
}

// StorageFullFigures count, per stream, the js_storage_full faults and the
// writes they refused, as the campaign saw them.
type StorageFullFigures struct {
	// ByTarget counts the faults per target ("IDEM_DLQ:dlq").
	ByTarget map[string]int `json:"by_target"`
	// PublisherRefused: the campaign publisher's publishes refused
	// (retried until stored).
	PublisherRefused int `json:"publisher_refused"`
	// DeadLettersRefused: idem's dead-letter publishes refused (the
	// message nak'ed and dead-lettered on a later delivery).
	DeadLettersRefused int `json:"dead_letters_refused"`
	// DeadLetterResultsGivenUp: results of dead letters idem gave up on
	// (a waiter still finds the dead letter).
	DeadLetterResultsGivenUp int `json:"dead_letter_results_given_up"`
	// ResultsRetried, DownstreamRetried: outbox rows sent only after a
	// failed publish.
	ResultsRetried    int `json:"results_retried"`
	DownstreamRetried int `json:"downstream_retried"`
	// SlowestOutboxRecoverySeconds is the longest time from a limit lifted
	// to every outbox row written before it published.
	SlowestOutboxRecoverySeconds float64 `json:"slowest_outbox_recovery_seconds"`
}

// storageFullFigures fills r.StorageFull from the history, the replicas'
// logs (under logs) and the outbox, and reports a violation for a fault
// after which the outbox did not catch up by itself.
func storageFullFigures(ctx context.Context, db querier, logs string, pub *publisher, h history, r *Report) error {
	var fs []*fault
	for _, f := range h.faults {
		if f.Kind == FaultJSStorageFull && f.Skipped == "" {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	sf := &StorageFullFigures{ByTarget: map[string]int{}}
	r.StorageFull = sf
	for _, f := range fs {
		sf.ByTarget[storageFullTargets[f.Param].label()]++
		sf.SlowestOutboxRecoverySeconds = max(sf.SlowestOutboxRecoverySeconds, f.Resumed.Seconds())
		if f.Resumed == 0 && f.Err == "" {
			r.violate("js_storage_full of %s at %s: the outbox rows written before the limit was lifted were not all published within %s of it",
				f.Server, f.Start.Format(time.RFC3339), storageFullRecovery)
		}
		if f.Err != "" {
			r.violate("js_storage_full of %s at %s: %s", f.Server, f.Start.Format(time.RFC3339), f.Err)
		}
	}
	pub.mu.Lock()
	sf.PublisherRefused = pub.storageRefused
	pub.mu.Unlock()
	paths, _ := filepath.Glob(filepath.Join(logs, "replica*.log"))
	for _, p := range paths {
		dl, res := countRefusals(p)
		sf.DeadLettersRefused += dl
		sf.DeadLetterResultsGivenUp += res
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE result IS NOT NULL), count(*) FILTER (WHERE result IS NULL AND lineage IS NULL)
		FROM idem.outbox WHERE attempts > 1`).Scan(&sf.ResultsRetried, &sf.DownstreamRetried); err != nil {
		return fmt.Errorf("chaos: read outbox: %w", err)
	}
	var targets []string
	for t, k := range sf.ByTarget {
		targets = append(targets, fmt.Sprintf("%s %d", t, k))
	}
	slices.Sort(targets)
	r.note("js_storage_full: %s; refused: %d scheduler publishes, %d dead letters (%d dead-letter results given up); outbox rows sent after a refusal: %d results, %d downstream events; outbox caught up %.1fs after a lift at the slowest",
		strings.Join(targets, ", "), sf.PublisherRefused, sf.DeadLettersRefused, sf.DeadLetterResultsGivenUp,
		sf.ResultsRetried, sf.DownstreamRetried, sf.SlowestOutboxRecoverySeconds)
	return nil
}

// countRefusals counts the lines of an idem log where a dead letter, or a
// dead letter's result, was refused for want of storage.
func countRefusals(path string) (deadLetters, results int) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.Contains(l, "maximum bytes exceeded") && !strings.Contains(l, "insufficient resources") {
			continue
		}
		switch {
		case strings.Contains(l, "dead letter not published"):
			deadLetters++
		case strings.Contains(l, "result not published"):
			results++
		}
	}
	return deadLetters, results
}

// downstreamYAML is the downstream dataset's config, and thenYAML the
// `then:` line of its upstream; both empty without Options.downstream.
func downstreamYAML(o Options) string {
	if !o.downstream() {
		return ""
	}
	return fmt.Sprintf("  %s:\n    strategy: delete_insert\n    target: %s\n    partition_column: event_date\n"+
		"    source: SELECT %s FROM analytics.%s WHERE event_date = @partition\n"+
		"    retry_delay: %s\n    max_retry_delay: %s\n    timeout: 20s\n",
		downstreamDataset, downstreamTarget, columns, downstreamOf, RetryDelay, MaxRetryDelay)
}

func thenYAML(o Options, d dataset) string {
	if !o.downstream() || d.name != downstreamOf {
		return ""
	}
	return "    then: [" + downstreamDataset + "]\n"
}

// createDownstream creates the downstream dataset's target.
func createDownstream(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, `CREATE TABLE `+downstreamTarget+` (id bigint, event_date date NOT NULL, amount numeric(12,2), note text, version int);
CREATE INDEX ON `+downstreamTarget+` (event_date);`)
	if err != nil {
		return fmt.Errorf("chaos: create %s: %w", downstreamTarget, err)
	}
	return nil
}

// waitDownstream waits, with downstream events on, until the outbox is
// empty and the consumer has nothing pending, for at most bound: a
// downstream event the relay published late (its row backed off while the
// events stream was full) is loaded before the replicas stop.
func (c *campaign) waitDownstream(ctx context.Context, bound time.Duration) error {
	if !c.o.downstream() {
		return nil
	}
	deadline := time.Now().Add(bound)
	var last string
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var left int
		err := c.db.QueryRow(qctx, "SELECT count(*) FROM idem.outbox WHERE sent_at IS NULL").Scan(&left)
		var ci *jetstream.ConsumerInfo
		if err == nil {
			var cons jetstream.Consumer
			if cons, err = c.js.Consumer(qctx, eventsStream, durableConsumer); err == nil {
				ci, err = cons.Info(qctx)
			}
		}
		cancel()
		if err == nil {
			if left == 0 && ci.NumPending == 0 && ci.NumAckPending == 0 {
				return nil
			}
			last = fmt.Sprintf("%d outbox rows unpublished, consumer: %d pending, %d awaiting ack", left, ci.NumPending, ci.NumAckPending)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New(last)
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

// DownstreamFigures compare the downstream dataset with its upstream.
type DownstreamFigures struct {
	UpstreamLoads int `json:"upstream_loads"` // successes of the upstream
	Rows          int `json:"rows"`           // downstream outbox rows
	Unsent        int `json:"unsent"`         // of which never published
	Missing       int `json:"missing"`        // upstream successes without their outbox row
	LoadedOnce    int `json:"loaded_once"`    // upstream runs whose downstream run loaded exactly once
	NotOnce       int `json:"not_once"`       // upstream runs whose downstream run loaded 0 or 2+ times
	// TwiceLost are upstream runs whose downstream run loaded twice
	// because a failover lost the upstream load after the relay had
	// published its downstream event, and the re-verification's reload
	// published another (not in NotOnce).
	TwiceLost     int  `json:"twice_lost"`
	Unexpected    int  `json:"unexpected"` // downstream loads of a run the upstream never loaded
	TableEqualsUp bool `json:"table_equals_upstream"`
}

// downstreamRunsSQL opens the downstream checks ($1 the pipeline, $2 the
// upstream, $3 the downstream, $4 audit.ReverifyAttribute): up, the
// upstream's successes, reloaded when the re-verification wrote them; ob,
// their downstream outbox rows; down, each downstream run's successes (n)
// and attempts.
const downstreamRunsSQL = `
WITH up AS (SELECT id, partition_key, run_id, finished_at, coalesce(attributes->>$4 = 'true', false) AS reloaded
              FROM idem.pipeline_audit WHERE dag_id = $1 AND task_id = $2 AND status = 'success'),
     ob AS (SELECT audit_id, sent_at FROM idem.outbox WHERE dataset = $3 AND result IS NULL AND lineage IS NULL),
     down AS (SELECT partition_key, run_id, count(*) FILTER (WHERE status = 'success') AS n,
                     string_agg(status || coalesce(' ' || error_kind, '') || ' at ' || to_char(started_at, 'HH24:MI:SS.MS'), ', ' ORDER BY id) AS attempts
                FROM idem.pipeline_audit WHERE dag_id = $1 AND task_id = $3 GROUP BY 1, 2)`

// notLoadedOnceSQL is an upstream run (up LEFT JOIN down) whose downstream
// run did not load exactly once, a failover's double (TwiceLost) aside.
const notLoadedOnceSQL = `coalesce(down.n, 0) <> 1 AND NOT (up.reloaded AND down.n = 2)`

// checkDownstream, with downstream events on: every upstream success wrote
// exactly one downstream outbox row, each row was published, each upstream
// run's downstream run loaded exactly once (it inherits the run_id), no
// downstream load names a run the upstream did not load, and the
// downstream table ends equal to its upstream's.
func checkDownstream(ctx context.Context, db querier, o Options, r *Report) error {
	if !o.downstream() {
		return nil
	}
	d := &DownstreamFigures{}
	r.Downstream = d
	err := db.QueryRow(ctx, downstreamRunsSQL+`
SELECT (SELECT count(*) FROM up),
       (SELECT count(*) FROM ob),
       (SELECT count(*) FROM ob WHERE sent_at IS NULL),
       (SELECT count(*) FROM up WHERE (SELECT count(*) FROM ob WHERE ob.audit_id = up.id) <> 1),
       (SELECT count(*) FROM up JOIN down USING (partition_key, run_id) WHERE down.n = 1),
       (SELECT count(*) FROM up LEFT JOIN down USING (partition_key, run_id) WHERE `+notLoadedOnceSQL+`),
       (SELECT count(*) FROM up JOIN down USING (partition_key, run_id) WHERE up.reloaded AND down.n = 2),
       (SELECT count(*) FROM down WHERE n > 0 AND NOT EXISTS (SELECT 1 FROM up WHERE up.partition_key = down.partition_key AND up.run_id = down.run_id))`,
		pipeline, downstreamOf, downstreamDataset, audit.ReverifyAttribute).Scan(&d.UpstreamLoads, &d.Rows, &d.Unsent, &d.Missing, &d.LoadedOnce, &d.NotOnce, &d.TwiceLost, &d.Unexpected)
	if err != nil {
		return fmt.Errorf("chaos: check downstream: %w", err)
	}
	if d.NotOnce > 0 {
		// The evidence: each such upstream run, its load and outbox row,
		// and every attempt of its downstream run.
		rows, err := db.Query(ctx, downstreamRunsSQL+`
SELECT up.id, up.partition_key, up.run_id, to_char(up.finished_at, 'HH24:MI:SS.MS'),
       coalesce((SELECT to_char(sent_at, 'HH24:MI:SS.MS') FROM ob WHERE ob.audit_id = up.id LIMIT 1), 'none'),
       coalesce(down.n, 0), coalesce(down.attempts, 'none')
  FROM up LEFT JOIN down USING (partition_key, run_id) WHERE `+notLoadedOnceSQL+` ORDER BY up.id LIMIT 5`,
			pipeline, downstreamOf, downstreamDataset, audit.ReverifyAttribute)
		if err == nil {
			for rows.Next() {
				var id, n int64
				var part, run, at, sent, attempts string
				if rows.Scan(&id, &part, &run, &at, &sent, &n, &attempts) == nil {
					r.note("downstream run not loaded once: %s %s run %s (audit %d, done %s, outbox sent %s): %d successes; attempts: %s",
						downstreamOf, part, run, id, at, sent, n, cut(attempts, 300))
				}
			}
			rows.Close()
		}
	}
	var up, down string
	if err := db.QueryRow(ctx, checksumSQL("SELECT "+columns+" FROM analytics."+downstreamOf)).Scan(&up); err != nil {
		return err
	}
	if err := db.QueryRow(ctx, checksumSQL("SELECT "+columns+" FROM "+downstreamTarget)).Scan(&down); err != nil {
		return err
	}
	d.TableEqualsUp = up == down
	for _, v := range []struct {
		n    int
		what string
	}{
		{d.Missing, "upstream loads of " + downstreamOf + " without exactly one downstream outbox row"},
		{d.Unsent, "downstream outbox rows never published"},
		{d.NotOnce, "upstream runs whose downstream run did not load exactly once (lost or loaded twice)"},
		{d.Unexpected, "downstream loads of runs the upstream never loaded"},
	} {
		if v.n > 0 {
			r.violate("%d %s", v.n, v.what)
		}
	}
	if d.TwiceLost > 0 {
		r.note("%d downstream runs loaded twice: a failover lost their upstream load after its downstream event was published, and the re-verification's reload published another", d.TwiceLost)
	}
	if !d.TableEqualsUp {
		r.violate("%s has checksum %s, its upstream analytics.%s %s: the last downstream event was lost or loaded too early", downstreamTarget, down, downstreamOf, up)
	}
	return nil
}
