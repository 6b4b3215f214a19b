// Package watch publishes the ready events of a files: source itself (the
// dataset's watch:): it lists the prefixes of the newest partitions, and
// publishes an event for each one that is complete by the source's ready
// rule and new, or whose files differ from those its last successful load
// read. Everything after the publish is the ordinary load: the partition
// is rebuilt from its current files in one transaction, and then: cascades.
//
// It decides from the store and the audit, never from memory alone, so
// that several replicas watching agree: the event's run_id names the
// listing's fingerprint (and the load it replaces), so two replicas
// publish the same Nats-Msg-Id and JetStream keeps one; once a load of the
// listing has an attempt, its fate (a retry, a dead letter) is the
// consumer's, and the watch publishes the partition again when its files
// change.
//
// Or when the listing's event was dead-lettered for no fault of its files
// (retryable): its retries exhausted, a crash loop, the store down past
// wait_up_to. The audit tells it, as the consumer decided it: the latest
// attempt failed transient with the event's last allowed load, or is
// left `started` from it, or failed for a wait that ran out. The watch
// then publishes the same listing again, Dataset.Retries times at most,
// under RetryRunID, the first Dataset.RetryAfter after that attempt ended
// and each next twice as long after its own; the replicas agree on when
// and on the run_id. A fatal verdict on what was read (a malformed file,
// a type that does not fit, checks refusing it), a cancellation, an
// attempt the consumer still retries or holds: never.
//
// S3 event notifications on a NATS subject, when configured, make a
// partition listed within seconds; they only name which partition to list
// (its key matched against the URL template), and the periodic listing
// stays, since notifications are delivered at most once and can be lost.
//
// It lists only exact partition prefixes, with a delimiter (files.Ready),
// never a whole bucket.
package watch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/internal/clock"
	"github.com/idem-data/idem/internal/defaults"
	"github.com/idem-data/idem/schemas"
	"github.com/idem-data/idem/sources/files"
)

// Why the watch publishes a partition.
const (
	ReasonNew     = "new"     // it never loaded
	ReasonChanged = "changed" // its files differ from its last load's
	ReasonRetry   = "retry"   // its listing's event was dead-lettered for no fault of its files
)

// RunIDPrefix starts the run_id of every event a watch publishes.
const RunIDPrefix = schemas.WatchRunIDPrefix

// Dataset is one watched dataset, as the service builds it from the config.
type Dataset struct {
	Name string
	Type schemas.PartitionType
	// Calendar is the dataset's expect:; nil lists UTC days or hours.
	Calendar *calendar.Expect
	Spec     files.Spec
	Store    files.Store
	// Every is the period of the listing; Last how many partitions it
	// lists.
	Every time.Duration
	Last  int
	// Subject is where S3 event notifications arrive; "" for none.
	Subject string
	// Retries is how many times a listing whose event was dead-lettered
	// for no fault of its files is published again (0: never), the first
	// RetryAfter after the dead letter (0: defaults.WatchRetryAfter), each
	// next twice as long after the previous one's.
	Retries    int
	RetryAfter time.Duration
	// Attempts is the dataset's budget of loads per event, after which
	// the consumer dead-letters it (config's MaxAttempts); 0:
	// defaults.MaxAttempts.
	Attempts int
}

// Watcher publishes the events the watches decide, for one pipeline.
type Watcher struct {
	Pipeline string
	DB       audit.Querier
	JS       jetstream.JetStream
	// Conn receives the notifications; nil ignores Dataset.Subject.
	Conn *nats.Conn
	// Stream and SubjectPrefix are the events stream's; Lookup validates
	// an event as the consumer will (config.Config.Lookup).
	Stream        string
	SubjectPrefix string
	Lookup        schemas.Lookup
	// Window is the events stream's duplicate window: within it a run
	// already published is not sent again, JetStream would drop it.
	Window time.Duration
	// Queue prefixes the queue group of each dataset's notifications, so
	// the replicas of one fleet share them; "" subscribes each replica.
	Queue string
	Log   zerolog.Logger
	// Published, when set, hears of each partition published (reason new,
	// changed or retry; not a duplicate another replica sent first); Failed of
	// each listing or publish that failed, for the metrics.
	Published func(dataset, reason string)
	Failed    func(dataset string)
	// Now is the clock the newest partitions are counted back from: the
	// site's (clock.Site.Now) in idem serve; nil is clock.Local.
	Now func() time.Time

	mu   sync.Mutex
	sent map[string]time.Time // message id → when published
}

