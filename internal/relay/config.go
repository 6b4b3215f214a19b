package relay

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of Config.
const (
	DefaultInterval        = 500 * time.Millisecond
	DefaultBatch           = 100
	DefaultLease           = 30 * time.Second
	DefaultPublishTimeout  = 10 * time.Second
	DefaultRetryDelay      = time.Second
	DefaultMaxRetryDelay   = time.Minute
	DefaultRetention       = 7 * 24 * time.Hour
	DefaultPurgeInterval   = 5 * time.Minute
	DefaultPurgeBatch      = 1000
	DefaultBacklogInterval = 5 * time.Second
	DefaultCoalesce        = 5 * time.Millisecond
)

// Config tunes a relay. Stream and SubjectPrefix are required; every other
// zero field takes its default.
type Config struct {
	// Stream is the events stream the subjects must land in (the publish
	// expects it, so a subject captured by another stream fails).
	Stream string
	// SubjectPrefix of the events: a row of dataset d goes to
	// schemas.Subject(SubjectPrefix, d).
	SubjectPrefix string
	// ResultsStream and ResultsSubjectPrefix are where result rows go
	// (package results); empty when the outbox holds none.
	ResultsStream, ResultsSubjectPrefix string
	// Lineage sends the OpenLineage events of the outbox; nil drops them.
	Lineage LineageSender

	// Interval between polls when nothing wakes the relay. Default DefaultInterval.
	Interval time.Duration
	// Batch is the most rows one pass claims and publishes at once. Default DefaultBatch.
	Batch int
	// Lease is how long a claim hides its rows from other relays. It must
	// outlast PublishTimeout, and stay well under JetStream's duplicate
	// window, so that the rows of a relay that died are re-published
	// inside it and deduplicated. Default DefaultLease.
	Lease time.Duration
	// PublishTimeout bounds the wait for one PubAck. Default DefaultPublishTimeout.
	PublishTimeout time.Duration
	// RetryDelay is the delay after a row's first failed publish; it
	// doubles per failure, with jitter, up to MaxRetryDelay. Defaults
	// DefaultRetryDelay and DefaultMaxRetryDelay.
	RetryDelay, MaxRetryDelay time.Duration
	// Retention is how long sent rows are kept (they say which stream
	// sequence each downstream event got) before they are deleted, every
	// PurgeInterval, PurgeBatch rows per statement. Defaults
	// DefaultRetention, DefaultPurgeInterval and DefaultPurgeBatch.
	Retention     time.Duration
	PurgeInterval time.Duration
	PurgeBatch    int
	// Coalesce is how long a pass waits after a wake, so that the rows of
	// loads committing meanwhile go out in the same claim (a result per
	// event made it one claim and one mark per event). Default
	// DefaultCoalesce.
	Coalesce time.Duration
	// BacklogInterval is how often the backlog is read for the Backlog
	// hook. Default DefaultBacklogInterval.
	BacklogInterval time.Duration
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.Interval, DefaultInterval)
	set(&c.Lease, DefaultLease)
	set(&c.PublishTimeout, DefaultPublishTimeout)
	set(&c.RetryDelay, DefaultRetryDelay)
	set(&c.MaxRetryDelay, DefaultMaxRetryDelay)
	set(&c.Retention, DefaultRetention)
	set(&c.PurgeInterval, DefaultPurgeInterval)
	set(&c.BacklogInterval, DefaultBacklogInterval)
	set(&c.Coalesce, DefaultCoalesce)
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.PurgeBatch == 0 {
		c.PurgeBatch = DefaultPurgeBatch
	}
	return c
}

// Validate names every field that is wrong and how to fix it.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("relay: "+format, args...)) }
	if c.Stream == "" {
		add("Stream is empty; name the events stream, e.g. IDEM_EVENTS")
	}
	if c.SubjectPrefix == "" {
		add("SubjectPrefix is empty; set the events' subject prefix, e.g. idem.ready")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"Interval", c.Interval}, {"Lease", c.Lease}, {"PublishTimeout", c.PublishTimeout},
		{"RetryDelay", c.RetryDelay}, {"MaxRetryDelay", c.MaxRetryDelay}, {"Retention", c.Retention},
		{"PurgeInterval", c.PurgeInterval}, {"BacklogInterval", c.BacklogInterval},
	} {
		if d.v < 0 {
			add("%s is %s; it must be positive (0 takes the default)", d.name, d.v)
		}
	}
	if c.Batch < 0 || c.PurgeBatch < 0 {
		add("Batch %d and PurgeBatch %d must be positive (0 takes the default)", c.Batch, c.PurgeBatch)
	}
	if c.Lease > 0 && c.Lease <= c.PublishTimeout {
		add("Lease %s must outlast PublishTimeout %s, or another relay re-claims rows still being published", c.Lease, c.PublishTimeout)
	}
	if c.MaxRetryDelay > 0 && c.MaxRetryDelay < c.RetryDelay {
		add("MaxRetryDelay %s is under RetryDelay %s; raise it", c.MaxRetryDelay, c.RetryDelay)
	}
	return errors.Join(errs...)
}
