// Package recheck reloads the recent partitions whose source changed
// since their last load (a dataset's recheck:). Each success stores a
// fingerprint of its source (handlers.Fingerprint); every pass takes the
// fingerprint of each partition inside the window again and, where it
// moved, publishes a forced reload. Everything after the publish is the
// ordinary load, and then: cascades.
//
// One replica runs a pass per period: the pass is taken with a lease
// that lasts the period (audit.TryLease), never given back early, so a
// fleet asks each source once per period, not once per replica. A pass
// spreads its queries over half the period rather than sending them in a
// burst. It decides from the audit, never from memory: the reload's
// run_id names the new fingerprint, its message id the load it replaces,
// so a second publisher is deduplicated by JetStream, and a move already
// published (its run recorded on the partition's fingerprint row) is not
// published again.
package recheck

import (
	"context"

	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/calendar"
	"github.com/idem-data/idem/schemas"
)

// RunIDPrefix starts the run_id of every reload a recheck publishes.
const RunIDPrefix = "recheck__"

// RunID names the fingerprint a reload loads.
func RunID(fingerprint string) string { return RunIDPrefix + fingerprint[:min(16, len(fingerprint))] }

// Dataset is one rechecked dataset, as the service builds it from the
// config.
type Dataset struct {
	Name   string
	Type   schemas.PartitionType
	Window time.Duration
	Every  time.Duration
}

func (ds *Dataset) window() calendar.Window {
	return calendar.Window{Length: ds.Window, Hourly: ds.Type == schemas.PartitionHour}
}

// Fingerprinter takes a partition's fingerprint as its load stores it
// (handlers.Handler.Fingerprint); ok is false for a dataset without
// recheck.
type Fingerprinter func(ctx context.Context, dataset string, key schemas.Partition, now time.Time) (fp audit.SourceFingerprint, ok bool, err error)

// Rechecker runs the rechecks of one pipeline.
type Rechecker struct {
	Pipeline    string
	DB          audit.Querier
	JS          jetstream.JetStream
	Fingerprint Fingerprinter
	// Stream is the events stream; SubjectPrefix the backfill lane's
	// (schemas.BackfillPrefix), so that reloads wait behind live events;
	// Lookup validates an event as the consumer will
	// (config.Config.Lookup).
	Stream        string
	SubjectPrefix string
	Lookup        schemas.Lookup
	Log           zerolog.Logger
	// Asked, when set, hears of each fingerprint taken; Published of each
	// reload published (not a duplicate); Failed of each partition whose
	// fingerprint or publish failed: for the metrics.
	Asked, Published, Failed func(dataset string)
}

// Decision is what one pass says of one partition.
type Decision struct {
	Partition string
	// Asked: its fingerprint was taken (one query).
	Asked bool
	// RunID is the reload published for it, and Moved what changed; ""
	// when nothing was, and Why says why not.
	RunID string
	Moved string
	Why   string
	Err   error
}

// Pass rechecks the partitions of ds inside its window at now: each whose
// latest attempt is a success is asked again, spread apart by gap. It
// returns a decision per partition of the window.
func (r *Rechecker) Pass(ctx context.Context, ds *Dataset, now time.Time, gap time.Duration) ([]Decision, error) {
	keys := ds.window().Keys(now)
	cands, err := audit.RecheckCandidates(ctx, r.DB, r.Pipeline, ds.Name, keys)
	if err != nil {
		return nil, err
	}
	out := make([]Decision, len(cands))
	first := true
	for i, c := range cands {
		d := &out[i]
		d.Partition = c.Partition
		switch c.LatestStatus {
		case "":
			d.Why = "never loaded"
			continue
		case audit.StatusSuccess:
		default:
			d.Why = "its latest attempt is " + c.LatestStatus + ", not a success"
			continue
		}
		if !first && gap > 0 {
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(gap):
			}
		}
		first = false
		r.check(ctx, ds, c, d, now)
	}
	return out, nil
}