// Decision is what one pass says of one partition.
type Decision struct {
	Partition string
	// Ready: the ready rule holds, and Fingerprint and Files describe the
	// listing.
	Ready       bool
	Fingerprint string
	Files       int
	// Reason is ReasonNew, ReasonChanged or ReasonRetry when the
	// partition is to be published, under RunID; "" otherwise, and Why
	// says why not.
	Reason string
	RunID  string
	Why    string
	// Retry is the number of the retry published (Reason ReasonRetry) or
	// waited for (RetryAt); 0 otherwise.
	Retry int
	// RetryAt is when retry Retry is due, while the partition waits for
	// it; zero otherwise.
	RetryAt time.Time
	// Err is a listing that failed; the next pass tries again.
	Err error
}

// RunID names a listing and the load it replaces (the audit id of the
// partition's latest success; 0 for none): the same files after another
// load are another run, never a duplicate the ledger would skip.
func RunID(fingerprint string, replaces int64) string {
	id := RunIDPrefix + fingerprint[:min(16, len(fingerprint))]
	if replaces > 0 {
		id += "-" + strconv.FormatInt(replaces, 10)
	}
	return id
}

// retrySuffix separates a listing's run_id from the number of its retry.
const retrySuffix = "-retry"

// RetryRunID names retry n (from 1) of the listing whose run is runID.
func RetryRunID(runID string, n int) string {
	return runID + retrySuffix + strconv.Itoa(n)
}

// retryOf is which publish of the listing whose first run is runID the
// run latest is: 0 for runID itself, n for RetryRunID(runID, n); false
// when latest is another run.
func retryOf(runID, latest string) (int, bool) {
	if latest == runID {
		return 0, true
	}
	rest, ok := strings.CutPrefix(latest, runID+retrySuffix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}

// waitOver are the fatal reasons of a load that gave up waiting for its
// source (files missing, or not ready, past wait_up_to; a store that did
// not answer meanwhile): the watch, which publishes only a listing it
// found complete, retries them. Every other fatal reason is a verdict on
// what was read.
var waitOver = map[string]bool{files.ReasonMissingFiles: true, files.ReasonNotReady: true}

// deadLettered says whether the latest attempt l of a listing's run left
// its event dead-lettered for no fault of its files, as the consumer
// decides it from the same attempt (consumer.Decide): what it was (for
// Why) when so, and otherwise why the watch leaves the run alone.
func deadLettered(l audit.LoadedListing, attempts int) (what string, retryable bool) {
	last := l.LatestAttempt >= attempts
	switch {
	case l.LatestStatus == audit.StatusFailed && l.LatestErrorKind == audit.KindTransient && last:
		return fmt.Sprintf("failed its last allowed load (%d of %d)", l.LatestAttempt, attempts), true
	case l.LatestStatus == audit.StatusStarted && last:
		// The process died in the last allowed load, and the crash-loop
		// guard dead-letters its event; or that load still runs, and the
		// retry waits for the partition's lock, then is skipped as
		// superseded if it loaded.
		return fmt.Sprintf("never finished its last allowed load (%d of %d)", l.LatestAttempt, attempts), true
	case l.LatestStatus == audit.StatusFailed && l.LatestErrorKind == audit.KindFatal && waitOver[l.LatestReason]:
		return "gave up waiting for its files (" + l.LatestReason + ")", true
	case l.LatestStatus == audit.StatusFailed && l.LatestErrorKind == audit.KindFatal:
		return "failed for good (" + cmp.Or(l.LatestReason, audit.KindFatal) + "): only new files publish it again", false
	case l.LatestStatus == audit.StatusFailed && l.LatestErrorKind == audit.KindCheck:
		return "refused by its checks: only new files publish it again", false
	case l.LatestStatus == audit.StatusStarted || l.LatestStatus == audit.StatusFailed:
		return "the consumer retries or holds it", false
	}
	return "", false // cancelled
}

// Decide lists the partitions keys of ds and compares each complete one
// with its last successful load. It publishes nothing.
func (w *Watcher) Decide(ctx context.Context, ds *Dataset, keys []string, now time.Time) ([]Decision, error) {
	out := make([]Decision, len(keys))
	var ready []string
	for i, key := range keys {
		d := &out[i]
		d.Partition = key
		p, err := schemas.ParsePartition(ds.Type, key)
		if err != nil {
			d.Err = err
			continue
		}
		prefix, err := files.Resolve(ds.Spec, p)
		if err != nil {
			d.Err = err
			continue
		}
		r, err := files.Ready(ctx, ds.Store, ds.Spec, prefix, now)
		var missing *files.MissingFilesError
		switch {
		case errors.As(err, &missing):
			d.Why = "no file yet"
			continue
		case err != nil:
			d.Err = err
			continue
		case !r.Ready:
			d.Why = "not ready: " + r.Reason
			continue
		}
		d.Ready, d.Fingerprint, d.Files = true, r.Listing.Fingerprint, len(r.Listing.Files)
		ready = append(ready, key)
	}
	if len(ready) == 0 {
		return out, nil
	}
	loaded, err := audit.LastLoadedListings(ctx, w.DB, w.Pipeline, ds.Name, ready)
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]audit.LoadedListing, len(loaded))
	for _, l := range loaded {
		byKey[l.Partition] = l
	}
	for i := range out {
		d := &out[i]
		if !d.Ready {
			continue
		}
		l := byKey[d.Partition]
		// A load that read no file records none: its fingerprint is "".
		current := d.Fingerprint
		if d.Files == 0 {
			current = ""
		}
		switch {
		case l.AuditID != 0 && current == l.Fingerprint:
			d.Why = "unchanged since its last load"
			continue
		case l.AuditID == 0:
			d.Reason = ReasonNew
		default:
			d.Reason = ReasonChanged
		}
		d.RunID = RunID(d.Fingerprint, l.AuditID)
		if n, ok := retryOf(d.RunID, l.LatestRunID); ok {
			// Its event was delivered: a retry or a dead letter is the
			// consumer's to decide, and publishing again would only load
			// the same files into the same failure, unless the dead
			// letter was not the files' fault.
			decideRetry(d, ds, l, n, now)
		}
	}
	return out, nil
}

