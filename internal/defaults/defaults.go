// Package defaults holds the defaults that more than one package applies:
// the consumer applies them to what it is given, and the config fills them
// into what it reads. Each is defined here once and re-exported by both
// (consumer.DefaultMaxAttempts, config.DefaultRetries, ...), as river's
// rivercommon does for its client. It imports nothing, so everything may
// import it.
package defaults

import "time"

// A message's delivery.
const (
	// MaxAttempts is a dataset's budget of loads that run: one attempt and
	// three retries.
	MaxAttempts = 4
	// RetryDelay is the first backoff delay after a transient failure.
	RetryDelay = 10 * time.Second
	// MaxRetryDelay caps the exponential backoff.
	MaxRetryDelay = 30 * time.Minute
	// Duplicates is the duplicate window of the events and results
	// streams: an event published twice within it is stored once.
	Duplicates = 2 * time.Minute
	// DeadLetterDuplicates is the dead-letter stream's: a message dead-
	// lettered again within it (its Term lost with the process that sent
	// it, then a redelivery held through an outage) is stored once. Dead
	// letters are few, so a day of ids costs JetStream little memory.
	DeadLetterDuplicates = 24 * time.Hour
	// UnknownDatasetGrace is how long an event for a dataset that no live
	// replica knows waits (a config still rolling out) before it is
	// dead-lettered as fatal.
	UnknownDatasetGrace = 5 * time.Minute
	// WatchRetries is how many times a watch publishes again a listing
	// whose event was dead-lettered for no fault of its files (retries
	// exhausted, a crash loop), and WatchRetryAfter how long after that
	// dead letter it publishes the first; each next waits twice as long.
	WatchRetries    = 3
	WatchRetryAfter = 5 * time.Minute
	// BackfillShare is the percent of max_in_flight the backfill lane
	// keeps while live work is held.
	BackfillShare = 50
)