// check asks one partition's source again and publishes its reload when
// the fingerprint moved.
func (r *Rechecker) check(ctx context.Context, ds *Dataset, c audit.RecheckCandidate, d *Decision, now time.Time) {
	key, err := schemas.ParsePartition(ds.Type, c.Partition)
	if err != nil {
		d.Err = err
		return
	}
	fp, ok, err := r.Fingerprint(ctx, ds.Name, key, now)
	d.Asked = ok
	if ok && r.Asked != nil {
		r.Asked(ds.Name)
	}
	switch {
	case err != nil:
		d.Err = err
		return
	case !ok:
		d.Why = "the dataset has no recheck"
		return
	}
	k := audit.RunKey{Pipeline: r.Pipeline, Dataset: ds.Name, Partition: c.Partition}
	switch {
	case c.Stored == nil:
		// Loaded before recheck: was set: what it read is unknown; from
		// now on a move is measured from here.
		d.Why = "baseline taken (loaded before its source was fingerprinted)"
		d.Err = audit.RecordRecheck(ctx, r.DB, k, c.LatestID, fp)
		return
	case c.Stored.Hash == fp.Hash:
		d.Why = "unchanged since its last load"
		d.Err = audit.RecordRecheck(ctx, r.DB, k, c.StoredID, fp)
		return
	}
	runID := RunID(fp.Hash)
	d.Moved = audit.Moved(*c.Stored, fp)
	if c.MovedRunID == runID {
		// Published already: its load (or its fate, a dead letter) is the
		// consumer's; the source moved again only if the run differs.
		d.Why = "reload " + runID + " already published"
		d.Err = audit.RecordRecheck(ctx, r.DB, k, c.StoredID, fp)
		return
	}
	if err := r.publish(ctx, ds, c, runID); err != nil {
		d.Err = err
		return
	}
	d.RunID = runID
	d.Err = audit.RecordMove(ctx, r.DB, k, c.StoredID, *c.Stored, fp, runID)
}

// publish sends the forced reload of c under runID. Its message id names
// the load it replaces (the forced message's time is the stored load's
// audit id), so two publishers of one move are deduplicated.
func (r *Rechecker) publish(ctx context.Context, ds *Dataset, c audit.RecheckCandidate, runID string) error {
	ev := schemas.PartitionReady{Dataset: ds.Name, Partition: c.Partition, RunID: runID, Force: true}
	m, err := schemas.NewMessage(r.SubjectPrefix, ev, r.Lookup, time.Unix(0, c.StoredID))
	if err != nil {
		return err
	}
	ack, err := r.JS.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Data: m.Body},
		jetstream.WithMsgID(m.MsgID), jetstream.WithExpectStream(r.Stream))
	if err != nil {
		return fmt.Errorf("recheck: publish %s %s: %w", ds.Name, c.Partition, err)
	}
	if !ack.Duplicate && r.Published != nil {
		r.Published(ds.Name)
	}
	return nil
}

// LeaseName is the lease a pass of dataset is taken with.
func LeaseName(pipeline, dataset string) string { return "recheck:" + pipeline + ":" + dataset }

// Run rechecks ds until ctx ends: it tries the pass's lease every quarter
// period (at least every second), and the replica that takes it runs the
// pass, its queries spread over half the period.
func (r *Rechecker) Run(ctx context.Context, ds *Dataset) error {
	poll := max(ds.Every/4, time.Second)
	r.Log.Info().Str("dataset", ds.Name).Dur("window", ds.Window).Dur("every", ds.Every).
		Msg("recheck: asking the sources of the recent partitions")
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if _, err := r.Once(ctx, ds); err != nil && ctx.Err() == nil {
			r.Log.Warn().Err(err).Str("dataset", ds.Name).Msg("recheck: pass stopped; the next one carries on")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Once runs a pass of ds if no replica ran one within its period: it
// takes the pass's lease for a period and keeps it (ran false when
// another replica holds it).
func (r *Rechecker) Once(ctx context.Context, ds *Dataset) (ran bool, err error) {
	_, ok, err := audit.TryLease(ctx, r.DB, LeaseName(r.Pipeline, ds.Name), ds.Every)
	if err != nil || !ok {
		return false, err
	}
	start := time.Now()
	n := len(ds.window().Keys(start))
	decisions, err := r.Pass(ctx, ds, start, ds.Every/2/time.Duration(max(n, 1)))
	var asked, moved, failed int
	for _, d := range decisions {
		if d.Asked {
			asked++
		}
		if d.RunID != "" {
			moved++
			r.Log.Info().Str("dataset", ds.Name).Str("partition", d.Partition).Str("run_id", d.RunID).Str("moved", d.Moved).
				Msg("recheck: the source changed; published its reload")
		}
		if d.Err != nil {
			failed++
			if r.Failed != nil {
				r.Failed(ds.Name)
			}
			r.Log.Warn().Err(d.Err).Str("dataset", ds.Name).Str("partition", d.Partition).Msg("recheck: could not recheck the partition; the next pass tries again")
		}
	}
	r.Log.Info().Str("dataset", ds.Name).Int("partitions", len(decisions)).Int("asked", asked).Int("reloads", moved).
		Int("failed", failed).Dur("took", time.Since(start)).Msg("recheck: pass done")
	return true, err
}