// decideRetry decides d, whose listing's latest attempt l is of its
// run's publish n (0 the first): nothing, or retry n+1 once due.
func decideRetry(d *Decision, ds *Dataset, l audit.LoadedListing, n int, now time.Time) {
	run := d.RunID
	if n > 0 {
		run = RetryRunID(d.RunID, n)
	}
	d.Reason = ""
	what, retryable := deadLettered(l, cmp.Or(ds.Attempts, defaults.MaxAttempts))
	switch {
	case !retryable || ds.Retries <= 0:
		d.Why = "run " + run + " already attempted (" + l.LatestStatus + ")"
		if what != "" {
			d.Why += ": " + what
		}
		return
	case n >= ds.Retries:
		d.Why = fmt.Sprintf("gave up after %d retries: run %s %s; idem audit why %s %s names its dead letter, "+
			"which idem dlq replay loads again", n, run, what, ds.Name, d.Partition)
		return
	}
	after := cmp.Or(ds.RetryAfter, defaults.WatchRetryAfter)
	due := l.LatestAt.Add(after << n)
	if now.Before(due) {
		d.Retry, d.RetryAt = n+1, due
		d.Why = fmt.Sprintf("retry %d of %d after %s (at %s): run %s %s", n+1, ds.Retries, after<<n,
			due.UTC().Format(time.RFC3339), run, what)
		return
	}
	d.Reason, d.RunID, d.Retry = ReasonRetry, RetryRunID(d.RunID, n+1), n+1
	d.Why = "run " + run + " " + what
}

// Check lists the partitions keys of ds and publishes those Decide says.
func (w *Watcher) Check(ctx context.Context, ds *Dataset, keys []string, now time.Time) ([]Decision, error) {
	decisions, err := w.Decide(ctx, ds, keys, now)
	if err != nil {
		return nil, err
	}
	for _, d := range decisions {
		if d.Err != nil {
			w.failed(ds.Name)
			w.Log.Warn().Err(d.Err).Str("dataset", ds.Name).Str("partition", d.Partition).Msg("watch: could not list the partition; the next pass tries again")
		}
		if d.Reason == "" {
			continue
		}
		if err := w.publish(ctx, ds, d, now); err != nil {
			w.failed(ds.Name)
			return decisions, err
		}
	}
	return decisions, nil
}

func (w *Watcher) publish(ctx context.Context, ds *Dataset, d Decision, now time.Time) error {
	m, err := schemas.NewMessage(w.SubjectPrefix, schemas.PartitionReady{Dataset: ds.Name, Partition: d.Partition, RunID: d.RunID}, w.Lookup, now)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.sent == nil {
		w.sent = map[string]time.Time{}
	}
	for id, at := range w.sent {
		if now.Sub(at) >= w.Window {
			delete(w.sent, id)
		}
	}
	_, recent := w.sent[m.MsgID]
	w.mu.Unlock()
	if recent {
		return nil
	}
	ack, err := w.JS.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Data: m.Body},
		jetstream.WithMsgID(m.MsgID), jetstream.WithExpectStream(w.Stream))
	if err != nil {
		return fmt.Errorf("watch: publish %s %s: %w", ds.Name, d.Partition, err)
	}
	w.mu.Lock()
	w.sent[m.MsgID] = now
	w.mu.Unlock()
	ev := w.Log.Info()
	if ack.Duplicate {
		// Another replica published it first.
		ev = w.Log.Debug()
	} else if w.Published != nil {
		w.Published(ds.Name, d.Reason)
	}
	if d.Retry > 0 {
		ev = ev.Int("retry", d.Retry).Str("why", d.Why)
	}
	ev.Str("dataset", ds.Name).Str("partition", d.Partition).Str("reason", d.Reason).
		Str("fingerprint", d.Fingerprint[:min(16, len(d.Fingerprint))]).Int("files", d.Files).
		Str("run_id", d.RunID).Bool("duplicate", ack.Duplicate).Msg("watch: published the partition")
	return nil
}

func (w *Watcher) failed(dataset string) {
	if w.Failed != nil {
		w.Failed(dataset)
	}
}

// Run watches ds until ctx ends: a pass over its newest partitions at once
// and every ds.Every, and a pass over the partitions notifications name
// as they come.
func (w *Watcher) Run(ctx context.Context, ds *Dataset) error {
	cal := calendarOf(ds.Type, ds.Calendar)
	var (
		mu      sync.Mutex
		pending = map[string]bool{}
		wake    = make(chan struct{}, 1)
	)
	if ds.Subject != "" && w.Conn != nil {
		m, err := newMatcher(ds.Spec, ds.Type)
		if err != nil {
			return err
		}
		handle := func(msg *nats.Msg) {
			ps := m.partitionsOf(msg.Data)
			mu.Lock()
			for _, p := range ps {
				pending[p.Key] = true
			}
			mu.Unlock()
			if len(ps) > 0 {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}
		var sub *nats.Subscription
		if w.Queue != "" {
			sub, err = w.Conn.QueueSubscribe(ds.Subject, w.Queue+ds.Name, handle)
		} else {
			sub, err = w.Conn.Subscribe(ds.Subject, handle)
		}
		if err != nil {
			return fmt.Errorf("watch %s: subscribe to %s: %w", ds.Name, ds.Subject, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	w.Log.Info().Str("dataset", ds.Name).Dur("every", ds.Every).Int("last", ds.Last).Str("notifications", ds.Subject).
		Msg("watch: listing the newest partitions")
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		var keys []string
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			keys = Newest(cal, ds.Last, w.now())
			tick.Reset(ds.Every)
		case <-wake:
			now := w.now()
			mu.Lock()
			for k := range pending {
				if expected(cal, k, now) {
					keys = append(keys, k)
				}
			}
			clear(pending)
			mu.Unlock()
		}
		if len(keys) == 0 {
			continue
		}
		if _, err := w.Check(ctx, ds, keys, w.now()); err != nil && ctx.Err() == nil {
			w.Log.Warn().Err(err).Str("dataset", ds.Name).Msg("watch: pass failed; the next one tries again")
		}
	}
}

func (w *Watcher) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return clock.Local()
}
